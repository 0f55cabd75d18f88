"""Hugging Face Trainer with dataloader_num_workers=2, whose Dataset caches every sample it builds (its token ids
and an 8 KiB feature tensor) in a dict on itself: each worker keeps a growing copy of what it built, and the
training's 100,000 samples are never all seen in the run. The main process's memory is flat; the two workers
leak (~1-3 MiB/s together).

Held out (written after the verdict was tuned on benchmarks/scenarios/): right in 6 of 6 runs at c4dfff8, and no
change was made on it."""

TRUTH = {"verdict": "leak", "growth": "leak", "role": "dataloader_worker", "seconds": 75}

import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from _common import Clock, cpu_training_args, seconds, tiny_bert, truth  # noqa: E402
from hf_eval_kept import Every  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import Trainer  # noqa: E402

CLOCK = Clock(seconds(TRUTH["seconds"]))


class Caching(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int, seq: int = 64) -> None:
        self.n, self.seq = n, seq
        self.cache: dict[int, dict[str, torch.Tensor]] = {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if i not in self.cache:  # "tokenize once": kept forever, in each worker's own copy of the Dataset
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(5, 100, (self.seq,), generator=g)
            self.cache[i] = {"input_ids": ids, "features": torch.randn(2048, generator=g)}
        ids = self.cache[i]["input_ids"]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": (ids[0] > 50).long()}


if __name__ == "__main__":
    model = tiny_bert()
    with tempfile.TemporaryDirectory() as out:
        args = cpu_training_args(out, dataloader_num_workers=2)
        cb = Every(CLOCK, None)  # the deadline, no evaluation
        Trainer(model=model, args=args, train_dataset=Caching(100_000), callbacks=[cb]).train()
    truth(steps_trained=cb.steps, samples_seen=cb.steps * 16)
