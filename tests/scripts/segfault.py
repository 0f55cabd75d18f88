import ctypes
import time


def collate(batch):
    return ctypes.string_at(0)  # a NULL read in native code: SIGSEGV


time.sleep(0.3)
collate([1, 2, 3])
