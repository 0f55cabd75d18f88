"""What every scenario shares: its length (``--seconds``, default the TRUTH's), a clock, and the TRUTH line it
prints at the end with what it really did (the rate it kept, the size of each step), for the benchmark to read."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

MIB = 1 << 20


def seconds(default: Any) -> float:
    """The run's length: ``--seconds S`` on the command line, else the scenario's own."""
    if "--seconds" in sys.argv:
        return float(sys.argv[sys.argv.index("--seconds") + 1])
    return float(default)


class Clock:
    """Seconds since the scenario started, and whether its time is up."""

    def __init__(self, total: float) -> None:
        self.t0 = time.monotonic()
        self.total = total

    def now(self) -> float:
        return time.monotonic() - self.t0

    def running(self) -> bool:
        return self.now() < self.total


_last_log = [0.0]


def log(clock: Clock, loss: Any, every_s: float = 5.0) -> None:
    """A training's log line every few seconds (a run that prints is no stalled run)."""
    if clock.now() - _last_log[0] >= every_s:
        _last_log[0] = clock.now()
        value = loss.item() if hasattr(loss, "item") else loss
        print(f"t={clock.now():.0f}s loss={value:.4f}", flush=True)


def truth(**measured: float) -> None:
    """Print what the scenario really did (bytes, seconds), one line the benchmark parses."""
    print(
        "TRUTH " + " ".join(f"{k}={v:.0f}" if abs(v) >= 100 else f"{k}={v:.3f}" for k, v in measured.items()),
        flush=True,
    )


def tiny_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    """A small MLP and its optimizer (torch imported here: the numpy scenarios do without)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(model: nn.Module, opt: torch.optim.Optimizer) -> torch.Tensor:
    """One real training step on a synthetic batch; its loss."""
    import torch
    from torch import nn

    x = torch.randn(256, 64)
    loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
    opt.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]
    opt.step()
    return loss


def tiny_bert(**config: Any) -> Any:
    """A tiny BERT classifier built from a config (2 layers, hidden 128, 64 tokens, vocabulary 100: nothing
    downloaded), seeded; ``config``: more of BertConfig's fields (output_hidden_states=True)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(
        vocab_size=100,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=512,
        max_position_embeddings=64,
        num_labels=2,
        **config,
    )
    torch.manual_seed(0)
    return BertForSequenceClassification(cfg)


def cpu_training_args(output_dir: str, **args: Any) -> Any:
    """The Trainer's arguments every HF scenario shares (CPU, batch 16, no saving, logging or reporting, a run
    that a callback ends); ``args``: the scenario's own (evaluation, workers)."""
    from transformers import TrainingArguments

    base: dict[str, Any] = {
        "output_dir": output_dir,
        "num_train_epochs": 1000,
        "per_device_train_batch_size": 16,
        "eval_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "save_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
    }
    return TrainingArguments(**{**base, **args})


def quiet_lightning_trainer(callbacks: list[Any], **kw: Any) -> Any:
    """A Lightning Trainer on one CPU without a logger, checkpoints, bars, summary or sanity validation (a run that
    a callback ends); ``kw``: the scenario's own arguments."""
    import lightning as L

    return L.Trainer(
        max_epochs=1000,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        **kw,
    )
