"""Per-pod GPU usage read by the agent itself: NVML's processes per device, each placed in its pod
by its cgroup (:mod:`agents.processes.cgroup`), summed per pod UID.

The exporter's virtual-GPU mode does the same only when it runs with ``hostPID`` and a pod
informer, and only on builds that have it; this reading needs neither: the agent's own
``hostPID``, with which its ``/proc`` (``proc_root``) lists the host's processes. Pod UIDs are
the cgroups', not checked against any pod here: the worker credits a reading only to a pod of
that UID holding the device.

Per device (GPU, or MIG instance keyed by its parent's UUID and GPU instance ID, as the exporter's
samples are): the compute processes and their memory, and on a whole GPU their SM utilisation
since the last read (NVML samples none per process on a MIG instance). A MIG instance is read
through its own handle, which lists only its own processes (their ``gpuInstanceId`` is its):
the parent's handle would list them all, and only to a privileged caller. A sum missing one of its
processes' values is not the pod's figure: such a pod reads ``None``, not a smaller number.
NVML answers "no sample since then" (``NVML_ERROR_NOT_FOUND``) both when every process idled and
when it took no sample: that round's utilisation is unknown, never 0. A process with no sample
in an answer that has some did not run on the SMs: 0.

Every NVML error is caught per device and counted (``gpuattr_agent_nvml_process_errors_total``);
that device then has no per-pod reading, which the worker reads as unknown. A process that exits
between NVML's list and the read of its cgroup is left out and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from agents.processes.cgroup import CgroupIdentity, identity_of
from agents.selfmetrics import NVML_PROCESS_ERRORS, NVML_PROCESSES_VANISHED
from contract.inputs import DcgmSample, DeviceUsage, PodUsage, ProcessUsage
from contract.records import replace

log = logging.getLogger(__name__)

#: (GPU UUID, GPU instance ID or None for a whole GPU): the key of the exporter's samples
DeviceKey = tuple[str, int | None]
#: what the collector calls once per scrape
ReadUsage = Callable[[], Mapping[DeviceKey, DeviceUsage]]

MIB = 1 << 20
#: NVML's "not available" for a 64-bit value (the bindings turn it into None; raw values too)
_NOT_AVAILABLE = (1 << 64) - 1
#: NVML's error codes by the module's constant names, as reasons (a bounded label set)
_REASONS = {
    "NVML_SUCCESS": "no_data",  # pynvml raises it when a sizing call finds nothing to return
    "NVML_ERROR_UNINITIALIZED": "uninitialized",
    "NVML_ERROR_NOT_SUPPORTED": "not_supported",
    "NVML_ERROR_NO_PERMISSION": "no_permission",
    "NVML_ERROR_NOT_FOUND": "not_found",
    "NVML_ERROR_GPU_IS_LOST": "gpu_lost",
    "NVML_ERROR_TIMEOUT": "timeout",
    "NVML_ERROR_DRIVER_NOT_LOADED": "driver_not_loaded",
    "NVML_ERROR_LIBRARY_NOT_FOUND": "library_not_found",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "function_not_found",
    "NVML_ERROR_RESET_REQUIRED": "reset_required",
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One failed read: which NVML call (or ``cgroup``), why, and of which device."""

    call: str
    reason: str
    device: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Reading:
    """One read of every device: per-pod usage by device, what failed, how many processes
    exited before their cgroup was read, and the utilisation timestamps for the next read."""

    usage: dict[DeviceKey, DeviceUsage]
    problems: tuple[Problem, ...] = ()
    vanished: int = 0
    last_seen: dict[DeviceKey, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Process:
    pid: int
    fb_used_mib: float | None
    sm_util_pct: float | None


def reason_of(nvml: Any, exc: BaseException) -> str:
    """An NVML error as a short reason; ``other`` for a code not named in :data:`_REASONS`."""
    value = getattr(exc, "value", None)
    for name, reason in _REASONS.items():
        if value is not None and getattr(nvml, name, None) == value:
            return reason
    return "other"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _mib(used: Any) -> float | None:
    if used is None or int(used) >= _NOT_AVAILABLE:
        return None
    return int(used) / MIB


class _Read:
    """The state of one read: what failed and how many processes vanished, gathered as it goes."""

    def __init__(self, nvml: Any, proc_root: Path, last_seen: Mapping[DeviceKey, int]) -> None:
        self.nvml = nvml
        self.proc_root = proc_root
        self.last_seen = dict(last_seen)
        self.usage: dict[DeviceKey, DeviceUsage] = {}
        self.problems: list[Problem] = []
        self.vanished = 0

    def failed(self, call: str, exc: BaseException, device: str) -> None:
        self.problems.append(Problem(call, reason_of(self.nvml, exc), device, str(exc)))

    def gpus(self) -> None:
        nvml = self.nvml
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            self.failed("nvmlDeviceGetCount", exc, "")
            return
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as exc:
                self.failed("nvmlDeviceGetHandleByIndex", exc, f"GPU {index}")
                continue
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except nvml.NVMLError as exc:
                self.failed("nvmlDeviceGetUUID", exc, f"GPU {index}")
                continue
            instances = self.mig_instances(handle, uuid)
            if instances is None:
                self.device((uuid, None), handle, utilization=True)
            for gi, mig in instances or ():
                self.device((uuid, gi), mig, utilization=False)

    def mig_instances(self, handle: Any, uuid: str) -> list[tuple[int, Any]] | None:
        """The MIG instances of a GPU in MIG mode (GPU instance ID, handle); ``None`` when it is
        not in MIG mode (or cannot be: NVML says not supported)."""
        nvml = self.nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError as exc:
            if reason_of(nvml, exc) != "not_supported":
                self.failed("nvmlDeviceGetMigMode", exc, uuid)
            return None
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return None
        instances: list[tuple[int, Any]] = []
        try:
            slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        except nvml.NVMLError as exc:
            self.failed("nvmlDeviceGetMaxMigDeviceCount", exc, uuid)
            return instances
        for slot in range(slots):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError:
                continue  # an empty slot
            try:
                instances.append((int(nvml.nvmlDeviceGetGpuInstanceId(mig)), mig))
            except nvml.NVMLError as exc:
                self.failed("nvmlDeviceGetGpuInstanceId", exc, f"{uuid} MIG slot {slot}")
        return instances

    def device(self, key: DeviceKey, handle: Any, *, utilization: bool) -> None:
        nvml = self.nvml
        name = key[0] if key[1] is None else f"{key[0]} GI {key[1]}"
        try:
            listed = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except nvml.NVMLError as exc:
            self.failed("nvmlDeviceGetComputeRunningProcesses", exc, name)
            return
        sm_util = self.sm_util(key, handle, name) if utilization else None
        processes: dict[int, _Process] = {}
        for proc in listed:
            pid = int(proc.pid)
            if pid not in processes:  # the same process listed twice is counted once
                util = None if sm_util is None else sm_util.get(pid, 0.0)
                processes[pid] = _Process(pid, _mib(proc.usedGpuMemory), util)
        placed: list[tuple[_Process, CgroupIdentity | None]] = []
        for process in processes.values():
            text = self.cgroup_text(process.pid)
            if text is not None:  # an exited process is no one's
                placed.append((process, identity_of(text)))
        self.usage[key] = device_usage(placed)

    def sm_util(self, key: DeviceKey, handle: Any, name: str) -> dict[int, float] | None:
        """Each sampled process's SM utilisation (its latest sample since the last read);
        ``None`` when unknown this round."""
        nvml = self.nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, self.last_seen.get(key, 0))
        except nvml.NVMLError as exc:
            if reason_of(nvml, exc) not in ("not_found", "no_data"):  # no sample since then
                self.failed("nvmlDeviceGetProcessUtilization", exc, name)
            return None
        latest: dict[int, tuple[int, float]] = {}
        for sample in samples:
            pid, ts = int(sample.pid), int(sample.timeStamp)
            if pid not in latest or ts >= latest[pid][0]:
                latest[pid] = (ts, float(sample.smUtil))
        if latest:
            self.last_seen[key] = max(ts for ts, _ in latest.values())
        return {pid: util for pid, (_, util) in latest.items()}

    def cgroup_text(self, pid: int) -> str | None:
        """The text of a process's cgroup file; ``None`` when it cannot be read (the process
        exited: counted; or the file is unreadable: a problem)."""
        path = self.proc_root / str(pid) / "cgroup"
        try:
            return path.read_text(errors="replace")
        except (FileNotFoundError, ProcessLookupError):
            self.vanished += 1
        except OSError as exc:
            self.problems.append(Problem("cgroup", "unreadable", str(path), str(exc)))
        return None


