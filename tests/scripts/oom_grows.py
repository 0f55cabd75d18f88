# Moves itself into the memory cgroup $1 (a small limit), then grows in mine_negatives until the kernel kills it.
import os
import sys
import time

with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
print("in the cgroup", flush=True)


def mine_negatives(bank):
    bank.append(bytearray(4 << 20)); time.sleep(0.05)  # noqa: E702  line 12: the line that grows


def train_epoch():
    bank = []
    for step in range(10000):
        mine_negatives(bank)


train_epoch()
print("survived")
