"""Pod identity: which pod (UID, workload) a PodResources holder name meant at a time. Pure.

The kubelet's PodResources API names pods but carries no UID. The pod watch gives each
incarnation of a name a life: from creation until the API server reports it DELETED (after its
containers stopped, so through the termination grace period the old pod keeps its slot). Names
recycle (StatefulSets, re-created pods): each UID is its own :class:`PodLife`, never merged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from contract.inputs import OwnerRef, PodListSnapshot, PodRecord
from contract.outputs import Workload
from streams.core.attribution import PodIdentity

LIVES_MAX = 8


@dataclass(frozen=True, slots=True)
class PodLife:
    """One incarnation of a pod name on a node."""

    uid: str
    start_ms: int
    gone_ms: int | None = None
    deletion_ts_ms: int | None = None
    workload: OwnerRef | None = None
    annotations: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PodNames:
    """Every remembered life of one ``namespace/name`` on one node, oldest first."""

    lives: tuple[PodLife, ...]


@dataclass(frozen=True, slots=True)
class NodePods:
    """Index of the pod names a node's watch has reported (``namespace/name``)."""

    names: tuple[str, ...] = ()


def name_key(node: str, namespace: str, name: str) -> str:
    return f"{node}/{namespace}/{name}"


def apply_pod(current: PodNames | None, rec: PodRecord) -> PodNames:
    """Fold one watch event into the name's lives (new UID → new life; DELETED → gone)."""
    lives = list(current.lives) if current else []
    workload = rec.workload or rec.owner
    for i, life in enumerate(lives):
        if life.uid == rec.uid:
            lives[i] = replace(
                life,
                gone_ms=rec.ts_ms if rec.deleted and life.gone_ms is None else life.gone_ms,
                deletion_ts_ms=rec.deletion_ts_ms or life.deletion_ts_ms,
                workload=workload or life.workload,
                annotations=rec.annotations or life.annotations,
            )
            break
    else:
        start = min(rec.created_ms, rec.ts_ms) if rec.created_ms is not None else rec.ts_ms
        # an earlier life of the same name that we never saw deleted is gone now
        lives = [
            life if life.gone_ms is not None else replace(life, gone_ms=start) for life in lives
        ]
        lives.append(
            PodLife(
                rec.uid,
                start,
                rec.ts_ms if rec.deleted else None,
                rec.deletion_ts_ms,
                workload,
                rec.annotations,
            )
        )
    return PodNames(tuple(lives[-LIVES_MAX:]))


def apply_pod_list(current: PodNames, listing: PodListSnapshot) -> PodNames | None:
    """After a relist: lives missing from the listing are gone. ``None`` if nothing changed."""
    present = set(listing.uids)
    if all(life.gone_ms is not None or life.uid in present for life in current.lives):
        return None
    return PodNames(
        tuple(
            life
            if life.gone_ms is not None or life.uid in present
            else replace(life, gone_ms=listing.ts_ms)
            for life in current.lives
        )
    )


def _identity(life: PodLife) -> PodIdentity:
    wl = life.workload
    return PodIdentity(life.uid, "resolved", Workload(wl.kind, wl.name) if wl else None)


def resolve(names: PodNames | None, ts_ms: int, watched: bool) -> PodIdentity:
    """The pod a holder name at ``ts_ms`` refers to; never a guess.

    The kubelet says this name holds a slot at ``ts_ms``, and at most one life of a name exists
    at a time: the life that was alive then. Creation times come from the API server's clock and
    can be a little ahead of the agent's, so a life alive at ``ts_ms`` but created just after it
    still counts — only one life of a name can be alive at once.
    """
    if names is None or not names.lives:
        return PodIdentity(None, "pending" if watched else "no-pod-watch")
    alive = [life for life in names.lives if life.gone_ms is None or life.gone_ms > ts_ms]
    started = [life for life in alive if life.start_ms <= ts_ms]
    if started:
        return _identity(started[-1])
    if alive:
        return _identity(alive[0])
    # gone from the API server, but the kubelet still listed it: the last life held the slot
    return _identity(names.lives[-1])