def device_usage(placed: Iterable[tuple[_Process, CgroupIdentity | None]]) -> DeviceUsage:
    """The device's processes summed per pod UID; those in no pod's cgroup as orphans."""
    per_pod: dict[str, list[_Process]] = {}
    orphans: list[ProcessUsage] = []
    for process, identity in placed:
        if identity is not None:
            per_pod.setdefault(identity.pod_uid, []).append(process)
        else:
            orphans.append(
                ProcessUsage(
                    process.pid, fb_used_mib=process.fb_used_mib, sm_util_pct=process.sm_util_pct
                )
            )
    pods = tuple(
        PodUsage(
            uid,
            fb_used_mib=_sum(p.fb_used_mib for p in processes),
            sm_util_pct=_sum(p.sm_util_pct for p in processes),
        )
        for uid, processes in sorted(per_pod.items())
    )
    return DeviceUsage("nvml", pods, tuple(sorted(orphans, key=lambda o: o.pid)))


def _sum(values: Iterable[float | None]) -> float | None:
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def read_processes(nvml: Any, proc_root: Path, last_seen: Mapping[DeviceKey, int]) -> Reading:
    """Read every device's processes through an initialised ``pynvml`` module."""
    read = _Read(nvml, proc_root, last_seen)
    read.gpus()
    return Reading(read.usage, tuple(read.problems), read.vanished, read.last_seen)


