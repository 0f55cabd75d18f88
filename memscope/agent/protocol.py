"""What the agent and the collector agree on: environment variables and message shapes (JSON lines)."""
ENV_SOCK = "MEMSCOPE_SOCK"      # the collector's Unix socket, in a private 0700 directory
ENV_TOKEN = "MEMSCOPE_TOKEN"    # per-run secret; the first message of a connection must carry it
ENV_RUN = "MEMSCOPE_RUN_ID"     # also marks every process of the run, so escapees can be found in /proc
ENV_DIR = "MEMSCOPE_DIR"        # private directory for per-process crash files
ENV_SCRIPT = "MEMSCOPE_SCRIPT"  # the user's script, when known

FAULT_PREFIX = "fault-"         # fault-<pid>.txt: faulthandler's dump of every thread on a fatal signal
FAULT_ECHO = ".stderr"         # fault-<pid>.stderr.txt: the user asked for the dump on stderr too
EXC_PREFIX = "exc-"             # exc-<pid>.json: an uncaught exception (type, message, traceback)
MAX_LINE = 1 << 20              # longest message accepted from an agent

# -- message kinds ----------------------------------------------------------------------------------------------
# The collector accepts these and nothing else (collect/messages.py checks each message against them).
# Field kinds: "pid", "int", "num", "bool", "str", "str?" (str or None), "strs" (list of str), "any" (checked
# only as bounded JSON), "int?" / "num?" (or None).
# kind: (fields, extra fields allowed, required fields)
KINDS = {
    "hello": ({"ppid": "int", "argv": "strs", "orig_argv": "strs", "executable": "str?", "runs_script": "bool",
               "forked": "bool", "rank": "str?", "faulthandler_stderr": "bool"}, False, ("pid",)),
    "role": ({"role": "str"}, False, ("role",)),
    "exception": ({"type": "str", "module": "str?", "message": "str", "traceback": "str", "rank": "str?",
                   "how": "str?"}, False, ("type", "traceback")),
    "phase": ({"name": "str", "state": "str", "auto": "bool"}, False, ("name", "state")),
    "epoch": ({"loader": "int", "n": "int", "workers": "int"}, False, ()),
    "mark": ({"text": "str"}, False, ("text",)),
    "scalene": ({"state": "str", "on": "int", "off": "int", "total_cpu_s": "num"}, False, ()),
    "census": ({"id": "str", "error": "str"}, True, ("id",)),
    "reply": ({"id": "str?", "error": "str"}, False, ()),
}

# -- the in-process probes: the one registry line each --------------------------------------------------------
# (module, summary key, message kinds). ``module`` names the probe's files, one per layer: agent/probes/<module>.py
# (installed in every Python process of the run), and, where ``summary key`` is set, analysis/probes/<module>.py
# (its section of the summary, under that key) and ui/probes/<module>.py (its panel). The torch probe's figures
# are read by analysis/gpu.py and drawn by ui/gpu_chart.py instead: no section, no panel.
PROBES = (
    ("numpy_load", "loads", {
        "np_load": ({"ev": "str", "id": "str"}, True, ("ev", "id")),   # path: a file name, or what names a file
        "np_read": ({"id": "str", "key": "str", "reads": "int"}, True, ("id",)),
    }),
    ("faiss_index", "faiss", {
        "faiss_index": ({"ev": "str", "id": "str"}, True, ("ev", "id")),
    }),
    ("malloc", "malloc", {
        "malloc": ({}, True, ()),
    }),
    ("torch_memory", None, {
        "torch_alloc": ({"backend": "str", "device": "int"}, True, ()),
        "cuda_oom": ({"device": "int", "alloc_bytes": "int", "device_total": "int", "device_free": "int",
                      "allocator_summary": "str", "snapshot": "str"}, True, ()),
        "compile": ({"state": "str", "id": "str", "trigger": "str?"}, True, ()),
    }),
)


def all_kinds():
    """Every kind an agent may send: the core ones and each probe's, as {kind: (fields, extra, required)}."""
    out = dict(KINDS)
    for _module, _key, kinds in PROBES:
        out.update(kinds)
    return out
