#!/bin/sh
# Move this shell into a memory cgroup with a small limit ($1), then let Python allocate past it.
echo $$ > "$1/cgroup.procs" || exit 97
exec python3 -c 'import time
chunks = []
for i in range(200):
    chunks.append(bytearray(16 << 20))
    time.sleep(0.02)
print("survived")'
