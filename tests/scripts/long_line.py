# Writes a 40 MiB line without a newline, then a character split across two writes, then says how long the
# writes took (a reader that falls behind blocks the writer on the full pipe).
import os
import sys
import time

t0 = time.perf_counter()
out = sys.stdout.buffer
out.write(b"x" * (40 << 20))
out.flush()
blocked_s = time.perf_counter() - t0
out.write("\nsplit \u00e9".encode()[:-1])  # é is 0xC3 0xA9: the first byte alone
out.flush()
time.sleep(0.2)
out.write(b"\xa9 done\n")
out.write(("wrote in %.3f s\n" % blocked_s).encode())
out.flush()
os._exit(0)
