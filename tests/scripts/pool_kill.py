# Two multiprocessing workers, one of which is SIGKILLed (here by the run itself, as the OOM killer or a person
# would); the parent notices, reaps it and goes on to finish normally.
import multiprocessing as mp
import os
import signal
import time

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    workers = [ctx.Process(target=time.sleep, args=(30,)) for _ in range(2)]
    for w in workers:
        w.start()
    time.sleep(0.6)  # let memscope find the workers
    victim = workers[0].pid
    print("killing worker", victim, flush=True)
    os.kill(victim, signal.SIGKILL)
    time.sleep(0.5)
    workers[0].join()
    print("worker exitcode", workers[0].exitcode, flush=True)
    workers[1].terminate()
    workers[1].join()
    print("victim", victim, flush=True)
