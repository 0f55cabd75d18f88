# The main thread sits in one long C call that holds the GIL (ctypes.PyDLL keeps it held; CDLL would release
# it), with a second Python thread that cannot run meanwhile.
import ctypes
import threading
import time


def helper():
    while True:
        time.sleep(0.1)


threading.Thread(target=helper, daemon=True).start()


def long_c_call():
    ctypes.PyDLL(None).sleep(30)  # line 17: holds the GIL for 30 s


def train_epoch():
    while True:  # a signal (the stacks capture's) ends libc's sleep early: call again, the GIL held again
        long_c_call()


print("ready", flush=True)
time.sleep(0.3)
print("calling", flush=True)
train_epoch()
