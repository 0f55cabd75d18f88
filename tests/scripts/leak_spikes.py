# Seed 004's question in small: "is there a slow leak under the validation spikes?"
# Every --step seconds a training step keeps --keep-mib MiB (a list that grows: the leak; 0 for none); every
# --period seconds a validation pass holds --spike-mib MiB for --spike-s seconds, then frees it. numpy only, so
# the pages are really touched (anonymous memory), and the numbers are known: the truth the tests compare with.
import argparse
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=25)
ap.add_argument("--step", type=float, default=0.1)
ap.add_argument("--keep-mib", type=float, default=1.5)
ap.add_argument("--period", type=float, default=2.3)
ap.add_argument("--spike-mib", type=float, default=250)
ap.add_argument("--spike-s", type=float, default=0.6)
a = ap.parse_args()

MIB = 1 << 20
kept = []
spikes = []
t0 = time.monotonic()
first_keep = last_keep = None
next_val = t0 + a.period
print(f"start keep={a.keep_mib} MiB/step step={a.step}s spike={a.spike_mib} MiB every {a.period}s", flush=True)
while time.monotonic() - t0 < a.seconds:
    if a.keep_mib > 0:
        kept.append(np.ones(int(a.keep_mib * MIB) // 8))  # ones, not zeros: the pages are touched
        last_keep = time.monotonic() - t0
        first_keep = last_keep if first_keep is None else first_keep
    time.sleep(a.step)
    now = time.monotonic()
    if now >= next_val:
        spike = np.ones(int(a.spike_mib * MIB) // 8)
        start = now - t0
        time.sleep(a.spike_s)
        del spike
        spikes.append((start, time.monotonic() - t0))
        print(f"validation {start:.2f}-{spikes[-1][1]:.2f}s", flush=True)
        next_val += a.period
# The truth, for the tests: what was kept per second between the first and the last keep, and the spikes.
rate = (len(kept) - 1) * a.keep_mib * MIB / (last_keep - first_keep) if len(kept) > 1 else 0.0
print(f"TRUTH rate_bytes_per_s={rate:.0f} spikes={len(spikes)} spike_bytes={int(a.spike_mib * MIB)}", flush=True)
