"""Hugging Face Trainer (a tiny BERT built from a config, synthetic tokens, nothing downloaded) whose evaluation
keeps its logits with their graph: prediction_step runs the model with autograd on and keeps the logits for a
metric computed "later" (never), so each evaluation keeps every activation of its forward passes. An evaluation
every 10 s: a staircase, ~+48 MiB per evaluation (64 samples) (the TRUTH line gives the main's private memory step measured
around each evaluation)."""

TRUTH = {"verdict": "leak", "growth": "leak", "per_step_mib": 48, "seconds": 80}

import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from _common import Clock, cpu_training_args, seconds, tiny_bert, truth  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import Trainer, TrainerCallback  # noqa: E402

EVAL_EVERY_S = 10.0


def private_bytes() -> int:
    """This process's resident anonymous memory (statm: resident - shared), in bytes."""
    with open("/proc/self/statm") as f:
        _, res, shared = (int(v) for v in f.read().split()[:3])
    return (res - shared) * os.sysconf("SC_PAGE_SIZE")


class Tokens(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int, seq: int = 64) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, 100, (n, seq), generator=g)
        self.labels = (self.ids[:, 0] > 50).long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.labels[i]}


class Every(TrainerCallback):
    """Stops at the deadline; with ``every_s``, asks for an evaluation every ``every_s`` seconds of training."""

    def __init__(self, clock: Clock, every_s: float | None) -> None:
        self.clock, self.every_s = clock, every_s
        self.next = every_s or 0.0
        self.steps = 0

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.steps += 1
        if self.steps % 50 == 0:
            print(f"step {self.steps} t={self.clock.now():.0f}s", flush=True)
        if not self.clock.running():
            control.should_training_stop = True
        elif self.every_s and self.clock.now() >= self.next:
            control.should_evaluate = True
            self.next = self.clock.now() + self.every_s


class KeepsLogits(Trainer):
    """An evaluation that keeps its logits with their graph (autograd on: the mistake of the incident)."""

    keep = False
    kept: list[torch.Tensor] = []
    steps: list[int] = []

    def prediction_step(self, model: Any, inputs: Any, prediction_loss_only: bool, ignore_keys: Any = None) -> Any:
        if not self.keep:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        inputs = self._prepare_inputs(inputs)
        out = model(**inputs)  # no torch.no_grad(): the graph stays with the logits
        self.kept.append(out.logits)
        return out.loss.detach(), None, None

    def evaluate(self, *a: Any, **kw: Any) -> Any:
        before = private_bytes()
        try:
            return super().evaluate(*a, **kw)
        finally:
            self.steps.append(private_bytes() - before)
            print(f"evaluation {len(self.steps)}: main private {self.steps[-1] / 2**20:+.0f} MiB", flush=True)


def main(keep: bool, workers: int, every_s: float | None, eval_steps: int | None = None) -> None:
    model = tiny_bert()
    clock = Clock(seconds(TRUTH["seconds"]))
    cb = Every(clock, every_s)
    KeepsLogits.keep = keep
    with tempfile.TemporaryDirectory() as out:
        args = cpu_training_args(
            out,
            per_device_eval_batch_size=16,
            eval_strategy="steps" if eval_steps else "no",
            eval_steps=eval_steps,
            dataloader_num_workers=workers,
        )
        trainer = KeepsLogits(
            model=model, args=args, train_dataset=Tokens(4096), eval_dataset=Tokens(64), callbacks=[cb]
        )
        trainer.train()
    steps = sorted(KeepsLogits.steps)
    med = steps[len(steps) // 2] if steps else 0
    truth(evaluations=len(steps), per_step_bytes=med, steps_trained=cb.steps)


if __name__ == "__main__":
    main("--no-leak" not in sys.argv, 0, EVAL_EVERY_S)
