"""A Prometheus endpoint for one node: the run's memory by rank and role, the leak slope and the exit cause.

``Exporter(run)`` subscribes to the Run's record stream and keeps the latest state (one small dict per process);
a scrape reads that state through a custom ``prometheus_client`` collector, so nothing is computed between scrapes
and a slow scraper never reaches the collectors. Families, all gauges, all labelled ``run`` and ``hostname``:

    memscope_memory_bytes{rank, role, kind}         kind pss | private | rss, summed over the role's processes
    memscope_processes{rank, role}
    memscope_host_available_bytes
    memscope_limit_bytes{source}                    source cgroup | flag | host (no limit: the host's total)
    memscope_leak_slope_bytes_per_second{rank, role, verdict}
    memscope_gpu_memory_bytes{rank, gpu, kind}      kind used (NVML) | allocated | reserved (PyTorch's allocator)
    memscope_run_info{command} 1
    memscope_exit_info{cause, signal} 1             once the run has ended

``rank`` is each process's ``RANK`` environment variable (torchrun, accelerate and Lightning set it; a process
that has none inherits its parent's, so a rank's DataLoader workers carry the rank; empty for the launcher).
There is no pid label: the number of series stays bounded however many workers come and go. Label values (the
command line above all) are escaped by prometheus_client's exposition.
"""

from __future__ import annotations

import math
import shlex
import socket
import threading
import time
import urllib.parse
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ..analysis.leak import fit_plan
from ..collect.platform import procfs
from ..errors import LaunchError
from ..model import (
    GROWTH_KINDS,
    METRIC_EXIT_INFO,
    METRIC_GPU_MEMORY,
    METRIC_GROWTH,
    METRIC_HOST_AVAILABLE,
    METRIC_LEAK_SLOPE,
    METRIC_LIMIT,
    METRIC_MEMORY,
    METRIC_PROCESSES,
    METRIC_RUN_INFO,
    Event,
    ExitInfo,
    HostSample,
    ProcessExited,
    ProcessSeen,
    Record,
    RunEnded,
    TreeSample,
)
from ..redact import redact_argv

if TYPE_CHECKING:
    from ..session.run import Run

__all__ = ["Exporter", "PrometheusSink", "attach", "parse_listen", "check_pushgateway", "COMMAND_MAX"]

COMMAND_MAX = 512  # characters of the command kept in memscope_run_info's label
LEAK_EVERY_S = 5.0  # the live leak slope is refitted at most this often (on a scrape), not per scrape
LEAK_CPU_BUDGET = 0.002  # ... and further apart when the fits would take more than this share of a core
PHASES_MAX = 2048  # train/eval switches kept per rank
SERIES_MAX = 256  # points kept per (rank, role) for the fit (~4 ms each; 512 points cost ~40 ms): past
# it, pairs fold to their minimum
PUSH_TIMEOUT_S = 10.0
REREAD_ROUNDS = 10  # sampling rounds in which an unreadable environment is tried again
PUSH_JOB = "memscope"


def parse_listen(text: str) -> tuple[str, int]:
    """``[HOST:]PORT`` -> (host, port). ``9464`` listens on 127.0.0.1 only; ``:9464`` on every interface (as
    Prometheus' own ``--web.listen-address`` reads it); ``[::1]:9464`` for IPv6. Raises ValueError (one line)."""
    s = text.strip()
    host, sep, port_s = s.rpartition(":")
    if not sep:
        host = "127.0.0.1"
    elif host == "":
        host = "0.0.0.0"
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"not [HOST:]PORT: {text!r} (write an IPv6 address in brackets: [::1]:9464)")
    if not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ValueError(f"not [HOST:]PORT: {text!r} (a port is 0-65535, e.g. 9464 or :9464 or 10.0.0.5:9464)")
    return host, int(port_s)


