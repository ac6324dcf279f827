"""Sharing mode of one device: node labels (GPU feature discovery) cross-checked with PodResources.

Pure. Labels say what the node was configured for; replica suffixes (``::n``) and several
holders say what the kubelet actually handed out. When they disagree the event says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agents.events import DeviceAssignment
from streams.events import Sharing
from streams.identity import parse_device_id, small_index

LABEL_STRATEGY = "nvidia.com/gpu.sharing-strategy"
LABEL_REPLICAS = "nvidia.com/gpu.replicas"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"


@dataclass(frozen=True, slots=True)
class NodeSharing:
    """What a node's GPU feature discovery labels say about sharing."""

    strategy: str | None
    replicas: int | None
    product: str | None
    mig_strategy: str | None

    @property
    def shared_suffix(self) -> bool:
        return bool(self.product and self.product.endswith("-SHARED"))


def sharing_from_labels(labels: Mapping[str, str]) -> NodeSharing:
    raw = labels.get(LABEL_REPLICAS, "")
    replicas = small_index(raw)
    return NodeSharing(
        strategy=labels.get(LABEL_STRATEGY),
        replicas=replicas,
        product=labels.get(LABEL_PRODUCT),
        mig_strategy=labels.get(LABEL_MIG_STRATEGY),
    )


@dataclass(frozen=True, slots=True)
class SharingDecision:
    sharing: Sharing
    replicas: int | None
    notes: tuple[str, ...]


def decide(
    node: NodeSharing | None, holders: Sequence[DeviceAssignment], is_mig: bool
) -> SharingDecision:
    """Decide the sharing mode of one device from its node's labels and its holders."""
    ids = [parse_device_id(a.device_id) for a in holders]
    replica_ids = {d.raw for d in ids if d.replica is not None}
    pods = {(a.namespace, a.pod) for a in holders}
    label_strategy = node.strategy if node else None
    label_replicas = node.replicas if node and node.replicas and node.replicas > 1 else None
    labelled_shared = label_strategy in ("mps", "time-slicing") or bool(node and node.shared_suffix)
    notes: list[str] = []
    replicas = label_replicas
    if is_mig:
        shared = bool(replica_ids) or (label_strategy == "time-slicing" and label_replicas)
        sharing: Sharing = "mig+time-slicing" if shared else "mig"
    elif label_strategy in ("mps", "time-slicing"):
        sharing = "mps" if label_strategy == "mps" else "time-slicing"
    elif labelled_shared or replica_ids:
        sharing = "unknown"
        notes.append(
            "replica device IDs or a -SHARED product label without a sharing-strategy label: "
            "the device is shared but the strategy is unknown"
        )
    else:
        sharing = "none"
    if node is None and (replica_ids or len(pods) > 1):
        notes.append("no node labels yet: sharing inferred from PodResources alone")
    if label_strategy == "none" and replica_ids:
        notes.append(
            "node labels say sharing-strategy=none but the kubelet handed out replica IDs "
            f"({len(replica_ids)} seen)"
        )
    if sharing == "none" and len(pods) > 1:
        sharing = "unknown"
        notes.append(f"{len(pods)} pods hold one unshared device: labels and kubelet disagree")
    if label_replicas and len(replica_ids) > label_replicas:
        notes.append(f"{len(replica_ids)} replicas held but node labels advertise {label_replicas}")
    return SharingDecision(sharing, replicas, tuple(notes))
