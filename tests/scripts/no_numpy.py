"""A process that never imports numpy, torch or faiss: the probes must not load them, nor start a thread."""

import sys
import threading

print("modules", "numpy" in sys.modules, "faiss" in sys.modules, "ctypes" in sys.modules, flush=True)
print("threads", sorted(t.name for t in threading.enumerate()), flush=True)
