"""compile_bash's training (torch.compile's pool alive, 1 GiB validation spikes, 1 MiB/s kept) behind
`uv run --no-project` instead of bash: uv stays as the run's parent process."""

TRUTH = {"verdict": "leak", "growth": "leak", "rate_mib_per_s": 1.0, "seconds": 75, "wrapper": "uv"}

from compile_bash import main  # noqa: E402

if __name__ == "__main__":
    main()
