"""Plain torch: the same training and 400 MiB validation spikes every 10 s as torch_leak_spikes, nothing kept."""

TRUTH = {"verdict": "no_leak", "growth": "spikes", "seconds": 60}

from torch_leak_spikes import main  # noqa: E402

if __name__ == "__main__":
    main(0.0)
