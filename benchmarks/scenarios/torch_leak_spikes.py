"""Plain torch: a training loop keeps 0.1 MiB of activations every 0.1 s step (1 MiB/s, never freed) while a
validation pass every 10 s holds 400 MiB for 2 s. The seed's question in small: a slow leak under the spikes."""

TRUTH = {"verdict": "leak", "growth": "leak", "rate_mib_per_s": 1.0, "seconds": 60}

import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from _common import MIB, Clock, log, seconds, tiny_model, train_step, truth  # noqa: E402

KEEP_MIB = 0.0 if "--no-leak" in sys.argv else 0.1
STEP_S, VAL_EVERY_S, VAL_S, VAL_MIB = 0.1, 10.0, 2.0, 400


def main(keep_mib: float) -> None:
    model, opt = tiny_model()
    clock = Clock(seconds(TRUTH["seconds"]))
    kept: list[torch.Tensor] = []
    first: float | None = None
    last: float | None = None
    next_val = VAL_EVERY_S
    while clock.running():
        model.train()
        step_end = clock.now() + STEP_S
        loss = train_step(model, opt)
        if keep_mib:
            kept.append(torch.ones(int(keep_mib * MIB) // 4))  # the leak: kept, written, never freed
            last = clock.now()
            first = last if first is None else first
        time.sleep(max(0.0, step_end - clock.now()))
        log(clock, loss)
        if clock.now() >= next_val:
            model.eval()
            with torch.no_grad():
                acts = torch.ones(VAL_MIB * MIB // 4)  # the validation's activations, freed at its end
                end = clock.now() + VAL_S
                while clock.now() < end:
                    model(torch.randn(256, 64))
                    time.sleep(0.02)
                del acts
            next_val += VAL_EVERY_S
    rate = (
        (len(kept) - 1) * keep_mib * MIB / (last - first)
        if first is not None and last is not None and last > first
        else 0.0
    )
    truth(rate_bytes_per_s=rate, kept_bytes=len(kept) * keep_mib * MIB)


if __name__ == "__main__":
    main(KEEP_MIB)
