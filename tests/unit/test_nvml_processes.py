"""Per-pod usage read through NVML: processes placed in pods by their cgroup files, summed per pod
UID, keyed like the exporter's samples; NVML errors counted per device, never fatal; "no sample
since last time" is unknown utilisation, never 0.

The NVML double mimics ``pynvml``: its function and constant names, ``NVMLError`` with
``.value``, processes with ``pid``/``usedGpuMemory`` (bytes, ``None`` when not available)/
``gpuInstanceId``/``computeInstanceId``, utilisation samples with ``pid``/``smUtil``/
``timeStamp``. The proc root is a temporary directory of real cgroup files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY

from agents.dcgm.collect import DcgmCollector
from agents.processes.nvml import (
    NvmlProcesses,
    NvmlUnavailable,
    attach,
    read_processes,
)
from agents.types import AgentRecord
from contract.inputs import DcgmSample, DcgmScrape, DeviceUsage, PodUsage, ProcessUsage
from sim.exporter_rows import ExporterRow
from sim.exporter_server import ExporterDouble

POD_A = "e64c0184-57cc-45cc-896d-edd3d1bf704c"
POD_B = "a34e1cec-0152-43a3-ac99-bea948711919"
CID_A = "e73d754ba7c184f060ad431b571d4c764f540e639c13f6c9b37b1eb405dcfc83"
CID_B = "05673d730914b2867eb75cf8721d5769c86c691cbb76725f16b408f0b948bb8f"
MIB = 1 << 20
NOT_AVAILABLE = (1 << 64) - 1

CGROUPS = {
    # pod A: containerd, systemd driver, cgroup v2
    101: "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{POD_A.replace('-', '_')}.slice/cri-containerd-{CID_A}.scope\n",
    102: "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{POD_A.replace('-', '_')}.slice/cri-containerd-{CID_A}.scope\n",
    # pod B: cgroupfs driver, cgroup v1
    201: "".join(
        f"{n}:{c}:/kubepods/besteffort/pod{POD_B}/{CID_B}\n"
        for n, c in ((5, "memory"), (4, "pids"), (3, "cpu,cpuacct"), (1, "name=systemd"))
    )
    + "0::/\n",
    202: f"0::/kubepods/besteffort/pod{POD_B}/{CID_B}\n",
    # a process on the host, in no pod
    301: "0::/user.slice/user-1000.slice/session-4.scope\n",
    # on the MIG instance: pod A
    601: f"0::/kubepods/besteffort/pod{POD_A}/{CID_A}\n",
    # on the GPU whose utilisation has no new sample: pod B
    701: f"0::/kubepods/besteffort/pod{POD_B}/{CID_B}\n",
    801: f"0::/kubepods/besteffort/pod{POD_B}/{CID_B}\n",
}
VANISHED = 401  # listed by NVML, exited before its cgroup was read


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"NVML error {self.value}"


def proc(pid: int, used: int | None, gi: int = NOT_AVAILABLE & 0xFFFFFFFF) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=gi, computeInstanceId=gi)


def sample(pid: int, sm: int, ts: int) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, smUtil=sm, memUtil=0, encUtil=0, decUtil=0, timeStamp=ts)


@dataclass
class Mig:
    gi: int
    processes: list[SimpleNamespace]


@dataclass
class Gpu:
    uuid: str
    processes: list[SimpleNamespace] | NVMLError = field(default_factory=list)
    samples: list[SimpleNamespace] | NVMLError = field(default_factory=list)
    migs: list[Mig | None] | None = None  # None: MIG not supported; a None slot is empty
    uuid_error: NVMLError | None = None


class FakeNvml:
    """The ``pynvml`` calls the reader makes, over a list of GPUs (handles are the objects)."""

    NVMLError = NVMLError
    NVML_SUCCESS = 0
    NVML_ERROR_UNINITIALIZED = 1
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, gpus: list[Gpu]) -> None:
        self.gpus = gpus
        self.utilization_calls: list[tuple[str, int]] = []

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Gpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: Gpu) -> bytes:
        if handle.uuid_error is not None:
            raise handle.uuid_error
        return handle.uuid.encode()

    def nvmlDeviceGetMigMode(self, handle: Gpu) -> tuple[int, int]:
        if handle.migs is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return self.NVML_DEVICE_MIG_ENABLE, self.NVML_DEVICE_MIG_ENABLE

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Gpu) -> int:
        return len(handle.migs or ())

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Gpu, index: int) -> Mig:
        mig = (handle.migs or [])[index]
        if mig is None:
            raise NVMLError(self.NVML_ERROR_NOT_FOUND)
        return mig

    def nvmlDeviceGetGpuInstanceId(self, handle: Mig) -> int:
        return handle.gi

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Gpu | Mig) -> list[SimpleNamespace]:
        if isinstance(handle.processes, NVMLError):
            raise handle.processes
        return handle.processes

    def nvmlDeviceGetProcessUtilization(self, handle: Gpu, last_seen: int) -> list[Any]:
        assert isinstance(handle, Gpu), "NVML samples no per-process utilisation on MIG"
        self.utilization_calls.append((handle.uuid, last_seen))
        if isinstance(handle.samples, NVMLError):
            raise handle.samples
        newer = [s for s in handle.samples if s.timeStamp > last_seen]
        if not newer:
            raise NVMLError(self.NVML_ERROR_NOT_FOUND)
        return newer


def node() -> FakeNvml:
    return FakeNvml(
        [
            Gpu(  # shared by two pods and a host process
                "GPU-aaaa",
                processes=[
                    proc(101, 1024 * MIB),
                    proc(102, 512 * MIB),
                    proc(101, 1024 * MIB),  # listed twice: counted once
                    proc(201, 2048 * MIB),
                    proc(202, None),  # NVML has no figure: pod B's sum is unknown
                    proc(301, 256 * MIB),
                    proc(VANISHED, 64 * MIB),
                ],
                samples=[
                    sample(101, 30, 1_000),
                    sample(101, 40, 2_000),  # the latest sample of a process counts
                    sample(201, 50, 1_500),
                    sample(301, 5, 1_200),
                    sample(999, 70, 3_000),  # a process NVML no longer lists
                ],
            ),
            Gpu(  # MIG: two instances, one empty slot; memory only
                "GPU-mmmm",
                migs=[Mig(1, [proc(601, 4096 * MIB, gi=1)]), None, Mig(2, [])],
            ),
            Gpu("GPU-lost", processes=NVMLError(FakeNvml.NVML_ERROR_GPU_IS_LOST)),
            Gpu(  # no utilisation sample since the last read
                "GPU-idle",
                processes=[proc(701, 100 * MIB)],
                samples=NVMLError(FakeNvml.NVML_ERROR_NOT_FOUND),
            ),
            Gpu(  # per-process utilisation not supported
                "GPU-old",
                processes=[proc(801, NOT_AVAILABLE)],
                samples=NVMLError(FakeNvml.NVML_ERROR_NOT_SUPPORTED),
            ),
            Gpu("GPU-nouuid", uuid_error=NVMLError(FakeNvml.NVML_ERROR_NO_PERMISSION)),
        ]
    )


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    for pid, text in CGROUPS.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    return tmp_path


def test_processes_summed_per_pod_and_keyed_like_the_exporters_samples(proc_root: Path) -> None:
    reading = read_processes(node(), proc_root, {})
    assert reading.usage == {
        ("GPU-aaaa", None): DeviceUsage(
            "nvml",
            pods=(
                PodUsage(POD_B, fb_used_mib=None, sm_util_pct=50.0),  # 202 had no sample: 0
                PodUsage(POD_A, fb_used_mib=1536.0, sm_util_pct=40.0),  # 102 had no sample: 0
            ),
            orphans=(ProcessUsage(301, fb_used_mib=256.0, sm_util_pct=5.0),),
        ),
        ("GPU-mmmm", 1): DeviceUsage("nvml", pods=(PodUsage(POD_A, fb_used_mib=4096.0),)),
        ("GPU-mmmm", 2): DeviceUsage("nvml"),  # no process: an explicit empty reading
        ("GPU-idle", None): DeviceUsage("nvml", pods=(PodUsage(POD_B, fb_used_mib=100.0),)),
        ("GPU-old", None): DeviceUsage("nvml", pods=(PodUsage(POD_B),)),
    }
    assert reading.vanished == 1
    assert reading.last_seen == {("GPU-aaaa", None): 3_000}


def test_pods_are_ordered_by_uid(proc_root: Path) -> None:
    usage = read_processes(node(), proc_root, {}).usage[("GPU-aaaa", None)]
    assert [p.pod_uid for p in usage.pods] == sorted([POD_A, POD_B])


def test_nvml_errors_are_reasons_per_device_never_a_crash(proc_root: Path) -> None:
    reading = read_processes(node(), proc_root, {})
    assert [(p.call, p.reason, p.device) for p in reading.problems] == [
        ("nvmlDeviceGetComputeRunningProcesses", "gpu_lost", "GPU-lost"),
        ("nvmlDeviceGetProcessUtilization", "not_supported", "GPU-old"),
        ("nvmlDeviceGetUUID", "no_permission", "GPU 5"),
    ]  # NOT_FOUND for utilisation is no error, an empty MIG slot neither


def test_device_count_failing_reads_nothing(proc_root: Path) -> None:
    nvml = node()

    def fails() -> int:
        raise NVMLError(FakeNvml.NVML_ERROR_UNINITIALIZED)

    nvml.nvmlDeviceGetCount = fails  # type: ignore[method-assign]
    reading = read_processes(nvml, proc_root, {})
    assert reading.usage == {}
    assert [(p.call, p.reason) for p in reading.problems] == [
        ("nvmlDeviceGetCount", "uninitialized")
    ]


def test_utilisation_asks_only_for_samples_since_the_last_read(proc_root: Path) -> None:
    nvml = node()
    first = read_processes(nvml, proc_root, {})
    second = read_processes(nvml, proc_root, first.last_seen)
    assert [c for c in nvml.utilization_calls if c[0] == "GPU-aaaa"] == [
        ("GPU-aaaa", 0),
        ("GPU-aaaa", 3_000),
    ]
    # nothing newer: NVML answers NOT_FOUND, the round's utilisation is unknown (not 0) and the
    # timestamp stays where it was
    assert second.last_seen == {("GPU-aaaa", None): 3_000}
    usage = second.usage[("GPU-aaaa", None)]
    assert [(p.pod_uid, p.sm_util_pct) for p in usage.pods] == [(POD_B, None), (POD_A, None)]
    assert usage.orphans == (ProcessUsage(301, fb_used_mib=256.0),)


def test_no_sample_said_as_success_is_unknown_utilisation_too(proc_root: Path) -> None:
    # pynvml raises NVMLError(NVML_SUCCESS) when NVML's sizing call finds no sample to return
    gpu = Gpu("GPU-idle", [proc(701, 100 * MIB)], NVMLError(FakeNvml.NVML_SUCCESS))
    reading = read_processes(FakeNvml([gpu]), proc_root, {})
    assert reading.usage == {
        ("GPU-idle", None): DeviceUsage("nvml", pods=(PodUsage(POD_B, fb_used_mib=100.0),))
    }
    assert reading.problems == ()


def test_an_unreadable_cgroup_file_is_a_problem_not_an_orphan(proc_root: Path) -> None:
    (proc_root / "301" / "cgroup").unlink()
    (proc_root / "301" / "cgroup").mkdir()  # read_text fails with an OSError other than ENOENT
    reading = read_processes(node(), proc_root, {})
    assert reading.usage[("GPU-aaaa", None)].orphans == ()
    assert ("cgroup", "unreadable") in [(p.call, p.reason) for p in reading.problems]


# --- the agent's reader: NVML loaded once, problems counted --------------------------------------


def errors_total(call: str, reason: str) -> float:
    labels = {"call": call, "reason": reason}
    return REGISTRY.get_sample_value("gpuattr_agent_nvml_process_errors_total", labels) or 0.0


def vanished_total() -> float:
    return REGISTRY.get_sample_value("gpuattr_agent_nvml_processes_vanished_total") or 0.0


def test_reader_counts_problems_and_keeps_timestamps(proc_root: Path) -> None:
    nvml = node()
    loads: list[int] = []

    def load() -> ModuleType:
        loads.append(1)
        return nvml  # type: ignore[return-value]

    reader = NvmlProcesses(proc_root, load)
    lost = errors_total("nvmlDeviceGetComputeRunningProcesses", "gpu_lost")
    gone = vanished_total()
    assert set(reader()) == {
        ("GPU-aaaa", None),
        ("GPU-mmmm", 1),
        ("GPU-mmmm", 2),
        ("GPU-idle", None),
        ("GPU-old", None),
    }
    reader()
    assert loads == [1]
    assert errors_total("nvmlDeviceGetComputeRunningProcesses", "gpu_lost") == lost + 2
    assert vanished_total() == gone + 2
    assert [c for c in nvml.utilization_calls if c[0] == "GPU-aaaa"] == [
        ("GPU-aaaa", 0),
        ("GPU-aaaa", 3_000),
    ]


def test_reader_without_nvml_reads_nothing_and_tries_again(proc_root: Path) -> None:
    attempts: list[int] = []

    def load() -> ModuleType:
        attempts.append(1)
        raise NvmlUnavailable("library_not_found", "NVML Shared Library Not Found")

    reader = NvmlProcesses(proc_root, load)
    before = errors_total("nvmlInit", "library_not_found")
    assert reader() == {}
    assert reader() == {}
    assert len(attempts) == 2
    assert errors_total("nvmlInit", "library_not_found") == before + 2


# --- attaching readings to the exporter's samples ------------------------------------------------


def dcgm_sample(uuid: str, gi: int | None = None, usage: DeviceUsage | None = None) -> DcgmSample:
    return DcgmSample("node-1", 7, uuid, 0, "A100", "node-1", mig_instance_id=gi, usage=usage)


def test_attach_fills_only_samples_without_the_exporters_own_reading() -> None:
    exporters = DeviceUsage("exporter", pods=(PodUsage(POD_A, sm_util_pct=10.0),))
    nvml = DeviceUsage("nvml", pods=(PodUsage(POD_B, sm_util_pct=20.0),))
    samples = [
        dcgm_sample("GPU-aaaa"),
        dcgm_sample("GPU-bbbb", usage=exporters),
        dcgm_sample("GPU-mmmm", 1),
        dcgm_sample("GPU-mmmm", 2),
        dcgm_sample("GPU-none"),
    ]
    readings = {("GPU-aaaa", None): nvml, ("GPU-bbbb", None): nvml, ("GPU-mmmm", 2): nvml}
    assert [s.usage for s in attach(samples, readings)] == [nvml, exporters, None, nvml, None]


# --- the collector reads NVML once per scrape ----------------------------------------------------


@dataclass
class CountingReader:
    usage: dict[tuple[str, int | None], DeviceUsage]
    calls: int = 0

    def __call__(self) -> dict[tuple[str, int | None], DeviceUsage]:
        self.calls += 1
        return self.usage


async def test_collector_attaches_one_nvml_read_per_scrape() -> None:
    rows = [
        ExporterRow(i, f"GPU-{i}", "L4", "node-1", values=(("DCGM_FI_DEV_GPU_UTIL", 10.0),))
        for i in range(2)
    ]
    reading = DeviceUsage("nvml", pods=(PodUsage(POD_A, fb_used_mib=10.0, sm_util_pct=5.0),))
    reader = CountingReader({("GPU-1", None): reading})
    out: list[AgentRecord] = []

    async def emit(record: AgentRecord) -> None:
        out.append(record)

    async with ExporterDouble(lambda: rows) as exporter, aiohttp.ClientSession() as session:
        collector = DcgmCollector(
            node="node-1",
            url=exporter.url,
            interval_s=5,
            timeout_s=1,
            emit=emit,
            now_ms=lambda: 7,
            usage=reader,
        )
        assert await collector.scrape_once(session) == 2
    (scrape,) = out
    assert isinstance(scrape, DcgmScrape)
    assert [(s.uuid, s.usage) for s in scrape.samples] == [("GPU-0", None), ("GPU-1", reading)]
    assert reader.calls == 1
