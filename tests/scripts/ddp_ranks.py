# Launched by torchrun: each rank allocates a little and exits.
import os
import time

buf = bytearray((16 + 8 * int(os.environ.get("RANK", "0"))) << 20)
time.sleep(2.0)
print("rank", os.environ.get("RANK"), "done")
