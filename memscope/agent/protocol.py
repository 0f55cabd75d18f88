"""What the agent and the collector agree on: environment variables and message shapes (JSON lines)."""
from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the agent never does: start-up cost)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Tuple, Union

    # A field's spec (see below): a kind name, [spec], (spec, ...) or {name: spec}.
    FieldSpec = Union[str, List["FieldSpec"], Tuple["FieldSpec", ...], Dict[str, "FieldSpec"]]
    # A message kind: (fields, extra fields allowed, required fields).
    KindSpec = Tuple[Dict[str, FieldSpec], bool, Tuple[str, ...]]
    # What the agent sends: one JSON object (a dict whose values json.dumps takes; repr() for the rest).
    Message = Mapping[str, Any]
ENV_SOCK = "MEMSCOPE_SOCK"      # the collector's Unix socket, in a private 0700 directory
ENV_TOKEN = "MEMSCOPE_TOKEN"    # per-run secret; the first message of a connection must carry it
ENV_RUN = "MEMSCOPE_RUN_ID"     # the run's id, for the program's own use: public (it names the record), proves nothing
ENV_KEY = "MEMSCOPE_RUN_KEY"    # per-run secret in the environment only: marks every process of the run, so that
                                # escapees can be found in /proc (environ is readable by the same user and root)
ENV_DIR = "MEMSCOPE_DIR"        # private directory for per-process crash files
ENV_SCRIPT = "MEMSCOPE_SCRIPT"  # the user's script, when known

FAULT_PREFIX = "fault-"         # fault-<pid>.txt: faulthandler's dump of every thread on a fatal signal
FAULT_ECHO = ".stderr"         # fault-<pid>.stderr.txt: the user asked for the dump on stderr too
EXC_PREFIX = "exc-"             # exc-<pid>.json: an uncaught exception (type, message, traceback)
STACK_PREFIX = "stack-"         # stack-<pid>.txt: faulthandler's dumps on the stacks signal (appended to)
STACKS_TAKEN = ".taken"         # stack-<pid>.txt.taken: the program installed its own handler for that signal
STACKS_SIGNAL = "SIGURG"       # where the program leaves it at SIG_DFL; its default action is to ignore it
MAX_LINE = 1 << 20              # longest message accepted from an agent
MARK_CHARS = 1000               # a mark's text is cut to this (agent and collector both)
NAME_CHARS = 200                # a phase's name is cut to this

# -- message kinds ----------------------------------------------------------------------------------------------
# The collector accepts these and nothing else (collect/messages.py checks each message against them).
# Field kinds: "pid", "int", "size" (an int >= 0: bytes, counts), "num", "secs" (a number >= 0), "bool", "str",
# "ints" (list of int), "strs" (list of str), "any" (checked only as bounded JSON); a trailing "?" allows None.
# A list [spec] is a list whose items match spec; a tuple (spec, ...) a JSON array of exactly those items; a dict
# {name: spec} an object whose named members match (others only as bounded JSON). Every field the collector or
# the summary reads is declared: a message whose field has the wrong type is refused whole, where it is received.
# kind: (fields, extra fields allowed, required fields)
KINDS: dict[str, KindSpec] = {
    "hello": ({"ppid": "int", "argv": "strs", "orig_argv": "strs", "executable": "str?", "runs_script": "bool",
               "forked": "bool", "rank": "str?", "faulthandler_stderr": "bool",
               "stacks_signal": "int?", "stacks_file": "str?"}, False, ("pid",)),
    "role": ({"role": "str"}, False, ("role",)),
    # os.exec* is about to replace this image: its hello no longer speaks for the process (the next image may
    # have no agent: python -I, a cleared environment).
    "exec": ({"path": "str", "argv": "strs"}, False, ()),
    "exception": ({"type": "str", "module": "str?", "message": "str", "traceback": "str", "rank": "str?",
                   "how": "str?"}, False, ("type", "traceback")),
    # ago: a held-back end happened this long before it was sent; coalesced/dropped: the process's counts so far
    "phase": ({"name": "str", "state": "str", "auto": "bool", "ago": "secs", "coalesced": "size",
               "dropped": "size"}, False, ("name", "state")),
    # mode: the top module's training flag when the epoch began (None before any train()/eval() switch)
    "epoch": ({"loader": "int", "n": "int", "workers": "int", "persistent": "bool", "mode": "bool?"}, False, ()),
    "mark": ({"text": "str", "coalesced": "size", "dropped": "size"}, False, ("text",)),
    "limits": ({"coalesced": "size", "dropped": "size"}, False, ()),  # the counts at exit
    "scalene": ({"state": "str", "on": "int", "off": "int", "total_cpu_s": "num"}, False, ()),
    "census": ({"id": "str", "error": "str", "objects": "size", "tensor_count": "size", "tensor_bytes": "size",
                "storage_bytes": "size", "tensor_groups": "size", "duration_s": "secs", "cpu_s": "secs",
                "tensors": [{"device": "str", "dtype": "str", "shape": "ints", "count": "size", "bytes": "size",
                             "grad_fn": "size", "requires_grad": "size"}],
                "types": [{"type": "str", "count": "size", "bytes": "size"}],
                "containers": [{"type": "str", "len": "size", "bytes": "size"}]}, True, ("id",)),
    "reply": ({"id": "str?", "error": "str"}, False, ()),
}

