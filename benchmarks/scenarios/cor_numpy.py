"""cor_dicts's data (2,000,000 samples, 3 forked persistent workers, shuffled) held in numpy arrays: reading them
writes nothing the workers share with the main, so every process's memory stays flat."""

TRUTH = {"verdict": "no_leak", "growth": "flat", "items": 2_000_000, "seconds": 75}

from cor_dicts import Arrays, N, main  # noqa: E402

if __name__ == "__main__":
    main(Arrays(N))
