"""memscope's version (standard library only, layer 0: the CLI reads it without importing the package's face)."""

__version__ = "0.1.0"
