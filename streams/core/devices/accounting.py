"""Accounting: how much of one device each pod holds. Pure, and the only place it is decided.

Every figure downstream — a holder's ``allocation_share``, each pod's ``PodShare`` on the
attribution event, the Prometheus GPUs-held and GPU-hours rules, ``gpuattr report`` and the
dashboard — comes from :func:`account`. When two places compute the same figure they drift.

The rule, per device:

1. The device is held through *allocation units*: a device-plugin device ID (a whole device,
   or one ``::n`` replica), or one DRA claim's allocation of it (one per ``shareID`` under
   consumable capacity). Two containers of a pod that reference the same claim hold the *same*
   unit (the kubelet lists a claim for each container that uses it); two replicas are two units.
2. A unit's share of the device: whole → 1; a replica → 1 / the device's replicas; a consumable
   capacity allocation → consumed / capacity. A unit several pods hold (a DRA claim reserved by
   several pods) is split equally between them: no finer split exists.
3. A pod's share is the sum over the units it holds, at most 1.
4. Where a unit's share is unknown (replicas not advertised, capacity unreadable), or the units
   of several pods add up to more than the device (two claims each allocating it whole: the
   inputs disagree), no figure is invented: the device is split equally between the pods
   holding it, and the record says so (``basis: equal-split``). One pod whose units add up to
   more than the device (two compute instances of one MIG instance, each listed whole) holds it
   whole: rule 3.

These are *allocation* shares — what a pod was given — never a usage split: on a shared device
the hardware measures the device, not the pod.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from contract.outputs import AttributionEvent, Holder, PodShare, ShareBasis, UidStatus, Workload
from contract.records import Record

#: a unit's share basis before any pod split (``equal-split`` only arises from splitting)
UnitBasis = ShareBasis


class Unit(Record, frozen=True):
    """One allocation of the device: what identifies it, and its share of the device."""

    key: tuple[str, str, str]  # ("id", device_id, "") or ("claim", claim, share_id or device)
    share: float | None  # None: unknown (replicas not known, capacity unreadable)
    basis: UnitBasis


class Held(Record, frozen=True):
    """One container's hold of one unit, with its pod's identity."""

    namespace: str
    pod: str
    container: str
    unit: Unit
    uid: str | None = None
    uid_status: UidStatus = "no-pod-watch"
    workload: Workload | None = None
    claim: str = ""


def device_id_unit(device_id: str, replica: bool, replicas: int | None) -> Unit:
    """A device-plugin ID: a whole device is the whole device; a replica is 1/replicas of it."""
    if not replica:
        return Unit(("id", device_id, ""), 1.0, "whole")
    return Unit(("id", device_id, ""), (1.0 / replicas) if replicas else None, "replicas")


def claim_unit(claim: str, allocation: str, capacity_share: float | None) -> Unit:
    """A DRA claim's allocation of the device (``allocation``: its share ID, else the device):
    consumed capacity where the claim holds a share of the device, else the whole device."""
    if capacity_share is not None:
        return Unit(("claim", claim, allocation), capacity_share, "capacity")
    return Unit(("claim", claim, allocation), 1.0, "whole")


class Accounting(Record, frozen=True):
    """Each container's share (``None``: unknown, or split between pods) and each pod's."""

    containers: Mapping[tuple[str, str, str, str], float | None]  # (ns, pod, container, claim)
    pods: tuple[PodShare, ...]


def _round(x: float) -> float:
    return round(min(1.0, x), 4)


def account(held: Sequence[Held]) -> Accounting:
    """Apply the rule (module docstring) to every hold of one device."""
    pods_of_unit: dict[tuple[str, str, str], set[tuple[str, str]]] = defaultdict(set)
    units: dict[tuple[str, str, str], Unit] = {}
    for h in held:
        pods_of_unit[h.unit.key].add((h.namespace, h.pod))
        units[h.unit.key] = h.unit
    pods = sorted({(h.namespace, h.pod) for h in held})
    known = all(u.share is not None for u in units.values()) and (
        len(pods) == 1 or sum(u.share or 0.0 for u in units.values()) <= 1.0 + 1e-9
    )

    containers: dict[tuple[str, str, str, str], float | None] = {}
    per_container: dict[tuple[str, str, str, str], dict[tuple[str, str, str], Unit]] = defaultdict(
        dict
    )
    for h in held:
        per_container[(h.namespace, h.pod, h.container, h.claim)][h.unit.key] = h.unit
    for container, held_units in per_container.items():
        # a container's allocation: its units, unless a unit is split between pods or unknown
        if known and all(len(pods_of_unit[k]) == 1 for k in held_units):
            containers[container] = _round(sum(u.share or 0.0 for u in held_units.values()))
        else:
            containers[container] = None

    first: dict[tuple[str, str], Held] = {}
    unit_keys: dict[tuple[str, str], set[tuple[str, str, str]]] = defaultdict(set)
    names: dict[tuple[str, str], set[str]] = defaultdict(set)
    claims: dict[tuple[str, str], set[str]] = defaultdict(set)
    for h in held:
        who = (h.namespace, h.pod)
        first.setdefault(who, h)
        if first[who].uid is None and h.uid is not None:
            first[who] = h
        unit_keys[who].add(h.unit.key)
        names[who].add(h.container)
        if h.claim:
            claims[who].add(h.claim)

    out: list[PodShare] = []
    for who in pods:
        keys = unit_keys[who]
        basis: ShareBasis
        if not known:
            share, basis = 1.0 / len(pods), "equal-split"
        else:
            share = sum((units[k].share or 0.0) / len(pods_of_unit[k]) for k in keys)
            split = any(len(pods_of_unit[k]) > 1 for k in keys)
            bases = {units[k].basis for k in keys}
            if split:
                basis = "equal-split"
            elif bases == {"whole"}:
                basis = "whole"
            else:
                basis = "capacity" if "capacity" in bases else "replicas"
        h = first[who]
        out.append(
            PodShare(
                namespace=who[0],
                pod=who[1],
                uid=h.uid,
                uid_status=h.uid_status,
                workload=h.workload,
                share=_round(share),
                basis=basis,
                containers=tuple(sorted(names[who])),
                claims=tuple(sorted(claims[who])),
            )
        )
    return Accounting(containers, tuple(out))


def _listed(h: Holder) -> Held:
    """A holder as its event lists it, as a hold of one unit: its claim's allocation (DRA) or its
    device IDs, at the share the event gave its container (``None``: unknown or split)."""
    ids = ",".join(h.device_ids)
    key = ("claim", h.claim, ids) if h.claim else ("id", ids, "")
    share = h.allocation_share
    basis: UnitBasis = "whole" if share == 1.0 else ("capacity" if h.claim else "replicas")
    unit = Unit(key, share, basis)
    return Held(
        h.namespace, h.pod, h.container, unit, h.uid, h.uid_status, h.workload, h.claim or ""
    )


def pod_shares(event: AttributionEvent) -> tuple[PodShare, ...]:
    """Each pod's share of the event's device: the event's own (``pods``, from :func:`account`),
    or, for an event written before it carried them, the rule applied to the holders it lists —
    never a share per container."""
    if event.pods or not event.holders:
        return event.pods
    return account([_listed(h) for h in event.holders]).pods
