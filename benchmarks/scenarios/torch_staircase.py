"""Plain torch: every 12 s an evaluation keeps its 40 MiB of outputs in a history list that is never cleared (a
staircase: +40 MiB per evaluation), between which the training's floor is flat."""

TRUTH = {"verdict": "leak", "growth": "leak", "per_step_mib": 40, "seconds": 80}

import time  # noqa: E402

import torch  # noqa: E402
from _common import MIB, Clock, log, seconds, tiny_model, train_step, truth  # noqa: E402

EVERY_S, STEP_MIB = 12.0, 40

if __name__ == "__main__":
    model, opt = tiny_model()
    clock = Clock(seconds(TRUTH["seconds"]))
    history, next_eval = [], EVERY_S
    while clock.running():
        model.train()
        loss = train_step(model, opt)
        time.sleep(0.1)
        log(clock, loss)
        if clock.now() >= next_eval:
            model.eval()
            with torch.no_grad():
                outs = []
                for _ in range(20):
                    model(torch.randn(256, 64))
                    outs.append(torch.ones(STEP_MIB * MIB // 20 // 4))  # the evaluation's outputs
                    time.sleep(0.05)
                history.append(outs)  # kept for a report that never comes
            next_eval += EVERY_S
    truth(per_step_bytes=STEP_MIB * MIB, evaluations=len(history))
