"""A device's health as every source says it: the kubelet in each holder's pod status, the
taints on its DRA device, and DCGM's readings. Pure, and the only place the verdict is decided.

The kubelet joins a device's health to its holder itself (KEP-4680): a pod's status lists, per
container and allocated device ID, what the device plugin's ``ListAndWatch`` (or the DRA plugin's
``NodeHealth.WatchResources``) last said — also while dcgm-exporter is down. A DRA driver or an
admin taints a device instead (KEP-5055; NVIDIA's driver taints GPUs on health events), and a
``NoExecute`` taint evicts its holders. DCGM's readings say what the hardware measured (a memory
fault is unhealthy; no sample, nothing to say).

No source overrules another: the event lists each one's word (``Health.sources``) and the
verdict is ``unhealthy`` when any says so, else ``healthy`` when any says that (a kubelet's
Healthy while the exporter is down is a verdict), else ``unknown``. Sources are listed only
where the kubelet or a taint speaks for the device: DCGM's own marks stay where they are on
devices nothing else speaks for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from contract.inputs import DeviceAssignment, DraDevice, ResourceClaimRecord, ResourceHealth
from contract.outputs import Health, HealthSaid, HealthState
from contract.records import replace
from streams.core.devices.allocation import dra_name, via_dra

#: the kubelet's word → ours
_KUBELET: Mapping[str, HealthState] = {
    "Healthy": "healthy",
    "Unhealthy": "unhealthy",
    "Unknown": "unknown",
}
#: the CDI id NVIDIA's DRA driver gives a claim's device: ``k8s.gpu.nvidia.com/claim=<uid>-<dev>``
NVIDIA_CDI_CLAIM = "k8s.gpu.nvidia.com/claim="

ClaimLookup = Callable[[str], ResourceClaimRecord | None]


def kubelet_words(
    rows: Sequence[DeviceAssignment],
    health: Sequence[tuple[ResourceHealth, ...]],
    claim: ClaimLookup,
) -> tuple[HealthSaid, ...]:
    """What the kubelet says of the device in each holder's status (``health``: the holder's
    pod's entries, row by row), one word per holder pod and device ID."""
    words: dict[tuple[str, str], HealthSaid] = {}
    for row, entries in zip(rows, health, strict=True):
        for entry in entries:
            if entry.container == row.container and _names(entry, row, claim):
                holder = f"{row.namespace}/{row.pod}"
                words[holder, entry.resource_id] = HealthSaid(
                    "kubelet",
                    _KUBELET.get(entry.health, "unknown"),
                    entry.message or f"{entry.resource} {entry.resource_id}: {entry.health}",
                    holder,
                )
    return tuple(words[k] for k in sorted(words))


def _names(entry: ResourceHealth, row: DeviceAssignment, claim: ClaimLookup) -> bool:
    """Whether the kubelet's entry is about the device this row holds."""
    if not via_dra(row.resource):
        return entry.resource_id == row.device_id
    driver = dra_name(row.resource)
    if entry.resource_id == f"{driver}/{row.device_id}":
        return True
    device = row.device_id.rpartition("/")[2]
    held = claim(row.claim) if row.claim else None
    return held is not None and entry.resource_id == f"{NVIDIA_CDI_CLAIM}{held.uid}-{device}"


def taint_words(devices: Iterable[DraDevice], uuid: str | None) -> tuple[HealthSaid, ...]:
    """The taints on the DRA device of this UUID (a whole GPU's, or a MIG instance's)."""
    if uuid is None:
        return ()
    return tuple(
        HealthSaid(
            "dra-taint",
            "healthy" if t.effect == "None" else "unhealthy",
            f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}",
            effect=t.effect,
        )
        for d in devices
        if d.uuid == uuid
        for t in d.taints
    )


def dcgm_word(health: Health, sampled: bool) -> HealthSaid:
    """DCGM's word: a memory fault is unhealthy; a sample without one, healthy; no sample,
    unknown (the exporter is down or has no row: it says nothing)."""
    if not sampled:
        return HealthSaid("dcgm", "unknown", "no reading")
    if "memory-fault" in health.marks:
        return HealthSaid("dcgm", "unhealthy", "memory fault (remapped rows, row-remap or ECC)")
    return HealthSaid("dcgm", "healthy", "no memory fault in the reading")


def judged(
    health: Health, kubelet: tuple[HealthSaid, ...], taints: tuple[HealthSaid, ...], sampled: bool
) -> Health:
    """The event's health with every source's word and the verdict, where the kubelet or a taint
    speaks for the device; as it was elsewhere."""
    if not kubelet and not taints:
        return health
    sources = (*kubelet, *taints, dcgm_word(health, sampled))
    states = {w.state for w in sources}
    verdict: HealthState = (
        "unhealthy" if "unhealthy" in states else "healthy" if "healthy" in states else "unknown"
    )
    return replace(health, sources=sources, verdict=verdict)
