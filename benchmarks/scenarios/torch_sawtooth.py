"""Plain torch, one process, pytorch/examples' word_language_model in small: an LSTM trained on synthetic tokens
whose epoch keeps each batch's hidden states for its log (75 MiB by the epoch's end) and drops them at the next
epoch: a 75 MiB sawtooth every ~8 s over a flat floor."""

TRUTH = {"verdict": "no_leak", "growth": "spikes", "amplitude_mib": 75, "seconds": 60}

import time  # noqa: E402

import torch  # noqa: E402
from _common import MIB, Clock, log, seconds, truth  # noqa: E402
from torch import nn  # noqa: E402

BATCHES, SAW_MIB = 40, 75

if __name__ == "__main__":
    torch.manual_seed(0)
    emb, lstm, head = nn.Embedding(200, 32), nn.LSTM(32, 64), nn.Linear(64, 200)
    params = [*emb.parameters(), *lstm.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    clock = Clock(seconds(TRUTH["seconds"]))
    epochs = 0
    while clock.running():
        history = []  # this epoch's per-batch states, dropped with the epoch
        for _ in range(BATCHES):
            tokens = torch.randint(0, 200, (36, 16))
            out, _ = lstm(emb(tokens[:-1]))
            loss = nn.functional.cross_entropy(head(out).reshape(-1, 200), tokens[1:].reshape(-1))
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            history.append(torch.ones(SAW_MIB * MIB // BATCHES // 4))
            time.sleep(0.2)
            log(clock, loss)
            if not clock.running():
                break
        epochs += 1
    truth(epochs=epochs, amplitude_bytes=SAW_MIB * MIB)
