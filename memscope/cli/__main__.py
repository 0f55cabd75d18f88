"""``python -m memscope.cli``."""

from . import console_main

console_main()