def attach(
    samples: Sequence[DcgmSample], usage: Mapping[DeviceKey, DeviceUsage]
) -> tuple[DcgmSample, ...]:
    """The samples with their device's reading, where the exporter gave none of its own."""
    return tuple(
        replace(s, usage=found)
        if s.usage is None and (found := usage.get((s.uuid, s.mig_instance_id))) is not None
        else s
        for s in samples
    )


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this node (no bindings, no driver library, init failed)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def load_pynvml() -> ModuleType:
    """The ``pynvml`` module, initialised (imported only when this reading is switched on)."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable("no_bindings", f"nvidia-ml-py is not installed: {exc}") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(reason_of(pynvml, exc), str(exc)) from exc
    module: ModuleType = pynvml
    return module


class NvmlProcesses:
    """The agent's reader (:data:`ReadUsage`): NVML initialised at the first read and kept (NVML
    counts its initialisations, so the inventory's own init and shutdown leave it alone), each
    GPU's utilisation timestamp kept between reads, problems counted and each kind logged once.
    Until NVML can be initialised every read is empty and tries again."""

    def __init__(self, proc_root: Path, load: Callable[[], ModuleType] = load_pynvml) -> None:
        self._proc_root = proc_root
        self._load = load
        self._nvml: ModuleType | None = None
        self._last_seen: dict[DeviceKey, int] = {}
        self._logged: set[tuple[str, str]] = set()

    def __call__(self) -> dict[DeviceKey, DeviceUsage]:
        if self._nvml is None:
            try:
                self._nvml = self._load()
            except NvmlUnavailable as exc:
                self._note(Problem("nvmlInit", exc.reason, "", str(exc)))
                return {}
        reading = read_processes(self._nvml, self._proc_root, self._last_seen)
        self._last_seen = reading.last_seen
        for problem in reading.problems:
            self._note(problem)
        if reading.vanished:
            NVML_PROCESSES_VANISHED.inc(reading.vanished)
        return reading.usage

    def _note(self, problem: Problem) -> None:
        NVML_PROCESS_ERRORS.labels(problem.call, problem.reason).inc()
        kind = (problem.call, problem.reason)
        if kind in self._logged:
            log.debug("NVML per-process read: %s", problem)
            return
        self._logged.add(kind)
        log.warning(
            "NVML per-process read: %s failed (%s)%s: %s (what it reads stays unknown; counted "
            "in gpuattr_agent_nvml_process_errors_total, logged once per kind)",
            problem.call,
            problem.reason,
            f" on {problem.device}" if problem.device else "",
            problem.detail,
        )
