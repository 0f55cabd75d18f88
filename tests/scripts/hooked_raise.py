# The user's own excepthook hides the exception from a hook chained the ordinary way: rich's traceback printer
# or a bare custom hook that prints one line.
import sys

if sys.argv[1] == "rich":
    from rich.traceback import install

    install()
else:
    sys.excepthook = lambda etype, value, tb: print(f"custom hook: {value}", file=sys.stderr)


def load_shard(i):
    raise ValueError(f"shard {i} is corrupt")


load_shard(7)
