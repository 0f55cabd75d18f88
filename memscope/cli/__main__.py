"""``python -m memscope.cli``."""

import sys

from . import main

sys.exit(main())
