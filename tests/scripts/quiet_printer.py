# A training that computes little and writes a line to its own log file every few seconds (not to stdout: memscope
# does not see it), or, with 0, that sleeps and writes nothing (a real stall). argv: log path, seconds between
# lines, seconds to run.
import sys
import time

log, every, run_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
print("ready", flush=True)
end = time.monotonic() + run_s
step = 0
with open(log, "a") as f:
    while time.monotonic() < end:
        time.sleep(every if every > 0 else 0.5)
        if every > 0:
            step += 1
            f.write(f"step {step} loss {1 / step:.4f}\n")
            f.flush()
