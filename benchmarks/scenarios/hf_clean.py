"""Hugging Face Trainer, clean: hf_eval_kept's tiny BERT and evaluation every 10 s, nothing kept, no workers."""

TRUTH = {"verdict": "no_leak", "growth": "flat", "seconds": 60}

from hf_eval_kept import main  # noqa: E402

if __name__ == "__main__":
    main(False, 0, 10.0)
