# A forked tree like a DataLoader's: the main process builds a 160 MiB dataset, forks 4 workers that share it
# copy-on-write, and then every worker (and the main) allocates and frees its own buffers on its own rhythm while
# the workers also write into a slice of the shared data (pages become private: PSS moves between processes).
import os
import sys
import time

import numpy as np

MIB = 1 << 20
seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 14
data = np.ones(160 * MIB // 8)
kids = []
for k in range(4):
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            buf = np.ones((8 + 6 * k) * MIB // 8)      # a batch
            lo = (i * MIB // 8) % data.size
            data[lo:lo + MIB // 8] += 1               # copy-on-write: 1 MiB more of the dataset becomes private
            time.sleep(0.15 + 0.05 * k)
            del buf
            time.sleep(0.1)
            i += 1
        os._exit(0)
    kids.append(pid)
kept = []
end = time.monotonic() + seconds
while time.monotonic() < end:
    kept.append(np.ones(MIB // 8 * 3))  # the main grows 3 MiB per 0.3 s
    spike = np.ones(40 * MIB // 8) if len(kept) % 7 == 0 else None
    time.sleep(0.3)
    del spike
for pid in kids:
    os.waitpid(pid, 0)
print("done", flush=True)
