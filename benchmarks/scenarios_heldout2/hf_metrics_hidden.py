"""Hugging Face Trainer, a tiny BERT whose config asks for its hidden states; its ``compute_metrics`` keeps every
evaluation's predictions (logits and the three layers' hidden states of 256 samples, ~25 MiB) in a list "for the
final report". An evaluation every ~10 s: a staircase, one stair per evaluation.

Held out, second round: written after 37b103f and never used to tune the verdict."""

TRUTH = {"verdict": "leak", "growth": "leak", "per_step_mib": 25, "seconds": 80}

import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _common import Clock, cpu_training_args, seconds, tiny_bert, truth  # noqa: E402
from hf_eval_kept import Every  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import Trainer  # noqa: E402

CLOCK = Clock(seconds(TRUTH["seconds"]))
REPORT: list[Any] = []  # every evaluation's predictions, kept for a report that is never written


class Tokens(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int, seq: int = 64) -> None:
        g = torch.Generator().manual_seed(n)
        self.ids = torch.randint(5, 100, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = self.ids[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": (ids[0] > 50).long()}


def nbytes(x: Any) -> int:
    return sum(nbytes(v) for v in x) if isinstance(x, (tuple, list)) else int(getattr(x, "nbytes", 0))


def compute_metrics(p: Any) -> dict[str, float]:
    REPORT.append(p.predictions)  # the mistake: kept, all of it
    logits = p.predictions[0] if isinstance(p.predictions, tuple) else p.predictions
    return {"accuracy": float((np.argmax(logits, -1) == p.label_ids).mean())}


if __name__ == "__main__":
    model = tiny_bert(output_hidden_states=True)
    cb = Every(CLOCK, 10.0)  # the deadline, and an evaluation every 10 s
    with tempfile.TemporaryDirectory() as out:
        args = cpu_training_args(out, per_device_eval_batch_size=32)
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=Tokens(4096),
            eval_dataset=Tokens(256),
            compute_metrics=compute_metrics,
            callbacks=[cb],
        )
        trainer.train()
    each = [nbytes(r) for r in REPORT]
    truth(evaluations=len(each), per_step_bytes=each[0] if each else 0, steps_trained=cb.steps)