def check_pushgateway(url: str) -> str:
    """A Pushgateway address as prometheus_client takes it (``http://`` added when missing); ValueError if bad."""
    u = url.strip()
    if "://" not in u:
        u = "http://" + u
    try:
        p = urllib.parse.urlsplit(u)
        p.port  # noqa: B018  (raises on a non-numeric port)
    except ValueError:
        raise ValueError(f"not a Pushgateway URL: {url!r}") from None
    if p.scheme not in ("http", "https") or not p.hostname:
        raise ValueError(f"not a Pushgateway URL: {url!r} (e.g. http://pushgateway:9091)")
    return u


class _Group:
    """One (rank, role): the bounded private-memory series its leak slope is fitted on."""

    __slots__ = ("t", "y", "verdict", "slope")

    def __init__(self) -> None:
        self.t: list[float] = []
        self.y: list[float] = []
        self.verdict = "insufficient_data"
        self.slope: float | None = None

    def add(self, t: float, y: float) -> None:
        self.t.append(t)
        self.y.append(y)
        if len(self.t) > SERIES_MAX:
            # The fit looks at the floor only (assess_leak reduces chunks to their minimum): fold pairs to it.
            n = len(self.t) // 2 * 2
            t2, y2 = [], []
            for i in range(0, n, 2):
                j = i if self.y[i] <= self.y[i + 1] else i + 1
                t2.append(self.t[j])
                y2.append(self.y[j])
            self.t, self.y = t2 + self.t[n:], y2 + self.y[n:]


