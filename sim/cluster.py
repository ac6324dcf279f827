"""A simulated cluster at scenario time ``t``: what each double serves. Pure given ``t``.

The kubelet double serves :meth:`Cluster.podresources`, the exporter double
:meth:`Cluster.exporter_rows` and the API-server double the pod and node objects, all derived
from one :class:`~sim.scenario.Scenario`, so the three views always agree.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence

from contract.inputs import AllocatableDevice, DeviceAssignment
from sim import dra, traces
from sim.exporter_rows import ExporterRow
from sim.scenario import NodeSpec, PodSpec, Scenario, Slot, gpu_uuid, mig_uuid, parse_slot
from sim.virtual_gpus import ListedPod


def pci_bus_id(gpu: int) -> str:
    """GPU ``gpu``'s PCI bus id, as NVML and dcgm-exporter's ``pci_bus_id`` label both print it."""
    return f"00000000:{0x17 + gpu:02X}:00.0"


def resource_name(node: NodeSpec, slot: Slot) -> str:
    if slot.gi is not None and node.mig is not None:
        return f"nvidia.com/mig-{node.mig.profile}"
    if node.rename_shared and node.replicas_of(slot.gpu) > 1:
        return "nvidia.com/gpu.shared"
    return "nvidia.com/gpu"


def device_id(node: NodeSpec, slot: Slot) -> str:
    base = (
        mig_uuid(node.name, slot.gpu, slot.gi)
        if slot.gi is not None
        else gpu_uuid(node.name, slot.gpu)
    )
    return base if slot.replica is None else f"{base}::{slot.replica}"


def healthy(node: NodeSpec, slot: Slot, t: float | None) -> bool:
    """Whether the device plugin says the device at ``slot`` is healthy at ``t`` (None: any)."""
    return t is None or node.health_at(slot, t) == "Healthy"


def allocatable_counts(node: NodeSpec, t: float | None = None) -> dict[str, str]:
    """What the device plugin advertises on the node: resource → count (a MIG GPU its
    instances, a shared GPU its replicas, under the renamed resource where it is renamed). At
    ``t`` the kubelet's allocatable: the devices its plugin says are healthy then (a resource
    whose devices are all unhealthy reads 0); ``t`` None: every device, the node's capacity."""
    counts: Counter[str] = Counter()
    for gpu in range(node.gpus):
        replicas = node.replicas_of(gpu)
        if node.mig and gpu in node.mig.gpus:
            counts[f"nvidia.com/mig-{node.mig.profile}"] += sum(
                healthy(node, Slot(gpu, gi, None), t) for gi in node.mig.instances
            )
        else:
            counts[
                "nvidia.com/gpu.shared" if node.rename_shared and replicas > 1 else "nvidia.com/gpu"
            ] += replicas if healthy(node, Slot(gpu, None, None), t) else 0
    return {k: str(v) for k, v in sorted(counts.items())}


def holds_at(pod: PodSpec, t: float) -> bool:
    """The pod holds its slots from start until its containers stop after the grace period
    (a pod the scheduler never binds holds nothing)."""
    released = pod.released_s
    return bool(pod.node) and pod.start_s <= t and (released is None or t < released)


def listed_pods(
    spec: NodeSpec, gpu: int, gi: int | None, pods: Sequence[PodSpec], t: float
) -> tuple[ListedPod, ...]:
    """What dcgm-exporter's virtual-GPU mode reads from the kubelet's ``List`` for one device:
    one entry per (pod, container, device ID), in the order the kubelet double lists them (pods
    by namespace and name, then containers, then device IDs). It looks up ``nvidia.com/gpu`` and
    ``nvidia.com/mig-*`` only: a renamed shared resource, or a device reached through a DRA
    claim, lists nobody and its device keeps its plain rows."""
    if spec.dra:
        return ()
    entries: list[tuple[tuple[str, str, str, str], ListedPod]] = []
    for pod in pods:
        for container, slots in pod.held_by_container:
            for slot in map(parse_slot, slots):
                resource = resource_name(spec, slot)
                if (slot.gpu, slot.gi) != (gpu, gi) or resource == "nvidia.com/gpu.shared":
                    continue
                entry = ListedPod(
                    pod.namespace,
                    pod.name,
                    container,
                    pod.uid,
                    vgpu="" if slot.replica is None else str(slot.replica),
                    sm_util_pct=pod.util_at(t),
                    fb_used_mib=pod.memory_at(t),
                )
                entries.append(((pod.namespace, pod.name, container, device_id(spec, slot)), entry))
    return tuple(entry for _, entry in sorted(entries, key=lambda e: e[0]))


