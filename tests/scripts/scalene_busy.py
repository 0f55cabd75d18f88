# A busy loop for Scalene snapshots: the hot line is HOT-A until the file argv[1] exists, then HOT-B; the script
# ends (status 0) once the file argv[2] exists.
import os
import sys


def step_a(n):
    total = 0
    for i in range(n):
        total += i * i  # HOT-A
    return total


def step_b(n):
    total = 0
    for i in range(n):
        total += i ^ 7  # HOT-B
    return total


switch, stop = sys.argv[1], sys.argv[2]
print("ready", flush=True)
while not os.path.exists(switch):
    step_a(20000)
print("switched", flush=True)
while not os.path.exists(stop):
    step_b(20000)
print("finished", flush=True)