class Exporter:
    """The latest state of one run, for Prometheus. ``serve((host, port))`` opens the endpoint, ``push(url)``
    sends the state to a Pushgateway; ``on_record`` is the Run subscriber and ``collect`` the registry's hook."""

    def __init__(
        self,
        run_id: str,
        command: Iterable[str],
        hostname: str | None = None,
        *,
        limit_from_flag: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from prometheus_client import CollectorRegistry

        self.run_id = run_id
        self.hostname = hostname or socket.gethostname()
        self.command = shlex.join(redact_argv(command))[:COMMAND_MAX]  # a label anyone scraping reads: no secrets
        self.limit_from_flag = limit_from_flag
        self._clock = clock
        self._lock = threading.Lock()
        self._procs: dict[int, dict[str, Any]] = {}  # live pid -> rank, role, rss, pss, private
        self._rank_of: dict[int, str] = {}
        self._parent: dict[int, int] = {}
        self._unread: dict[int, int] = {}  # pid -> rounds left to read its environment again
        self._gone: dict[int, float] = {}  # pid -> create time, of the processes that have exited
        self._groups: dict[tuple[str, str], _Group] = {}
        self._host: HostSample | None = None
        self._gpu_used: dict[tuple[str, str], int] = {}  # (rank, gpu) -> NVML bytes, last round
        self._alloc: dict[tuple[int, str], dict[str, int]] = {}  # (pid, gpu) -> allocated, reserved
        self._exit: dict[str, Any] | None = None
        self._leak_at = -math.inf
        self._leak_dirty = False
        self._train_start: float | None = None
        # Each rank's train/eval switches (its main process's), for the fit: the summary's verdict splits the floor by
        # phase, and so does this one. The last PHASES_MAX a rank: a day-long run's fit reads a folded series anyway.
        self._phases: dict[str, deque[dict[str, Any]]] = {}
        self._leak_every = LEAK_EVERY_S
        # The run's live verdict (a leak dict with its "growth"), read at each scrape for METRIC_GROWTH.
        self.growth_source: Callable[[], dict[str, Any]] | None = None
        self.record_cpu_s = 0.0  # thread CPU spent on records (the subscriber thread) ...
        self.scrape_cpu_s = 0.0  # ... and answering scrapes (collect and the text format): what we cost the run
        self.scrapes = 0
        self.url: str | None = None
        self._server: Any = None
        self._closed = threading.Event()
        self._unsubscribe: Callable[[], None] | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    @classmethod
    def for_run(cls, run: "Run", hostname: str | None = None) -> "Exporter":
        """An exporter that follows ``run`` (subscribed to its records)."""
        ex = cls(run.run_id, run.command, hostname, limit_from_flag=run.options.limit_bytes is not None)
        ex._unsubscribe = run.subscribe(ex.on_record, maxsize=100000)
        ex.growth_source = run.verdict  # the run's one live verdict (session/verdict.py), as every view shows it
        return ex

    # -- the record stream (the Run's subscriber thread) -----------------------------------------------------
    def on_record(self, rec: Record) -> None:
        """Fold one record into the latest state (the run's subscriber thread)."""
        c0 = time.thread_time()
        with self._lock:
            if isinstance(rec, TreeSample):
                self._on_tree(rec)
            elif isinstance(rec, ProcessSeen):
                self._on_seen(rec)
            elif isinstance(rec, ProcessExited):
                # Forgotten at once: workers come and go all day, and a scrape walks only the live ones.
                d = self._procs.pop(rec.pid, None)
                if d is not None:
                    self._gone[rec.pid] = d["create_time"]
                self._parent.pop(rec.pid, None)
                self._unread.pop(rec.pid, None)
                for key in [k for k in self._alloc if k[0] == rec.pid]:
                    del self._alloc[key]
            elif isinstance(rec, HostSample):
                self._host = rec
            elif isinstance(rec, Event):
                if self._train_start is None and (
                    rec.kind == "epoch" or (rec.kind == "phase" and rec.data.get("auto"))
                ):
                    self._train_start = rec.t  # the leak fit starts here: imports and set-up are no leak
                if rec.kind == "phase" and rec.data.get("auto") and rec.pid in self._procs:
                    d = self._procs[rec.pid]
                    if d["role"] in ("main", "rank"):
                        q = self._phases.setdefault(d["rank"], deque(maxlen=PHASES_MAX))
                        q.append({"t": rec.t, "pid": None, "data": rec.data})
                if rec.kind == "gpu":
                    self._on_gpu(rec.data)
                elif rec.kind == "torch_alloc" and rec.pid is not None and rec.data.get("backend", "cuda") == "cuda":
                    self._alloc[(rec.pid, str(rec.data.get("device", 0)))] = {
                        "allocated": int(rec.data.get("allocated") or 0),
                        "reserved": int(rec.data.get("reserved") or 0),
                    }
            elif isinstance(rec, RunEnded):
                ex: ExitInfo | dict[str, Any] = rec.summary.get("exit") or {}
                self._exit = {"cause": str(ex.get("cause") or "unknown"), "signal": str(ex.get("signal") or "")}
                self._leak_at, self._leak_dirty = -math.inf, True  # the final fit, at the next scrape or push
        self.record_cpu_s += time.thread_time() - c0

    def _rank(self, pid: int, ppid: int) -> str:
        self._parent[pid] = ppid
        env = procfs.read_environ(pid)
        if env is None:  # unreadable, or caught mid-exec: the parent's for now, read again next rounds
            self._unread.setdefault(pid, REREAD_ROUNDS)
            rank = self._rank_of.get(ppid, "")
        else:
            self._unread.pop(pid, None)
            rank = env.get("RANK") or self._rank_of.get(ppid, "")
        self._rank_of[pid] = rank
        return rank

    def _on_seen(self, rec: ProcessSeen) -> None:
        if self._gone.get(rec.pid) == rec.create_time:
            return  # a late role update of a process that has exited (a new one under the same pid is not)
        d = self._procs.setdefault(rec.pid, {"rss": 0, "pss": None, "private": None, "create_time": rec.create_time})
        d["role"] = rec.role
        d["rank"] = self._rank(rec.pid, rec.ppid)  # read again: a role change can follow an exec

    def _reread(self) -> None:
        for pid, left in list(self._unread.items()):
            d = self._procs.get(pid)
            if d is None or left <= 0:
                del self._unread[pid]
                continue
            self._unread[pid] = left - 1
            d["rank"] = self._rank(pid, self._parent.get(pid, 0))

    def _on_tree(self, rec: TreeSample) -> None:
        if self._unread:
            self._reread()
        sums: dict[tuple[str, str], float] = {}
        complete = True
        for p in rec.procs:
            d = self._procs.get(p.pid)
            if d is None:  # sampled before its ProcessSeen reached us: counted from the next round
                complete = False
                continue
            if p.rss:
                d["rss"] = p.rss
            # The fast series (collect/estimate.py): PSS and its private part (anonymous PSS + swap) at every
            # round, measured in PSS rounds and carried forward between them; the summary's leak verdict fits the
            # same private figure.
            if p.est_pss is not None:
                d["pss"] = p.est_pss
            elif p.pss is not None:
                d["pss"] = p.pss
            private = p.est_private
            if private is None and p.pss is not None:
                private = (p.anon if p.anon is not None else p.pss) + (p.swap or 0)
            if private is not None:
                d["private"] = private
                key = (d["rank"], d["role"])
                sums[key] = sums.get(key, 0) + private
            else:
                complete = False
        if sums and complete:
            for key, y in sums.items():
                self._groups.setdefault(key, _Group()).add(rec.t, y)
            self._leak_dirty = True

    def _on_gpu(self, data: dict[str, Any]) -> None:
        used: dict[tuple[str, str], int] = {}
        for p in data.get("procs") or []:
            if p.get("used") is None:
                continue
            pid = int(p["pid"])
            d = self._procs.get(pid)
            rank = d["rank"] if d else self._rank_of.get(pid, "")
            key = (rank, str(p.get("device", 0)))
            used[key] = used.get(key, 0) + int(p["used"])
        self._gpu_used = used

    # -- a scrape (the HTTP server's thread) -----------------------------------------------------------------
    def describe(self) -> list:
        """Nothing to check at registration: the families vary with the run."""
        return []  # families vary with the run: nothing to check at registration

    def collect(self) -> Iterator[Any]:
        """The families of a scrape, from the latest state."""
        from prometheus_client.core import GaugeMetricFamily

        base = ["run", "hostname"]
        ids = [self.run_id, self.hostname]
        mem = GaugeMetricFamily(
            METRIC_MEMORY,
            "Memory of the run's processes by rank and role (bytes): "
            "PSS, private (anonymous PSS + swap: pages shared copy-on-write split among their processes), "
            "and RSS summed",
            labels=base + ["rank", "role", "kind"],
        )
        nproc = GaugeMetricFamily(
            METRIC_PROCESSES, "Live processes of the run by rank and role", labels=base + ["rank", "role"]
        )
        avail = GaugeMetricFamily(METRIC_HOST_AVAILABLE, "The host's available memory (bytes)", labels=base)
        limit = GaugeMetricFamily(
            METRIC_LIMIT,
            "The memory limit the run is held to (bytes), and where it comes from",
            labels=base + ["source"],
        )
        leak = GaugeMetricFamily(
            METRIC_LEAK_SLOPE,
            "Slope of the memory floor (private memory) by rank and role, with memscope's verdict",
            labels=base + ["rank", "role", "verdict"],
        )
        gpu = GaugeMetricFamily(
            METRIC_GPU_MEMORY,
            "GPU memory by rank and device: used (NVML), allocated and reserved (PyTorch's allocator)",
            labels=base + ["rank", "gpu", "kind"],
        )
        info = GaugeMetricFamily(METRIC_RUN_INFO, "The run and its command", labels=base + ["command"])
        exit_ = GaugeMetricFamily(
            METRIC_EXIT_INFO, "Why the run ended (present once it has)", labels=base + ["cause", "signal"]
        )
        growth = GaugeMetricFamily(
            METRIC_GROWTH,
            "What the run's memory is doing: 1 for the kind memscope's live verdict names now "
            "(flat, spikes, step, leak, copy_on_read, more_processes)",
            labels=base + ["rank", "kind"],
        )
        kind = self._growth_kind()  # outside the lock: it may refit from the record
        with self._lock:
            self.scrapes += 1
            self._refit_leak()
            if kind is not None:
                main = next((d for d in self._procs.values() if d["role"] in ("main", "rank")), None)
                growth.add_metric(ids + [main["rank"] if main else "", kind], 1)
            groups: dict[tuple[str, str], list[int]] = {}
            for d in self._procs.values():
                g = groups.setdefault((d["rank"], d["role"]), [0, 0, 0, 0, 0])  # n, rss, pss, private, missing
                g[0] += 1
                g[1] += d["rss"]
                g[2] += d["pss"] or 0
                g[3] += d["private"] or 0
                g[4] += d["pss"] is None
            for (rank, role), (n, rss, pss, private, missing) in sorted(groups.items()):
                nproc.add_metric(ids + [rank, role], n)
                mem.add_metric(ids + [rank, role, "rss"], rss)
                if not missing:  # a process with no PSS round yet would make the sum too small
                    mem.add_metric(ids + [rank, role, "pss"], pss)
                    mem.add_metric(ids + [rank, role, "private"], private)
            for key, group in sorted(self._groups.items()):
                # A group whose processes are gone keeps its last verdict, unless it never had one (a process
                # seen briefly as "other" before its role was known).
                if key in groups or group.verdict != "insufficient_data":
                    leak.add_metric(
                        ids + [key[0], key[1], group.verdict], math.nan if group.slope is None else group.slope
                    )
            h = self._host
            if h is not None:
                avail.add_metric(ids, h.available)
                if h.limit:
                    limit.add_metric(ids + ["flag" if self.limit_from_flag else "cgroup"], h.limit)
                else:
                    limit.add_metric(ids + ["host"], h.total)
            for (rank, dev), b in sorted(self._gpu_used.items()):
                gpu.add_metric(ids + [rank, dev, "used"], b)
            alloc: dict[tuple[str, str, str], int] = {}
            for (pid, dev), a in self._alloc.items():
                rank = self._rank_of.get(pid, "")
                for kind, b in a.items():
                    alloc[(rank, dev, kind)] = alloc.get((rank, dev, kind), 0) + b
            for (rank, dev, kind), b in sorted(alloc.items()):
                gpu.add_metric(ids + [rank, dev, kind], b)
            info.add_metric(ids + [self.command], 1)
            if self._exit is not None:
                exit_.add_metric(ids + [self._exit["cause"], self._exit["signal"]], 1)
        yield from (f for f in (mem, nproc, avail, limit, leak, growth, gpu, info, exit_) if f.samples)

    def _growth_kind(self) -> str | None:
        """The kind the run's live verdict names now (None: none yet, or no run to ask)."""
        if self.growth_source is None:
            return None
        try:
            g = self.growth_source().get("growth")
        except Exception:  # the exporter never fails a scrape for the verdict's sake
            return None
        kind = g.get("kind") if isinstance(g, dict) else None
        return kind if kind in GROWTH_KINDS else None

    def _refit_leak(self) -> None:
        now = self._clock()
        if not self._leak_dirty or now - self._leak_at < self._leak_every:
            return
        c0 = time.thread_time()
        limit = self._host.limit if self._host is not None else None
        for key, g in self._groups.items():
            t, y = g.t, g.y
            # Fitted as the summary fits: an ended run's teardown (it frees what leaked) is left out the same way.
            plan = fit_plan(
                self._phases.get(key[0], ()),
                t[-1] if t else 0.0,
                ended=self._exit is not None,
                start_s=self._train_start,
            )
            v = plan.verdict(t, y, limit)
            g.verdict, g.slope = v.verdict, v.slope_bytes_per_s
        self._leak_at, self._leak_dirty = now, False
        self._leak_every = max(LEAK_EVERY_S, (time.thread_time() - c0) / LEAK_CPU_BUDGET)

    # -- serving and pushing ---------------------------------------------------------------------------------
    def serve(self, host: str, port: int) -> str:
        """Listen on (host, port) at once (OSError if it cannot: the caller says so and starts nothing) and serve
        ``/metrics`` from a daemon thread; returns the URL."""
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from prometheus_client import make_wsgi_app
        from prometheus_client.exposition import ThreadingWSGIServer

        class Quiet(WSGIRequestHandler):
            def log_message(self, *_args: Any) -> None:  # the run's terminal is the user's, not a log
                pass

        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        server_cls = type("MemscopeMetricsServer", (ThreadingWSGIServer,), {"address_family": family})
        metrics = make_wsgi_app(self.registry)

        def app(environ: dict, start_response: Callable) -> Any:
            c0 = time.thread_time()
            try:
                return metrics(environ, start_response)  # the whole body, rendered in this call
            finally:
                self.scrape_cpu_s += time.thread_time() - c0

        self._server = make_server(host, port, app, server_cls, handler_class=Quiet)
        bound = self._server.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound}/metrics"
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.5}, name="memscope-prometheus", daemon=True
        ).start()
        return self.url

    def push(self, gateway: str) -> None:
        """Push the current state to a Pushgateway, grouped by run and hostname (it replaces that group's last
        push). Raises OSError (URLError) on failure."""
        from prometheus_client import push_to_gateway

        push_to_gateway(
            gateway,
            job=PUSH_JOB,
            registry=self.registry,
            timeout=PUSH_TIMEOUT_S,
            grouping_key={"run": self.run_id, "hostname": self.hostname},
        )

    def close(self) -> None:
        """Unsubscribe and stop serving."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._closed.set()

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Wait until closed (after the linger); False on timeout."""
        return self._closed.wait(timeout)

    def finish(self, pushgateway: str | None, linger_s: float, warn: Callable[[str], None]) -> None:
        """At the run's end: push the final state, keep the endpoint up ``linger_s`` seconds so a scrape can see
        it, then close. Never raises: the run is over and its status must not change because of us."""
        if pushgateway:
            try:
                self.push(pushgateway)
            except Exception as exc:
                warn(f"memscope: could not push the final state to {pushgateway}: {_reason(exc)}")
        if self._server is None or linger_s <= 0:
            self.close()
        else:
            t = threading.Timer(linger_s, self.close)
            t.daemon = True
            t.start()


