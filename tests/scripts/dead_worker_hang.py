# A DataLoader-like hang: the worker that should fill the queue is SIGKILLed, the main waits on it for ever.
import multiprocessing as mp
import os
import signal


def worker(q):
    os.kill(os.getpid(), signal.SIGKILL)  # dies before it puts anything


def next_batch(q):
    return q.get()  # line 12: waits for ever


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=worker, args=(q,))
    p.start()
    p.join()
    print("worker died with", p.exitcode, flush=True)
    next_batch(q)
