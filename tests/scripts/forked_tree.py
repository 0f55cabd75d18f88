# A forked tree like a DataLoader's: the main process builds a 160 MiB dataset, forks 4 workers that share it
# copy-on-write, and then every worker (and the main) allocates and frees its own buffers on its own rhythm while
# the workers also write into a slice of the shared data (pages become private: PSS moves between processes).
# With --epochs N the workers are forked anew N times, like a DataLoader without persistent workers: each epoch's
# workers exit and hand their share of the dataset back to the main, which goes on allocating meanwhile.
import os
import sys
import time

import numpy as np

MIB = 1 << 20
seconds = float(sys.argv[1]) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else 14
epochs = int(sys.argv[sys.argv.index("--epochs") + 1]) if "--epochs" in sys.argv else 1
data = np.ones(160 * MIB // 8)
kept = []


def main_steps(until):
    while time.monotonic() < until:
        kept.append(np.ones(MIB // 8 * 3))  # the main grows 3 MiB per 0.3 s
        spike = np.ones(40 * MIB // 8) if len(kept) % 7 == 0 else None
        time.sleep(0.3)
        del spike


for epoch in range(epochs):
    kids = []
    for k in range(4):
        pid = os.fork()
        if pid == 0:
            end = time.monotonic() + seconds / epochs
            i = 0
            while time.monotonic() < end:
                buf = np.ones((8 + 6 * k) * MIB // 8)  # a batch
                lo = (i * MIB // 8) % data.size
                data[lo : lo + MIB // 8] += 1  # copy-on-write: 1 MiB more of the dataset becomes private
                time.sleep(0.15 + 0.05 * k)
                del buf
                time.sleep(0.1)
                i += 1
            os._exit(0)
        kids.append(pid)
    main_steps(time.monotonic() + seconds / epochs)
    for pid in kids:
        os.waitpid(pid, 0)
    if epoch < epochs - 1:
        main_steps(time.monotonic() + 2.0)  # between epochs: the main alone, holding the workers' shares again
print("done", flush=True)
