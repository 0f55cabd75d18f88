# A training that checkpoints on SIGTERM and, like many launchers, treats a SECOND SIGTERM as "force quit" (exit
# at once, no checkpoint). argv: checkpoint path, [seconds the checkpoint takes].
import os
import signal
import sys
import time

ckpt = sys.argv[1]
write_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
terms = []


def on_term(signum, frame):
    terms.append(time.monotonic())
    if len(terms) > 1:
        print("second SIGTERM: force quit", flush=True)
        os._exit(3)
    with open(ckpt + ".tmp", "w") as f:
        f.write("step ")
        f.flush()
        # a real checkpoint takes a while; signals are checked between these sleeps
        end = time.monotonic() + write_s
        while time.monotonic() < end:
            time.sleep(0.01)
        f.write("42\n")
    os.replace(ckpt + ".tmp", ckpt)
    print("checkpoint saved", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(0.05)
