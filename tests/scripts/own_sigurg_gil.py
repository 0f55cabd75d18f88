# A program with its own SIGURG handler (memscope's stacks signal), whose main thread then holds the GIL in a long
# C call (ctypes.PyDLL keeps it held), so the agent's thread cannot answer either.
import ctypes
import os
import signal

signal.signal(signal.SIGURG, lambda s, f: os.write(1, b"own handler called\n"))
print("calling", flush=True)
while True:
    ctypes.PyDLL(None).sleep(30)
