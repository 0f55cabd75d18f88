# A Python fork (with the agent, its own stacks handler) that sleeps; the main waits for it.
import os
import time

child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
print("ready %d" % child, flush=True)
os.waitpid(child, 0)
time.sleep(60)
