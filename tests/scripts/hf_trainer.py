# A tiny Hugging Face Trainer run: a BERT built from a config (nothing downloaded), synthetic token data, 2
# DataLoader workers, an evaluation every 10 steps (--eval-steps N: every N). With --leak, a callback keeps 4 MiB per
# evaluation batch (validation outputs kept, never freed). Prints the truth the test compares memscope's phases with.
# Each evaluation starts its own loader's 2 workers beside the training's: the tree holds 4 workers, then 2 again.
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

leak = "--leak" in sys.argv
seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 25
eval_steps = int(sys.argv[sys.argv.index("--eval-steps") + 1]) if "--eval-steps" in sys.argv else 10


class Tokens(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, 100, (n, 32), generator=g)
        self.labels = (self.ids[:, 0] > 50).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(32, dtype=torch.long), "labels": self.labels[i]}


class Watch(TrainerCallback):
    def __init__(self):
        self.end = time.monotonic() + seconds
        self.kept = []
        self.eval_s = 0.0

    def on_step_end(self, args, state, control, **kw):
        if time.monotonic() > self.end:
            control.should_training_stop = True

    def on_prediction_step(self, args, state, control, **kw):
        if leak:
            self.kept.append(torch.ones(1 << 20))


class TimedTrainer(Trainer):
    """The framework's own evaluation span, whole (its eval DataLoader's workers start inside it)."""

    def evaluate(self, *a, **kw):
        t0 = time.monotonic()
        try:
            return super().evaluate(*a, **kw)
        finally:
            watch.eval_s += time.monotonic() - t0


if __name__ == "__main__":
    cfg = BertConfig(
        vocab_size=100,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
        num_labels=2,
    )
    model = BertForSequenceClassification(cfg)
    watch = Watch()
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            num_train_epochs=1000,
            per_device_train_batch_size=16,
            per_device_eval_batch_size=16,
            eval_strategy="steps",
            eval_steps=eval_steps,
            dataloader_num_workers=2,
            report_to=[],
            use_cpu=True,
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
        )
        trainer = TimedTrainer(
            model=model, args=args, train_dataset=Tokens(4096), eval_dataset=Tokens(160), callbacks=[watch]
        )
        t0 = time.monotonic()
        trainer.train()
        total = time.monotonic() - t0
    print(f"TRUTH fit_s={total:.2f} val_s={watch.eval_s:.2f} kept={len(watch.kept)}", flush=True)
