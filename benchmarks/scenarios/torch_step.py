"""Plain torch: at 20 s the training loads a 300 MiB lookup table it keeps to the end (a one-time step), then
trains on with a flat floor."""

TRUTH = {"verdict": "no_leak", "growth": "step", "step_mib": 300, "seconds": 60}

import time  # noqa: E402

import torch  # noqa: E402
from _common import MIB, Clock, log, seconds, tiny_model, train_step, truth  # noqa: E402

if __name__ == "__main__":
    model, opt = tiny_model()
    clock = Clock(seconds(TRUTH["seconds"]))
    table, at = None, None
    while clock.running():
        loss = train_step(model, opt)
        if table is None and clock.now() >= 20:
            table = torch.ones(300 * MIB // 4)  # loaded once, used to the end
            at = clock.now()
        time.sleep(0.1)
        log(clock, loss)
    truth(step_bytes=300 * MIB, step_at_s=at or -1)
