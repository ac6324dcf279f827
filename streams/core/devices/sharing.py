"""Sharing mode of one device, decided per device from what the kubelet handed out. Pure.

Evidence, strongest first:

1. the device IDs the kubelet *allocated* on this device (``<id>::<n>`` = a replica);
2. the device IDs it *advertises* for this device (``GetAllocatableResources``): replica IDs
   give the device's own replica count, a plain ID says the device is handed out whole;
3. the node's GPU feature discovery labels (``sharing-strategy``, ``replicas``, ``-SHARED``).

Labels are node-wide, but the device plugin's sharing config can replicate only some GPUs of a
node (``sharing.*.resources[].devices``), so labels only name the *strategy* of a device the
device IDs show to be replicated, and corroborate. Where they disagree with the device IDs, the
device IDs win and ``notes`` says so. A device the kubelet hands out whole, held by one pod, is
exclusive whatever the labels say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from contract.inputs import AllocatableDevice, DeviceAssignment
from contract.outputs import Sharing
from contract.records import Record
from streams.core.devices.identity import Inventory, parse_device_id, resolve, small_index

LABEL_STRATEGY = "nvidia.com/gpu.sharing-strategy"
LABEL_REPLICAS = "nvidia.com/gpu.replicas"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"

SHARING_STRATEGIES: Mapping[str, Sharing] = {"mps": "mps", "time-slicing": "time-slicing"}


class NodeSharing(Record, frozen=True):
    """What a node's GPU feature discovery labels say about sharing (node-wide hints)."""

    strategy: str | None
    replicas: int | None
    product: str | None
    mig_strategy: str | None

    @property
    def shared_suffix(self) -> bool:
        return bool(self.product and self.product.endswith("-SHARED"))

    @property
    def shared_strategy(self) -> Sharing | None:
        """``mps`` or ``time-slicing`` when the labels name one."""
        return SHARING_STRATEGIES.get(self.strategy or "")

    def describe(self) -> str:
        text = f"sharing-strategy={self.strategy}"
        return text + (f", replicas={self.replicas}" if self.replicas else "")


def sharing_from_labels(labels: Mapping[str, str]) -> NodeSharing:
    return NodeSharing(
        strategy=labels.get(LABEL_STRATEGY),
        replicas=small_index(labels.get(LABEL_REPLICAS, "")),
        product=labels.get(LABEL_PRODUCT),
        mig_strategy=labels.get(LABEL_MIG_STRATEGY),
    )


class Advertised(Record, frozen=True):
    """How the kubelet advertises one device (a GPU or MIG instance) as allocatable."""

    whole: bool = False  # a plain device ID (no ``::n``)
    replicas: int = 0  # distinct replica IDs (``::n``)


def advertised_by_key(
    allocatable: Iterable[AllocatableDevice], inventory: Inventory
) -> dict[str, Advertised]:
    """Group the node's allocatable device IDs by the device key they occupy."""
    whole: set[str] = set()
    replicas: dict[str, set[str]] = {}
    for dev in allocatable:
        parsed = parse_device_id(dev.device_id)
        key = resolve(parsed, inventory)
        if key is None:
            continue
        if parsed.replica is None:
            whole.add(key)
        else:
            replicas.setdefault(key, set()).add(parsed.raw)
    return {
        key: Advertised(key in whole, len(replicas.get(key, ())))
        for key in sorted(whole | set(replicas))
    }


class SharingDecision(Record, frozen=True):
    sharing: Sharing
    replicas: int | None
    notes: tuple[str, ...]


def decide(
    node: NodeSharing | None,
    holders: Sequence[DeviceAssignment],
    is_mig: bool,
    advertised: Advertised | None = None,
) -> SharingDecision:
    """Decide the sharing mode of one device: its device IDs first, node labels as hints."""
    ids = [parse_device_id(a.device_id) for a in holders]
    held_replicas = {d.raw for d in ids if d.replica is not None}
    held_whole = any(d.replica is None for d in ids)
    pods = {(a.namespace, a.pod) for a in holders}
    adv_replicas = advertised.replicas if advertised else 0
    replicated = bool(held_replicas) or adv_replicas > 0
    whole = held_whole or bool(advertised and advertised.whole)
    label = node.shared_strategy if node else None
    label_replicas = node.replicas if node and node.replicas and node.replicas > 1 else None
    notes: list[str] = []

    replicas: int | None = None
    if adv_replicas:
        replicas = adv_replicas
        if label_replicas and label_replicas != adv_replicas:
            notes.append(
                f"the kubelet advertises {adv_replicas} replicas of this device, node labels "
                f"say replicas={label_replicas}: the device's own count is used"
            )
    elif held_replicas and label_replicas:
        replicas = label_replicas
        notes.append(
            "replica count from node labels: the kubelet listed no allocatable devices for it"
        )

    sharing: Sharing
    if is_mig:
        sharing = "mig+time-slicing" if replicated else "mig"
    elif replicated:
        if label is not None:
            sharing = label
        else:
            sharing = "unknown"
            said = f" ({node.describe()})" if node and node.strategy else ""
            notes.append(
                "the kubelet hands out replica IDs of this device but node labels name no "
                f"sharing strategy{said}: the device is shared, the strategy is unknown"
            )
    elif whole:
        sharing = "none"
        if node is not None and (label is not None or node.shared_suffix):
            notes.append(
                f"node labels say {node.describe()} for the whole node, but the kubelet "
                "hands out this device whole (no replica IDs): not shared"
            )
    elif label is not None:
        # neither held nor advertised: no device-level evidence either way
        sharing = "unknown"
        notes.append(
            f"node labels say {node.describe() if node else ''}, but the kubelet's view of "
            "this device (allocatable or held IDs) is missing: whether it is replicated is unknown"
        )
    else:
        sharing = "none"

    if node is None and (held_replicas or len(pods) > 1):
        notes.append("no node labels yet: sharing inferred from PodResources alone")
    if node is not None and node.strategy == "none" and held_replicas:
        notes.append(
            "node labels say sharing-strategy=none but the kubelet handed out replica IDs "
            f"({len(held_replicas)} seen)"
        )
    if sharing == "none" and len(pods) > 1:
        sharing = "unknown"
        notes.append(f"{len(pods)} pods hold one unshared device: labels and kubelet disagree")
    if replicas and len(held_replicas) > replicas:
        notes.append(f"{len(held_replicas)} replicas held but {replicas} advertised")
    return SharingDecision(sharing, replicas, tuple(notes))
