import ctypes
import multiprocessing as mp
import sys


def crash():
    ctypes.string_at(0)  # SIGSEGV in the child


if __name__ == "__main__":
    mp.set_start_method(sys.argv[1])
    p = mp.Process(target=crash)
    p.start()
    p.join()
    print("child exit code", p.exitcode, flush=True)  # the main goes on and exits 0
