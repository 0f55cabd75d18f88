"""Hugging Face Trainer, clean, dataloader_num_workers=2: the training's loader keeps 2 workers, and each
evaluation (every 8 s) starts its own loader's 2 workers beside them, which exit at its end (the tree holds 4
workers, then 2 again). No process's memory grows; the tree's rises a little during each evaluation."""

TRUTH = {"verdict": "no_leak", "growth": "spikes", "growth_also": ["flat"], "seconds": 60}

from hf_eval_kept import main  # noqa: E402

if __name__ == "__main__":
    main(False, 2, 8.0)