class Cluster:
    """Answers every double's question from the scenario and a scenario clock."""

    def __init__(self, scenario: Scenario, clock: Callable[[], float]) -> None:
        self.scenario = scenario
        self.clock = clock

    def holders(self, node: str, t: float | None = None) -> list[PodSpec]:
        t = self.clock() if t is None else t
        return [p for p in self.scenario.pods if p.node == node and holds_at(p, t)]

    def podresources(
        self, node: str
    ) -> tuple[tuple[DeviceAssignment, ...], tuple[AllocatableDevice, ...]]:
        spec = self.scenario.node(node)
        if spec.dra:  # no device plugin: claimed devices only, nothing allocatable listed
            return tuple(
                sorted(set(dra.podresources_rows(self.scenario, spec, self.holders(node))))
            ), ()
        rows = []
        for pod in self.holders(node):
            for container, slots in pod.held_by_container:
                for text in slots:
                    slot = parse_slot(text)
                    rows.append(
                        DeviceAssignment(
                            pod.namespace,
                            pod.name,
                            container,
                            resource_name(spec, slot),
                            device_id(spec, slot),
                        )
                    )
        return tuple(sorted(set(rows))), self.allocatable(spec)

    def dra_objects(self, epoch_s: float) -> list[dict[str, object]]:
        """The DRA nodes' ResourceSlices and the claims allocated now (the API server's view)."""
        slices = [dra.slice_object(n) for n in self.scenario.nodes if n.dra]
        holding = [p for p in self.scenario.pods if holds_at(p, self.clock())]
        return [*slices, *dra.claim_objects(self.scenario, holding, epoch_s)]

    def allocatable(self, spec: NodeSpec) -> tuple[AllocatableDevice, ...]:
        """The kubelet's ``GetAllocatableResources``: the devices its plugin says are healthy
        now (the kubelet filters out unhealthy ones; held ones stay in ``List``)."""
        t = self.clock()
        out = []
        for gpu in range(spec.gpus):
            replicas = spec.replicas_of(gpu)
            gis: list[int | None] = (
                list(spec.mig.instances) if spec.mig and gpu in spec.mig.gpus else [None]
            )
            for gi in gis:
                for r in range(replicas):
                    slot = Slot(gpu, gi, r if replicas > 1 else None)
                    if healthy(spec, slot, t):
                        out.append(
                            AllocatableDevice(resource_name(spec, slot), device_id(spec, slot))
                        )
        return tuple(out)

    def inventory(self, node: str) -> dict[str, list[dict[str, object]]]:
        """What NVML would report on the node: GPUs by index, MIG devices with their parent."""
        spec = self.scenario.node(node)
        gpus: list[dict[str, object]] = []
        migs: list[dict[str, object]] = []
        for gpu in range(spec.gpus):
            uuid = gpu_uuid(node, gpu)
            gpus.append(
                {"index": gpu, "uuid": uuid, "model": spec.model, "pci_bus_id": pci_bus_id(gpu)}
            )
            if spec.mig and gpu in spec.mig.gpus:
                for gi in spec.mig.instances:
                    migs.append(
                        {
                            "mig_uuid": mig_uuid(node, gpu, gi),
                            "parent_uuid": uuid,
                            "gi": gi,
                            "ci": 0,
                            "profile": spec.mig.profile,
                        }
                    )
        return {"gpus": gpus, "migs": migs}

    def exporter_rows(self, node: str, scrape: int) -> list[ExporterRow]:
        """The rows dcgm-exporter would print on scrape number ``scrape``."""
        spec = self.scenario.node(node)
        active = self.holders(node)
        t = self.clock()
        rows: list[ExporterRow] = []
        for gpu in range(spec.gpus):
            uuid = gpu_uuid(node, gpu)
            gis: list[int | None] = (
                list(spec.mig.instances) if spec.mig and gpu in spec.mig.gpus else [None]
            )
            on = {
                gi: [
                    p
                    for p in active
                    if any((s.gpu, s.gi) == (gpu, gi) for s in map(parse_slot, p.slots))
                ]
                for gi in gis
            }
            # the GPU's own fields follow its whole load: on a MIG GPU, each instance's share
            load = sum(min(100.0, sum(p.util_at(t) for p in pods)) for pods in on.values())
            gpu_traces = [tr for tr in spec.traces if parse_slot(tr.slot).gpu == gpu]
            own = traces.device(
                load / len(gis), gpu_traces, spec.exporter_restarts, spec.counters, t
            )
            for gi, pods in on.items():
                rows.extend(self._rows(spec, gpu, uuid, gi, pods, scrape, own))
        return rows

    def _rows(
        self,
        spec: NodeSpec,
        gpu: int,
        uuid: str,
        gi: int | None,
        pods: list[PodSpec],
        scrape: int,
        own: dict[str, float],
    ) -> list[ExporterRow]:
        t = self.clock()
        util = min(100.0, sum(p.util_at(t) for p in pods))
        total = spec.memory_mib if gi is None else spec.memory_mib // 8
        used = min(float(total), sum(p.memory_at(t) for p in pods))
        profile = next(
            (
                tr
                for tr in spec.traces
                if tr.kind in ("busy-ineffective", "memory-bound")
                and tr.active(t)
                and (parse_slot(tr.slot).gpu, parse_slot(tr.slot).gi) == (gpu, gi)
            ),
            None,
        )
        values: list[tuple[str, float]] = [
            *own.items(),
            *traces.activity(util, profile, t, mig=gi is not None).items(),
            ("DCGM_FI_DEV_FB_FREE", float(total) - used),
            ("DCGM_FI_DEV_FB_USED", used),
        ]
        base = dict(
            gpu=gpu,
            uuid=uuid,
            model=spec.model,
            hostname=spec.name,
            pci_bus_id=pci_bus_id(gpu),
            mig_profile=spec.mig.profile if gi is not None and spec.mig else None,
            mig_instance_id=gi,
            values=tuple(values),
        )
        if spec.exporter_mode == "virtual-gpus":
            listed = listed_pods(spec, gpu, gi, pods, t)
            return [ExporterRow(**base, listed=listed, pod_uid_label=spec.exporter_pod_uid)]  # type: ignore[arg-type]
        labelled = self._claims(spec, pods, gpu, gi, scrape)
        if not labelled:
            return [ExporterRow(**base)]  # type: ignore[arg-type]
        return [
            ExporterRow(**base, pod=(p.namespace, p.name, p.container), extra_labels=extra)  # type: ignore[arg-type]
            for p, extra in labelled
        ]

    def _claims(
        self, spec: NodeSpec, pods: list[PodSpec], gpu: int, gi: int | None, scrape: int
    ) -> list[tuple[PodSpec, tuple[tuple[str, str], ...]]]:
        """Which pods dcgm-exporter stamps on the device's row(s), as the real one does."""
        if not pods:
            return []
        if spec.dra:
            # --kubernetes-enable-dra: one full-value copy per consuming pod, with the claim;
            # no pod on MIG rows (4.5.x); its own adminAccess claim is not a consumer
            holders = [p for p in pods if not self.scenario.claim(p.namespace, p.claim).admin]
            if gi is not None:
                return []
            return [(p, dra.exporter_labels(p, spec, gpu)) for p in holders]
        shared = spec.replicas_of(gpu) > 1
        if shared and spec.rename_shared:
            return []  # renamed resource: the exporter does not look it up (dcgm-exporter #151)
        if not shared or len(pods) == 1:
            return [(pods[0], ())]
        if spec.exporter_mode == "none":
            return []
        if spec.exporter_mode == "copies":
            return [(p, (("vgpu", str(i)),)) for i, p in enumerate(pods)]
        # default mode: one arbitrary holder per scrape, flipping between scrapes
        digest = hashlib.blake2b(f"{spec.name}/{gi}/{scrape}".encode(), digest_size=2).digest()
        return [(pods[int.from_bytes(digest) % len(pods)], ())]