class PrometheusSink:
    """The exporter as a run's attachment (``wiring.Attachment``): serves from the run's start, pushes and lingers
    at its end. The run never imports this module: ``memscope/__init__`` registers ``attach``."""

    def __init__(self, run: "Run", listen: tuple[str, int] | None) -> None:
        self.run = run
        self.listen = listen
        self.exporter: Exporter | None = None

    def start(self) -> None:
        """Subscribe to the run and open the endpoint (LaunchError, one line, when the port is taken)."""
        run, o = self.run, self.run.options
        self.exporter = Exporter.for_run(run, o.hostname)
        run.attachments["prometheus"] = self
        if self.listen is not None:
            host, port = self.listen
            try:
                self.exporter.serve(host, port)
            except OSError as exc:
                raise LaunchError(
                    f"--prometheus {o.prometheus}: cannot listen on {host}:{port}: {exc.strerror or exc}"
                ) from None
        exporter = self.exporter
        run.on_end(lambda _run: exporter.finish(o.pushgateway, o.prometheus_linger_s, run.say))

    def close(self) -> None:
        """The run could not start: close the endpoint at once."""
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None


def attach(run: "Run") -> PrometheusSink | None:
    """The sink a run's options ask for (``prometheus=`` / ``pushgateway=``), checked before anything starts."""
    o = run.options
    if not (o.prometheus or o.pushgateway):
        return None
    try:
        if o.pushgateway:
            o.pushgateway = check_pushgateway(o.pushgateway)
        listen = parse_listen(str(o.prometheus)) if o.prometheus else None
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    return PrometheusSink(run, listen)


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = str(reason if reason is not None else exc) or type(exc).__name__
    return text.splitlines()[0] if text else type(exc).__name__
