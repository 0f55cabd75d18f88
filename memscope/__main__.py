"""``python -m memscope ...``: the same as the ``memscope`` command (where the script is not on PATH, as in a
notebook's ``!python -m memscope run train.py``)."""

from .cli import console_main

console_main()
