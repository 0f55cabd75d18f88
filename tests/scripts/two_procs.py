# A main and one child, both holding memory, for `seconds` (60 by default); prints both pids.
import os
import subprocess
import sys
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
HOLD = "import time, sys; b = bytearray(24 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(float(sys.argv[1]))"
child = subprocess.Popen([sys.executable, "-c", HOLD, str(seconds)])
keep = bytearray(32 << 20)
keep[::4096] = b"x" * len(keep[::4096])
print("pids", os.getpid(), child.pid, flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    time.sleep(0.1)
child.wait()
