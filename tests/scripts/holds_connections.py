# A same-user process inside the run that holds many silent connections to memscope's socket (reopening each as
# soon as it is dropped), and a training started while it does: the training's agent must still be heard.
import os
import select
import socket
import subprocess
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 64
path = os.environ["MEMSCOPE_SOCK"]
stop = threading.Event()
held = []


def hold():
    while not stop.is_set():
        while len(held) < N and not stop.is_set():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                held.append(s)
            except OSError:
                s.close()
                time.sleep(0.001)
        ready, _, _ = select.select(held, [], [], 0.005)
        for s in ready:  # dropped (refused at once, or after the hello timeout): open another at once
            held.remove(s)
            s.close()


t = threading.Thread(target=hold, daemon=True)
t.start()
while len(held) < N:
    time.sleep(0.01)
time.sleep(0.3)
child = "import time, memscope\nwith memscope.phase('blinded'):\n    time.sleep(0.2)\nmemscope.mark('child heard')\n"
rc = subprocess.run([sys.executable, "-c", child]).returncode
stop.set()
t.join()
print("holder done", rc, flush=True)
sys.exit(rc)
