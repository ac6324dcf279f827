"""Pod identity: which pod (UID, workload) a PodResources holder name meant at a time. Pure.

The kubelet's PodResources API names pods but carries no UID. The pod watch gives each
incarnation of a name a life: from creation until the API server reports it DELETED (after its
containers stopped, so through the termination grace period the old pod keeps its slot). Names
recycle (StatefulSets, re-created pods): each UID is its own :class:`PodLife`, never merged.

State is bounded by what is live, not by history: a life that is gone is forgotten once it has
been gone longer than :data:`streams.core.lifetimes.LIFE_KEPT_MS` (event time), a name whose
lives are all forgotten leaves the node's index and its table key is deleted. :func:`settle`
decides it, per node, when that node's pod records or pod list arrive, for the names that
changed or fell due.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from contract.inputs import OwnerRef, PodListSnapshot, PodRecord, ResourceHealth
from contract.outputs import Holder, Workload
from contract.records import Record, replace
from streams.core.devices.attribution import PodIdentity
from streams.core.keys import name_key
from streams.core.lifetimes import LIVES_MAX, life_forgotten
from streams.core.memo import live_memo


class PodLife(Record, frozen=True):
    """One incarnation of a pod name on a node."""

    uid: str
    start_ms: int
    gone_ms: int | None = None
    deletion_ts_ms: int | None = None
    workload: OwnerRef | None = None
    annotations: tuple[tuple[str, str], ...] = ()
    #: the kubelet's latest word on this life's allocated devices (its pod status)
    health: tuple[ResourceHealth, ...] = ()


class PodNames(Record, frozen=True):
    """Every remembered life of one ``namespace/name`` on one node, oldest first."""

    lives: tuple[PodLife, ...]


class NodePods(Record, frozen=True):
    """Index of one node's pod names (``namespace/name``, sorted) that have a remembered life.

    ``gone`` holds, for each name with a gone life, the earliest ``gone_ms`` among its remembered
    lives (sorted by name): the event time after which that name's key is due for pruning, so a
    record finds what to prune without reading every name. Present (even empty) once the node's
    pod watch has reported: a name missing then is a pod not reported yet, not an unwatched node.
    """

    names: tuple[str, ...] = ()
    gone: tuple[tuple[str, int], ...] = ()

    def due(self, now_ms: int) -> tuple[str, ...]:
        """Names with a life forgotten at ``now_ms`` (:func:`life_forgotten`)."""
        return tuple(name for name, gone_ms in self.gone if life_forgotten(gone_ms, now_ms))


def holder_annotations(
    get: Callable[[str], PodNames | None], node: str, holders: Iterable[Holder]
) -> list[dict[str, str]]:
    """The annotations of each holder's pod life (matched by UID; holders whose life carries
    none are left out), holder by holder: what an alert's per-pod overrides are read from."""
    out = []
    for h in holders:
        names = get(name_key(node, h.namespace, h.pod))
        for life in names.lives if names else ():
            if life.uid == h.uid and life.annotations:
                out.append(dict(life.annotations))
    return out


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
                health=rec.resource_health,
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
                rec.resource_health,
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


def forget_gone(names: PodNames, now_ms: int) -> PodNames | None:
    """The lives still remembered at ``now_ms``; ``None`` when none is (the key can go)."""
    kept = tuple(life for life in names.lives if not life_forgotten(life.gone_ms, now_ms))
    if len(kept) == len(names.lives):
        return names
    return PodNames(kept) if kept else None


def settle(
    index: NodePods, changed: Mapping[str, PodNames | None], now_ms: int
) -> tuple[dict[str, PodNames | None], NodePods]:
    """Prune the names that changed or fell due, at event time ``now_ms``.

    ``changed`` maps ``namespace/name`` to its lives after the record (``None``: no key). Returns
    their remembered lives (``None``: forget the key) and the node's index after; names not in
    ``changed`` are neither read nor rewritten.
    """
    kept = {
        short: forget_gone(n, now_ms) if n is not None else None for short, n in changed.items()
    }
    names = set(index.names)
    gone = dict(index.gone)
    for short, n in kept.items():
        gone.pop(short, None)
        if n is None:
            names.discard(short)
            continue
        names.add(short)
        first_gone = min(
            (life.gone_ms for life in n.lives if life.gone_ms is not None), default=None
        )
        if first_gone is not None:
            gone[short] = first_gone
    return kept, NodePods(tuple(sorted(names)), tuple(sorted(gone.items())))


def _identity(life: PodLife) -> PodIdentity:
    wl = life.workload
    if wl:
        return _resolved(life.uid, wl.kind, wl.name, life.health)
    return _resolved(life.uid, None, None, life.health)


#: pure in its (hashable) arguments, never stale. A holder is resolved on every sample of its
#: device; the identity is made once per pod and kept while the pod is asked for (streams.core.memo:
#: by what is live, not by every pod the node has run)
@live_memo(65_536)
def _resolved(
    uid: str, kind: str | None, name: str | None, health: tuple[ResourceHealth, ...]
) -> PodIdentity:
    workload = Workload(kind, name) if kind is not None and name is not None else None
    return PodIdentity(uid, "resolved", workload, health)


def resolve(names: PodNames | None, ts_ms: int, watched: bool) -> PodIdentity:
    """The pod a holder name at ``ts_ms`` refers to; never a guess.

    The kubelet says this name holds a slot at ``ts_ms``, and at most one life of a name exists
    at a time: a name is free again only once the API server has deleted its pod, so a later
    life was created after every earlier one was gone. The oldest life not gone at ``ts_ms`` is
    therefore the one that held the name then — even when a later life's creation time seems to
    be earlier: ``creationTimestamp`` has whole seconds, so a StatefulSet pod re-created within
    the second its predecessor was deleted carries a creation time before that deletion.
    """
    if names is None or not names.lives:
        return PodIdentity(None, "pending" if watched else "no-pod-watch")
    for life in names.lives:
        if life.gone_ms is None or life.gone_ms > ts_ms:
            return _identity(life)  # the oldest life not gone at ts_ms
    # gone from the API server, but the kubelet still listed it: the last life held the slot
    return _identity(names.lives[-1])
