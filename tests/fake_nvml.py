"""A fake NVML (the ``pynvml`` surface memscope's collector calls) whose every number comes from an nvidia-smi
capture recorded on a real GPU (tests/fixtures/gpu: an H100, an H100 in MIG mode, a Tesla T4; README there).

nvidia-smi is itself an NVML client: ``-q`` prints what ``nvmlDeviceGetMemoryInfo`` (v2: total, reserved, used,
free), ``nvmlDeviceGetMigMode``, the MIG device handles and ``nvmlDeviceGet*RunningProcesses`` return. The fake
parses those prints back into NVML's answers. Where a capture cannot show a behaviour, the fake reproduces NVML's
documented one, and says so by its options:
- ``privileged=False``: an unprivileged caller (a container) gets NVML_ERROR_NO_PERMISSION for the per-process
  aggregate on a MIG-enabled parent device, and per-instance lists from the MIG device handles (NVML API reference,
  nvmlDeviceGetComputeRunningProcesses).
- ``v2=False``: a driver before R510 has no nvmlDeviceGetMemoryInfo_v2 (NVML_ERROR_FUNCTION_NOT_FOUND); v1's
  ``used`` is total - free, the driver's reserved memory included.
- ``not_available=True``: per-process memory is NVML_VALUE_NOT_AVAILABLE (always so under Windows WDDM);
  ``raw_sentinel`` passes it as the raw 2**64-1 (old bindings), else as None (what nvidia-ml-py returns).
Errors are nvidia-ml-py's own exception classes, so the collector meets what it would meet.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pynvml

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "gpu")
MiB = 1 << 20


def _mib(text: str) -> int | None:
    m = re.match(r"\s*(\d+)\s*MiB", text or "")
    return int(m.group(1)) * MiB if m else None


def sections(path: str) -> dict[str, str]:
    with open(path) as f:
        text = f.read()
    parts = re.split(r"^#{80}\n# (.+?)\n#{80}\n", text, flags=re.M)
    return {t.strip(): b for t, b in zip(parts[1::2], parts[2::2])}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def parse_q(text: str) -> list[dict]:
    """Devices of an ``nvidia-smi -q`` print: name, memory (bytes), MIG mode and devices, processes."""
    devices: list[dict] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"^GPU [0-9A-Fa-f:.]+\s*$", line):
            devices.append({"name": "", "mig_mode": "N/A", "mig": [], "processes": [], "memory": {}})
        elif devices:
            dev = devices[-1]
            key, _, value = line.strip().partition(":")
            key, value = key.strip(), value.strip()
            ind = _indent(line)
            if ind == 4 and key == "Product Name":
                dev["name"] = value
            elif ind == 4 and key == "MIG Mode":
                dev["mig_mode"] = lines[i + 1].split(":", 1)[1].strip()
            elif ind == 4 and key == "MIG Device":
                dev["mig"].append({"memory": {}})
            elif (
                ind == 8
                and dev["mig"]
                and key in ("Index", "GPU Instance ID", "Compute Instance ID")
                and _in_block(lines, i, "MIG Device")
            ):
                dev["mig"][-1][key] = int(value)
            elif key in ("FB Memory Usage", "Shared FB Memory Usage"):
                target = dev["memory"] if ind == 4 else dev["mig"][-1]["memory"]
                for j in range(1, 5):
                    k, _, v = lines[i + j].strip().partition(":")
                    target[k.strip().lower()] = _mib(v)
                i += 4
            elif ind == 8 and key == "GPU instance ID" and _in_block(lines, i, "Processes"):
                dev["processes"].append({"gi": _int(value)})
            elif ind == 8 and key == "Compute instance ID" and dev["processes"]:
                dev["processes"][-1]["ci"] = _int(value)
            elif ind == 8 and key == "Process ID" and dev["processes"]:
                dev["processes"][-1]["pid"] = int(value)
            elif ind == 12 and key == "Type" and dev["processes"]:
                dev["processes"][-1]["type"] = value
            elif ind == 12 and key == "Used GPU Memory" and dev["processes"]:
                dev["processes"][-1]["used"] = _mib(value)
        i += 1
    return devices


def _in_block(lines: list[str], i: int, name: str) -> bool:
    for j in range(i - 1, -1, -1):
        if _indent(lines[j]) == 4:
            return lines[j].strip().split(":")[0].strip() == name
    return False


def _int(v: str) -> int | None:
    return int(v) if v.strip().isdigit() else None


def parse_xml(path: str) -> list[dict]:
    """Devices of an ``nvidia-smi -q -x`` document."""
    out = []
    for gpu in ET.parse(path).getroot().iter("gpu"):
        fb = gpu.find("fb_memory_usage")
        mig = (gpu.findtext("mig_mode/current_mig") or "").strip()
        procs = []
        for p in gpu.iter("process_info"):
            procs.append(
                {
                    "gi": _int(p.findtext("gpu_instance_id") or ""),
                    "ci": _int(p.findtext("compute_instance_id") or ""),
                    "pid": int(p.findtext("pid")),
                    "type": p.findtext("type"),
                    "used": _mib(p.findtext("used_memory") or ""),
                }
            )
        out.append(
            {
                "name": gpu.findtext("product_name"),
                "mig_mode": mig,
                "mig": [],
                "processes": procs,
                "memory": {k: _mib(fb.findtext(k) or "") for k in ("total", "reserved", "used", "free")},
            }
        )
    return out


def compute_apps(text: str) -> dict[int, int]:
    """pid -> used bytes from a ``--query-compute-apps=...,pid,process_name,used_gpu_memory`` CSV."""
    out = {}
    for line in text.strip().splitlines()[1:]:
        cols = [c.strip() for c in line.split(",")]
        out[int(cols[5])] = _mib(cols[7])
    return out


def capture(name: str, state: str = "load") -> list[dict]:
    """The devices of one recorded state: ``h100`` / ``h100-mig`` (``idle`` or ``load``) or ``t4``."""
    if name == "t4":
        return parse_xml(os.path.join(FIXTURES, "nvidia-smi-q-x_tesla-t4.xml"))
    return parse_q(sections(os.path.join(FIXTURES, f"nvidia-smi_{name}_sections.txt"))[f"{state} :: query (-q)"])


class FakeNvml:
    """The ``pynvml`` functions the collector calls, answering from ``devices`` (``capture()``)."""

    NVMLError = pynvml.NVMLError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_DEVICE_MIG_DISABLE = pynvml.NVML_DEVICE_MIG_DISABLE

    def __init__(
        self,
        devices: list[dict],
        privileged: bool = True,
        v2: bool = True,
        not_available: bool = False,
        raw_sentinel: bool = False,
        driver_loaded: bool = True,
    ) -> None:
        self.devices = devices
        self.privileged, self.v2, self.not_available, self.raw = privileged, v2, not_available, raw_sentinel
        self.driver_loaded = driver_loaded
        self.calls: list[str] = []
        self.shut = False

    @staticmethod
    def _err(code: int) -> Exception:
        return pynvml.NVMLError(code)  # nvidia-ml-py maps the code to its subclass (NVMLError_NoPermission...)

    def nvmlInit(self) -> None:
        if not self.driver_loaded:
            raise self._err(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> tuple:
        if not 0 <= i < len(self.devices):
            raise self._err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ("gpu", i)

    def nvmlDeviceGetName(self, h: tuple) -> str:
        return self.devices[h[1]]["name"]

    def _unit(self, h: tuple) -> dict:
        dev = self.devices[h[1]]
        return dev if h[0] == "gpu" else dev["mig"][h[2]]

    def nvmlDeviceGetMemoryInfo(self, h: tuple, version: int | None = None) -> SimpleNamespace:
        self.calls.append("memory_v2" if version else "memory_v1")
        m = self._unit(h)["memory"]
        if version:
            if not self.v2:
                raise self._err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return SimpleNamespace(
                version=version, total=m["total"], reserved=m["reserved"], used=m["used"], free=m["free"]
            )
        # v1 on an R510+ driver: used is everything not free, the driver's reservation included.
        return SimpleNamespace(total=m["total"], free=m["free"], used=m["total"] - m["free"])

    def nvmlDeviceGetMigMode(self, h: tuple) -> list[int]:
        dev = self.devices[h[1]]
        if h[0] != "gpu" or dev["mig_mode"] not in ("Enabled", "Disabled"):
            raise self._err(pynvml.NVML_ERROR_NOT_SUPPORTED)  # a GPU without MIG (the T4's capture says N/A)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if dev["mig_mode"] == "Enabled" else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: tuple) -> int:
        return 7 if self.devices[h[1]]["mig_mode"] == "Enabled" else 0  # an H100 has 7 MIG slices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: tuple, j: int) -> tuple:
        migs = self.devices[h[1]]["mig"]
        k = next((k for k, m in enumerate(migs) if m["Index"] == j), None)
        if k is None:
            raise self._err(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", h[1], k)

    def nvmlDeviceGetGpuInstanceId(self, h: tuple) -> int:
        if h[0] != "mig":
            raise self._err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._unit(h)["GPU Instance ID"]

    def _procs(self, h: tuple, kind: str) -> list[SimpleNamespace]:
        dev = self.devices[h[1]]
        if h[0] == "gpu" and dev["mig_mode"] == "Enabled" and not self.privileged:
            raise self._err(pynvml.NVML_ERROR_NO_PERMISSION)
        rows = [p for p in dev["processes"] if kind in (p.get("type") or "C")]
        if h[0] == "mig":
            gi = self._unit(h)["GPU Instance ID"]
            rows = [p for p in rows if p.get("gi") == gi]
        out = []
        for p in rows:
            used = p.get("used")
            if self.not_available or used is None:
                used = (1 << 64) - 1 if self.raw else None
            out.append(
                SimpleNamespace(
                    pid=p["pid"], usedGpuMemory=used, gpuInstanceId=p.get("gi"), computeInstanceId=p.get("ci")
                )
            )
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, h: tuple) -> list[SimpleNamespace]:
        return self._procs(h, "C")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: tuple) -> list[SimpleNamespace]:
        return self._procs(h, "G")
