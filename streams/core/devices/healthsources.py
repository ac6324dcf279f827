"""A device's health as every source says it: the kubelet in each holder's pod status and in
its allocatable list, the taints on its DRA device, and DCGM's readings. Pure, and the only place
the verdict is decided.

The kubelet joins a device's health to its holder itself (KEP-4680): a pod's status lists, per
container and allocated device ID, what the device plugin's ``ListAndWatch`` (or the DRA plugin's
``NodeHealth.WatchResources``) last said — also while dcgm-exporter is down. The kubelet also
drops an unhealthy device-plugin ID from ``GetAllocatableResources`` while the pod keeps it: a
held ID missing from its resource's allocatable list is unhealthy (DRA devices are never listed
there, and a node without a list, or a resource without one, says nothing). A DRA driver or an
admin taints a device instead (KEP-5055; NVIDIA's driver taints GPUs on health events), and a
``NoExecute`` taint evicts its holders; a ``DeviceTaintRule`` taints every device it selects, as
if the taint were in the device's slice (its word names the rule). DCGM's readings say what the
hardware measured (a memory fault is unhealthy; no sample, nothing to say).

No source overrules another: the event lists each one's word (``Health.sources``) and the
verdict is ``unhealthy`` when any says so, else ``healthy`` when any says that (a kubelet's
Healthy while the exporter is down is a verdict), else ``unknown``. Sources are listed only
where the kubelet or a taint speaks for the device: DCGM's own marks stay where they are on
devices nothing else speaks for. The allocatable list speaks when it has withdrawn a held ID; a
held ID still listed is every healthy device's everyday case, said only beside another word (so
a disagreement shows), never on its own in every event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from contract.inputs import (
    AllocatableDevice,
    DeviceAssignment,
    DeviceTaint,
    DeviceTaintRuleRecord,
    DraDevice,
    ResourceClaimRecord,
    ResourceHealth,
)
from contract.outputs import Health, HealthSaid, HealthState
from contract.records import replace
from streams.core.devices.allocation import dra_name, via_dra
from streams.core.devices.dra import DeviceRef
from streams.core.devices.identity import parse_device_id
from streams.core.devices.taintrules import selects

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


def allocatable_words(
    rows: Sequence[DeviceAssignment], allocatable: Sequence[AllocatableDevice]
) -> tuple[HealthSaid, ...]:
    """What the node's allocatable list (``GetAllocatableResources``) says of each device-plugin
    ID held on the device: listed, healthy; missing from its resource's non-empty list,
    unhealthy. Nothing for DRA rows, a node without a list, or a resource the list does not
    name. An ID whose GPU or MIG device is listed under another ID says nothing: the plugin
    changed how it shares the device (the pod keeps the old ID), and the kubelet drops every ID
    of an unhealthy device."""
    if not allocatable:
        return ()
    plugin = [row for row in rows if not via_dra(row.resource)]
    if not plugin:
        return ()
    listed: dict[str, set[str]] = {}
    for dev in allocatable:
        listed.setdefault(dev.resource, set()).add(dev.device_id)
    bases = {parse_device_id(dev.device_id).base for dev in allocatable}
    words: dict[tuple[str, str], HealthSaid] = {}
    for row in plugin:
        ids = listed.get(row.resource)
        if not ids:
            continue
        if row.device_id in ids:
            state: HealthState = "healthy"
            detail = f"the kubelet lists {row.device_id} of {row.resource} as allocatable"
        elif parse_device_id(row.device_id).base in bases:
            continue
        else:
            state = "unhealthy"
            detail = (
                f"the kubelet no longer lists {row.device_id} of {row.resource} as allocatable: "
                "its device plugin reports it unhealthy"
            )
        words[row.resource, row.device_id] = HealthSaid("allocatable", state, detail)
    return tuple(words[k] for k in sorted(words))


def taint_words(devices: Iterable[DraDevice], uuid: str | None) -> tuple[HealthSaid, ...]:
    """The taints on the DRA device of this UUID (a whole GPU's, or a MIG instance's)."""
    if uuid is None:
        return ()
    return tuple(_taint_word(t) for d in devices if d.uuid == uuid for t in d.taints)


def rule_words(
    rules: Sequence[DeviceTaintRuleRecord],
    devices: Mapping[DeviceRef, DraDevice],
    uuid: str | None,
) -> tuple[HealthSaid, ...]:
    """The taints of the DeviceTaintRules that select the DRA device of this UUID, each naming
    its rule (:func:`streams.core.devices.taintrules.selects`)."""
    if uuid is None or not rules:
        return ()
    return tuple(
        _taint_word(rule.taint, f"DeviceTaintRule {rule.name}: ")
        for ref, d in devices.items()
        if d.uuid == uuid
        for rule in rules
        if rule.taint is not None and selects(rule, ref)
    )


def _taint_word(t: DeviceTaint, by: str = "") -> HealthSaid:
    """A taint's word: ``None`` only says (healthy), any other effect is unhealthy."""
    return HealthSaid(
        "dra-taint",
        "healthy" if t.effect == "None" else "unhealthy",
        by + (f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"),
        effect=t.effect,
    )


def dcgm_word(health: Health, sampled: bool) -> HealthSaid:
    """DCGM's word: a memory fault is unhealthy; a sample without one, healthy; no sample,
    unknown (the exporter is down or has no row: it says nothing)."""
    if not sampled:
        return HealthSaid("dcgm", "unknown", "no reading")
    if "memory-fault" in health.marks:
        return HealthSaid("dcgm", "unhealthy", "memory fault (remapped rows, row-remap or ECC)")
    return HealthSaid("dcgm", "healthy", "no memory fault in the reading")


def judged(health: Health, words: tuple[HealthSaid, ...], sampled: bool) -> Health:
    """The event's health with every source's word and the verdict, where the kubelet
    (``words``: its words, its allocatable list's and the taints') speaks for the device; as it
    was elsewhere."""
    if all(w.source == "allocatable" and w.state == "healthy" for w in words):
        return health  # nothing but the everyday "still listed"
    sources = (*words, dcgm_word(health, sampled))
    states = {w.state for w in sources}
    verdict: HealthState = (
        "unhealthy" if "unhealthy" in states else "healthy" if "healthy" in states else "unknown"
    )
    return replace(health, sources=sources, verdict=verdict)
