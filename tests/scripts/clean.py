import sys
import time

buf = bytearray(64 << 20)  # touched: 64 MiB of anonymous memory
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0.5)
print("finished")
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