# -- the in-process probes: the one registry line each --------------------------------------------------------
# (module, summary key, message kinds). ``module`` names the probe's files, one per layer: agent/probes/<module>.py
# (installed in every Python process of the run), and, where ``summary key`` is set, analysis/probes/<module>.py
# (its section of the summary, under that key) and ui/probes/<module>.py (its panel). The torch probe's figures
# are read by analysis/gpu.py and drawn by ui/gpu_chart.py instead: no section, no panel.
_NP_COMMON: dict[str, FieldSpec] = {
    "id": "str", "path": "str?", "key": "str?", "shape": "ints?", "dtype": "str?", "nbytes": "size?",
    "compressed": "bool?", "requested_mmap": "str?", "mmapped": "bool?", "duration_s": "secs?",
    "anon_delta_bytes": "int?", "file_delta_bytes": "int?"}
_ALLOC: dict[str, FieldSpec] = {k: "size?" for k in ("allocated", "peak_allocated", "reserved", "peak_reserved",
                                                     "inactive_split", "alloc_retries", "ooms", "driver")}
PROBES: tuple[tuple[str, str | None, dict[str, KindSpec]], ...] = (
    ("numpy_load", "loads", {
        "np_load": (dict(_NP_COMMON, ev="str", kind="str?", members=[("str", "size", "bool")], count="size?",
                         resident_bytes="size?", anon_bytes="size?", file_bytes="int?", mapped_bytes="size?"),
                    True, ("ev", "id")),
        "np_read": (dict(_NP_COMMON, reads="size", first_duration_s="secs?"), True, ("id",)),
    }),
    ("faiss_index", "faiss", {
        "faiss_index": ({"ev": "str", "id": "str", "how": "str?", "type": "str?", "d": "size?", "ntotal": "size?",
                         "est_bytes": "size?", "children": "ints?", "ptr": "int?", "gpu": "bool?", "binary": "bool?",
                         "serialized_bytes": "size?"}, True, ("ev", "id")),
    }),
    ("malloc", "malloc", {
        "malloc": ({k: "size" for k in ("arena_bytes", "mmap_bytes", "in_use_bytes", "free_held_bytes",
                                        "releasable_bytes", "free_chunks")}, True, ()),
    }),
    # A DataLoader worker's Dataset: its attributes holding the most Python objects (copy-on-read's attribution), read
    # by analysis/copy_on_read.py with the record's PSS rounds and drawn in the process table: no section, no panel.
    ("dataset_objects", None, {
        "dataset_objects": ({"dataset": "str", "worker_id": "int?", "num_workers": "int?", "truncated": "bool",
                             "duration_s": "secs", "cpu_s": "secs",
                             "attributes": [{"name": "str", "type": "str", "len": "size?", "item_type": "str?",
                                             "objects": "size?", "bytes": "size?", "python_objects": "bool"}]},
                            False, ("attributes",)),
    }),
    ("torch_memory", None, {
        "torch_alloc": (dict(_ALLOC, backend="str", device="size"), True, ()),
        "cuda_oom": (dict(_ALLOC, device="size", alloc_bytes="size", device_total="size", device_free="size",
                          allocator_summary="str", snapshot="str?"), True, ()),
        "compile": ({"state": "str", "id": "str", "trigger": "str?"}, True, ()),
    }),
)


def all_kinds() -> dict[str, KindSpec]:
    """Every kind an agent may send: the core ones and each probe's, as {kind: (fields, extra, required)}."""
    out = dict(KINDS)
    for _module, _key, kinds in PROBES:
        out.update(kinds)
    return out
