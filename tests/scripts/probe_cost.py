"""What the NumPy, FAISS and malloc probes cost, piece by piece (run by hand: ``python tests/scripts/probe_cost.py``).

The probes are installed in this interpreter with a real agent Channel on a Unix socket whose other end reads and
discards, so each figure includes building and sending the message. Each figure is the median of several
batches of this thread's CPU time (user + system), wrapped minus unwrapped (the original is the wrapper's
``__wrapped__``); batches alternate between the two.
"""

import os
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402

from memscope.agent import probes  # noqa: E402
from memscope.agent.channel import Channel  # noqa: E402
from memscope.agent.probes import faiss_index, malloc, numpy_load  # noqa: E402


def _sink(path):
    # The reading end lives in another process, as the collector does: a reader thread in this one would take
    # the GIL at every message and be counted as the probes' cost.
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    if os.fork() == 0:
        conn, _ = srv.accept()
        while conn.recv(1 << 20):
            pass
        os._exit(0)
    srv.close()


def per_call_ns(fn, n, batches=7):
    out = []
    for _ in range(batches):
        t = time.thread_time()  # CPU time: on a shared machine wall time mostly measures the neighbours
        for _ in range(n):
            fn()
        out.append((time.thread_time() - t) / n * 1e9)
    return statistics.median(out)


def paired_ns(wrapped, plain, n, batches=15):
    """(plain, probed) per call: batches alternate, so that a machine busy with other work skews both alike."""
    w, p = [], []
    for i in range(batches):
        for fn, out in ((wrapped, w), (plain, p)) if i % 2 else ((plain, p), (wrapped, w)):
            out.append(per_call_ns(fn, n, batches=1))
    return statistics.median(p), statistics.median(w)


def main():
    d = tempfile.mkdtemp()
    sock = os.path.join(d, "s")
    _sink(sock)
    ch = Channel(sock, "x")
    ch.connect({})
    t = time.thread_time()
    numpy_load.install(ch)  # numpy is imported: attaches now
    malloc.install(ch)
    t_np = time.thread_time() - t
    import faiss

    t = time.thread_time()
    faiss_index.install(ch)  # wraps every Index class's constructor and add
    t_faiss = time.thread_time() - t
    print(f"attach, once: numpy + malloc {t_np * 1e3:.2f} ms, faiss {t_faiss * 1e3:.2f} ms CPU")

    small, big = os.path.join(d, "small.npy"), os.path.join(d, "big.npy")
    np.save(small, np.zeros(128, np.float32))  # 512 B
    np.save(big, np.zeros(1 << 20, np.float32))  # 4 MiB
    np.savez(os.path.join(d, "m.npz"), s=np.zeros(128, np.float32), b=np.zeros(1 << 20, np.float32))
    orig_load = np.load.__wrapped__
    npz = np.load(os.path.join(d, "m.npz"))
    orig_get = type(npz).__getitem__.__wrapped__

    rows = []
    for name, wrapped, plain, n in [
        ("np.load small .npy (512 B)", lambda: np.load(small), lambda: orig_load(small), 3000),
        ("np.load 4 MiB .npy", lambda: np.load(big), lambda: orig_load(big), 300),
        (
            "np.load mmap_mode='r' 4 MiB .npy",
            lambda: np.load(big, mmap_mode="r"),
            lambda: orig_load(big, mmap_mode="r"),
            1000,
        ),
        ("NpzFile member read, small", lambda: npz["s"], lambda: orig_get(npz, "s"), 2000),
        ("NpzFile member read, 4 MiB", lambda: npz["b"], lambda: orig_get(npz, "b"), 200),
    ]:
        p, w = paired_ns(wrapped, plain, n // 3)
        rows.append((name, p, w))

    x = np.zeros((1, 64), np.float32)
    idx = faiss.IndexFlatL2(64)
    add_plain = type(idx).__mro__[1].__dict__["add"].__wrapped__
    p, w = paired_ns(lambda: idx.add(x), lambda: add_plain(idx, x), 1000)
    rows.append(("faiss add(1 vector)", p, w))
    ctor_plain = faiss.IndexFlatL2.__init__.__wrapped__
    keep = []

    def made_plain():
        o = faiss.IndexFlatL2.__new__(faiss.IndexFlatL2)
        ctor_plain(o, 64)
        keep.append(o)

    p, w = paired_ns(lambda: keep.append(faiss.IndexFlatL2(64)), made_plain, 100)
    rows.append(("faiss IndexFlatL2(64) constructor", p, w))
    keep.clear()

    # The wrapper's own steps, each alone (end-to-end differences for ms-long loads drown in a busy machine's noise).
    arr = orig_load(big)
    parts = [
        ("path + os.stat (every load)", lambda: numpy_load._describe(big)),
        ("statm pread (x2 per load >= 1 MiB)", numpy_load._statm),
        (
            "record + send one load message",
            lambda: numpy_load._after_load(arr, (big,), {}, big, True, (0, 0), 0.001, type(npz), np.memmap, np.ndarray),
        ),
        (
            "count one small load (no message)",
            lambda: numpy_load._after_load(
                arr[:4], (small,), {}, small, False, None, 0.001, type(npz), np.memmap, np.ndarray
            ),
        ),
    ]
    for name, fn in parts:
        print(f"  step: {name:40s} {per_call_ns(fn, 2000, batches=9) / 1e3:7.1f} us")
    print(f"{'operation':40s} {'plain':>12s} {'probed':>12s} {'added':>10s}")
    for name, p, w in rows:
        print(f"{name:40s} {p / 1e3:10.1f} us {w / 1e3:10.1f} us {(w - p) / 1e3:7.1f} us")

    # The probes' thread: every task it runs every 2 s, with a memmap alive and 20 live indexes.
    mm = np.load(big, mmap_mode="r")
    indexes = [faiss.IndexFlatL2(64) for _ in range(20)]
    for i in indexes:
        i.add(np.zeros((100, 64), np.float32))
    tasks = [t[2] for t in probes._tasks]
    numpy_load._resident_next[0] = float("inf")
    t0 = time.thread_time()
    for _ in range(200):
        for fn in tasks:
            fn()
    per_round = (time.thread_time() - t0) / 200
    print(
        f"periodic round ({len(tasks)} tasks, 20 indexes, no smaps read): {per_round * 1e6:.0f} us CPU -> "
        f"{per_round / 2.0 * 100:.4f}% of one core at one round per 2 s"
    )
    numpy_load._resident_next[0] = 0.0
    t0 = time.thread_time()
    n = 200
    for _ in range(n):
        numpy_load._resident_next[0] = 0.0  # force the smaps read each time (the real thread backs off)
        for fn in tasks:
            fn()
    per_round = (time.thread_time() - t0) / n
    print(
        f"periodic round ({len(tasks)} tasks, smaps read forced, 20 indexes, 1 memmap): "
        f"{per_round * 1e6:.0f} us CPU -> {per_round / 2.0 * 100:.4f}% of one core at one round per 2 s"
    )
    t0 = time.thread_time()
    for _ in range(n):
        malloc._report()
    print(f"mallinfo2 report alone: {(time.thread_time() - t0) / n * 1e6:.1f} us")
    del mm, indexes


if __name__ == "__main__":
    main()
