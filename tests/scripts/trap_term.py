# A training that saves a checkpoint on SIGTERM (what timeout, docker stop, Kubernetes and Slurm send), with a
# child that ignores SIGTERM (only SIGKILL ends it). argv: checkpoint path [seconds the checkpoint takes to write].
import os
import signal
import sys
import time

ckpt = sys.argv[1]
write_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(0.1)


def on_term(signum, frame):
    with open(ckpt + ".tmp", "w") as f:
        f.write("step ")
        f.flush()
        time.sleep(write_s)  # a real checkpoint takes a while: a SIGKILL meanwhile leaves no checkpoint
        f.write("42\n")
    os.replace(ckpt + ".tmp", ckpt)
    print("checkpoint saved", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
print("ready", os.getpid(), child, flush=True)
while True:
    time.sleep(0.05)
