"""What a device's events share while their inputs stay the same: its frame.

Every event of a device joins the same holder rows, pod identities, context and holding (the
sharing decision, the holders and their allocation shares) until one of the records they were
read from changes. A :class:`Frame` keeps that join with the records it was read from, made by
whichever needs the join first — a sample, or the node's supply or allocation events describing
the device (:func:`streams.core.flow.nodeview._joined`) — and, on first use, the events' shape and
the exporter's word on the last sample's pod labels (made again when a sample's labels differ). A
later sample or description reuses it when every one of those records is still the one in the
tables (compared by identity first, then by value: an equal record gives the same join) and its
time is past every instant at which the answer could depend on time (a holder change, a pod's
end). Anything else — a changed record, an earlier time, a DRA claim (read live) — is joined
afresh, so a frame never says what the full join would not. Pure: no I/O, no clock.

The memo is bounded (:data:`MAX_FRAMES`, oldest dropped first) and recomputable: it is not
state, a restarted worker starts without it, and no output depends on whether it hit.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from types import MappingProxyType

from contract.inputs import DcgmSample, DeviceAssignment
from contract.records import Record, replace
from streams.core.devices.allocation import through_dra
from streams.core.devices.attribution import (
    DeviceContext,
    DeviceFacts,
    ExporterWord,
    Holding,
    Shape,
    exporter_labels,
    exporter_view,
    shape_of,
)
from streams.core.devices.holders import NodeDevices, SlotHolders
from streams.core.keys import holder_key, name_key
from streams.core.memo import keep_newest
from streams.core.node.pods import PodNames

#: a worker at saturation holds ~13k devices (docs/BENCHMARKS.md): room for them twice over
MAX_FRAMES = 32_768

Get = Callable[[str], object]


class Frame(Record, frozen=True):
    view: object  # the token of the node's records its context was read from (Frames.token)
    holder_keys: tuple[str, ...]  # slot_holders keys of the device's bases
    holder_recs: tuple[object, ...]  # what they held
    pod_keys: tuple[str, ...]  # pods keys of its holders' names
    pod_recs: tuple[object, ...]  # what they held
    from_ms: int  # samples at or after this time read the same rows and identities
    rows: tuple[DeviceAssignment, ...]
    ctx: DeviceContext
    held: Holding
    annotations: tuple[dict[str, str], ...]  # its holders' pod annotations (alert overrides)
    #: what its events say of the holding whatever the sample, made on first use
    shape: Shape | None = None
    #: the exporter's word on its last sample (the sample's claims and split fields it was
    #: read from), against :attr:`shape`: kept while samples carry the same labels
    exporter: tuple[tuple[object, ...], ExporterWord] | None = None


def settled_from(holders: tuple[object, ...], pods: tuple[object, ...]) -> int | None:
    """From when the holder rows and pod identities read from these records no longer depend on
    the sample's time (the latest holder change, the latest end of a pod life); ``None`` when
    the records cannot say (no holder record is a :class:`SlotHolders` nor a pod one a
    :class:`PodNames`: not this module's business)."""
    since = -1
    for rec in holders:
        if rec is None:
            continue
        if not isinstance(rec, SlotHolders):
            return None
        since = max(since, rec.since_ms)
    for rec in pods:
        if rec is None:
            continue
        if not isinstance(rec, PodNames):
            return None
        for life in rec.lives:
            if life.gone_ms is not None:
                since = max(since, life.gone_ms)
    return since


def frame_of(
    node: str,
    token: object,
    bases: tuple[str, ...],
    rows: tuple[DeviceAssignment, ...] | None,
    join: tuple[DeviceContext, Holding, tuple[dict[str, str], ...]],
    ts_ms: int,
    holders_get: Get,
    pods_get: Get,
) -> Frame | None:
    """The frame of a device joined at ``ts_ms`` (its holder ``rows`` read from the slot
    holders of ``bases``; ``join``: the context, accounted holding and holder annotations made
    from them), or ``None`` when the join may not be kept: holders unknown, one through a DRA
    claim (claims are read live), or a time the answer still depends on."""
    if rows is None or through_dra(rows):
        return None
    holder_keys = tuple(holder_key(node, base) for base in bases)
    holder_recs = tuple(map(holders_get, holder_keys))
    pod_keys = tuple(dict.fromkeys(name_key(node, a.namespace, a.pod) for a in rows))
    pod_recs = tuple(map(pods_get, pod_keys))
    since = settled_from(holder_recs, pod_recs)
    if since is None or ts_ms < since:
        return None
    ctx, held, annotations = join
    return Frame(
        token, holder_keys, holder_recs, pod_keys, pod_recs, since, rows, ctx, held, annotations
    )


def projection(sig: tuple[object, ...]) -> tuple[object, ...]:
    """What a frame reads of a node view's records (:attr:`streams.core.flow.nodeview.NodeView.sig`:
    node record, device index, slices, inventory, pod watch, the partition's taint rules): the
    index without its update time, which every PodResources record renews while a device's own
    entries stay the same (its allocatable list is compared by value: a device that leaves it is
    unhealthy)."""
    node_rec, index, *rest = sig
    if isinstance(index, NodeDevices):
        i = index
        index = (i.keys, i.unresolved, i.advertised, i.unplaced_mig, i.remembered, i.allocatable)
    return (node_rec, index, *rest)


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


class Frames:
    """The memo: one frame per (node, device key), the oldest dropped past :data:`MAX_FRAMES`;
    and per node a token for what its view's records say (:func:`projection`), renewed only
    when that changes."""

    def __init__(self, max_frames: int = MAX_FRAMES) -> None:
        self._frames: dict[tuple[str, str], Frame] = {}
        self._views: dict[str, tuple[tuple[object, ...], tuple[object, ...], object]] = {}
        self._rosters: dict[str, tuple[object, tuple[str, ...], Mapping[str, DeviceFacts]]] = {}
        self._max = max_frames
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._frames)

    def token(self, node: str, sig: tuple[object, ...]) -> object:
        """The token of a view read from ``sig``: the same object as long as the records read
        say the same (:func:`projection`), a new one when they do not."""
        kept = self._views.get(node)
        if kept is not None and _same(kept[0], sig):
            return kept[2]
        seen = projection(sig)
        token = kept[2] if kept is not None and kept[1] == seen else object()
        keep_newest(self._views, node, (sig, seen, token), self._max)
        return token

    def get(
        self,
        node: str,
        key: str,
        view: object,
        ts_ms: int,
        holders_get: Get,
        pods_get: Get,
    ) -> Frame | None:
        """The device's frame if it holds for a sample at ``ts_ms`` of a view whose token is
        ``view``. A frame whose records were replaced by equal ones keeps the new ones (the next
        check is by identity)."""
        frame = self._frames.get((node, key))
        if frame is None or ts_ms < frame.from_ms or frame.view is not view:
            self.misses += 1
            return None
        holders = tuple(map(holders_get, frame.holder_keys))
        pods = tuple(map(pods_get, frame.pod_keys))
        if _same(holders, frame.holder_recs) and _same(pods, frame.pod_recs):
            self.hits += 1
            return frame
        if holders != frame.holder_recs or pods != frame.pod_recs:
            self.misses += 1
            return None
        self._frames[node, key] = frame = replace(frame, holder_recs=holders, pod_recs=pods)
        self.hits += 1
        return frame

    def shape(self, node: str, key: str, frame: Frame, is_mig: bool) -> Shape:
        """The frame's :class:`~streams.core.devices.attribution.Shape` for events whose device is
        (``is_mig``) a MIG instance or not, made once per frame."""
        if frame.shape is None or frame.shape.is_mig != is_mig:
            shape = shape_of(frame.rows, frame.ctx, frame.held, is_mig)
            frame = replace(frame, shape=shape, exporter=None)
            self._frames[node, key] = frame
        assert frame.shape is not None
        return frame.shape

    def sampled(
        self, node: str, key: str, frame: Frame, sample: DcgmSample
    ) -> tuple[Shape, ExporterWord]:
        """The frame's :meth:`shape` for ``sample``'s events, and the exporter's word on the
        sample against it, made again only when the sample's pod labels differ from those of
        the last sample it was made for."""
        shape = self.shape(node, key, frame, sample.mig_instance_id is not None)
        frame = self._frames.get((node, key), frame)  # with its shape
        labels = exporter_labels(sample)
        if frame.exporter is not None and frame.exporter[0] == labels:
            return shape, frame.exporter[1]
        word = exporter_view(sample, shape)
        self._frames[node, key] = replace(frame, exporter=(labels, word))
        return shape, word

    def roster(
        self, node: str, token: object, scraped: tuple[str, ...]
    ) -> Mapping[str, DeviceFacts] | None:
        """The node's devices as kept for a view with this token and this scrape, if they were."""
        kept = self._rosters.get(node)
        if kept is None or kept[0] is not token or kept[1] != scraped:
            return None
        return kept[2]

    def keep_roster(
        self, node: str, token: object, scraped: tuple[str, ...], devices: Mapping[str, DeviceFacts]
    ) -> None:
        keep_newest(
            self._rosters, node, (token, scraped, MappingProxyType(dict(devices))), self._max
        )

    def put(self, node: str, key: str, frame: Frame) -> None:
        keep_newest(self._frames, (node, key), frame, self._max)

    def forget(self, node: str) -> None:
        """The node left: its frames go (they would only age out otherwise)."""
        self._views.pop(node, None)
        self._rosters.pop(node, None)
        for k in [k for k in self._frames if k[0] == node]:
            del self._frames[k]
