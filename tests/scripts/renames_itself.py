import ctypes
import time

# What setproctitle does: the title written over argv's memory (the kernel's /proc/PID/cmdline), and the
# thread's name (comm) through prctl(PR_SET_NAME).
with open("/proc/self/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end
title = b"trainer: epoch 1"
ctypes.memmove(start, title + b"\0" * (end - start - len(title)), end - start)
ctypes.CDLL(None).prctl(15, b"trainer", 0, 0, 0)
print("renamed", flush=True)
time.sleep(0.5)  # seen renamed by memscope's discovery before it fails
raise ValueError("failed under a new name")
