"""Three CPU trainings written after ``memscope fit`` was tuned, to see how it does on programs it has not seen
(``fit_accuracy.py --heldout``; synthetic data, nothing downloaded). The forecast was not changed on them; its high
side (``predicted_peak_high_bytes``) was added after their first 12 runs (BENCHMARKS.md, "Held out").

    python benchmarks/fit_workloads_heldout.py bert --batch 16
    python benchmarks/fit_workloads_heldout.py resnet --batch 64
    python benchmarks/fit_workloads_heldout.py lstm --batch 32

- bert: a BERT classifier (4 layers, hidden 256, 128 tokens) built from its config and trained by the Hugging Face
  Trainer (AdamW, an evaluation every ``--eval-every`` steps by the Trainer itself, its own DataLoader).
- resnet: a small ResNet (basic blocks, 3x32x32, widths 32-64-128), Adam, label smoothing, a plain loop.
- lstm: a 2-layer LSTM language model (vocabulary 8000, 256 wide, 64 tokens), Adam, gradients clipped.

Each ends by itself after ``--steps`` training steps, evaluating every ``--eval-every`` steps.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
from torch import nn


class Basic(nn.Module):
    def __init__(self, i: int, o: int, stride: int) -> None:
        super().__init__()
        self.a = nn.Sequential(
            nn.Conv2d(i, o, 3, stride, 1, bias=False),
            nn.BatchNorm2d(o),
            nn.ReLU(),
            nn.Conv2d(o, o, 3, 1, 1, bias=False),
            nn.BatchNorm2d(o),
        )
        self.skip = (
            nn.Identity()
            if stride == 1 and i == o
            else nn.Sequential(nn.Conv2d(i, o, 1, stride, bias=False), nn.BatchNorm2d(o))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x) + self.skip(x))


def resnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, 1, 1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        Basic(32, 32, 1),
        Basic(32, 64, 2),
        Basic(64, 128, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    )


class LSTMLM(nn.Module):
    def __init__(self, vocab: int = 8000, d: int = 256) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.LSTM(d, d, num_layers=2, batch_first=True, dropout=0.1)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.emb(tokens))[0])


def plain_loop(a: argparse.Namespace) -> None:
    if a.model == "resnet":
        model: nn.Module = resnet()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        ce = nn.CrossEntropyLoss(label_smoothing=0.1)

        def loss_of() -> torch.Tensor:
            x = torch.randn(a.batch, 3, 32, 32)
            return ce(model(x), torch.randint(0, 10, (a.batch,)))

    else:
        model = LSTMLM()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def loss_of() -> torch.Tensor:
            tokens = torch.randint(0, 8000, (a.batch, 65))
            logits = model(tokens[:, :-1])
            return nn.functional.cross_entropy(logits.reshape(-1, 8000), tokens[:, 1:].reshape(-1))

    for step in range(1, a.steps + 1):
        model.train()
        opt.zero_grad(set_to_none=True)
        loss_of().backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % a.eval_every == 0:
            model.eval()
            with torch.no_grad():
                for _ in range(3):
                    loss_of()


def bert(a: argparse.Namespace) -> None:
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n: int) -> None:
            self.n = n

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, i: int) -> dict:
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 8000, (128,), generator=g), "labels": i % 2}

    cfg = BertConfig(
        vocab_size=8000,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
        max_position_embeddings=128,
        num_labels=2,
    )
    model = BertForSequenceClassification(cfg)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=a.batch,
            per_device_eval_batch_size=a.batch,
            max_steps=a.steps,
            eval_strategy="steps",
            eval_steps=a.eval_every,
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=True,
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        Trainer(
            model=model, args=args, train_dataset=Tokens(a.batch * a.steps), eval_dataset=Tokens(3 * a.batch)
        ).train()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["bert", "resnet", "lstm"])
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--eval-every", type=int, default=10)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    t0 = time.monotonic()
    bert(a) if a.model == "bert" else plain_loop(a)
    print(f"done {a.model} batch {a.batch}: {a.steps} steps in {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
