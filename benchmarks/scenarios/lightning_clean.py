"""Lightning 2.x: lightning_val_kept's training with nothing kept (2 + 2 persistent workers, validation every
~3 s): a clean run."""

TRUTH = {"verdict": "no_leak", "growth": "flat", "seconds": 60}

from lightning_val_kept import main  # noqa: E402

if __name__ == "__main__":
    main(False)
