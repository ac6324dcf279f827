"""The strings the worker keeps per device are one object per value.

A decoded scrape's strings are its own (``contract.inputs.READ_AND_LET_GO``: not interned when
decoded), and keys are built by formatting: without care, every device's state holds its own copy
of its node's name, its model, its GPU's UUID (seven times over on a MIG GPU) and of every key it
is filed under. The core interns what it keeps of a scrape (the events' names, device keys) and
the keys it builds (holder, alert, pod and device keys), and the worker's live view files an event
under the alert state's key. This walks what a worker holds after the bench fleet (every sharing
mode, MIG included, pods replaced) and checks the parts that are kept per device.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from bench.fleet import stream
from contract import codec
from contract.outputs import AttributionEvent
from contract.records import field_names, is_record
from streams.core.flow.processor import Processor, Tables
from streams.worker.live import LiveDevices

#: where per-device strings are kept: a path's prefix (as :func:`_strings` names it)
PER_DEVICE = (
    "live{k}",
    "live{v}[].node",
    "live{v}[].device_uuid",
    "live{v}[].gpu_uuid",
    "live{v}[].model",
    "live{v}[].mig.profile",
    "alert_state{k}",
    "pods{k}",
    "node_pods{v}.names",
    "slot_holders{k}",
    "node_state{v}.scraped",
    "frames{v}.holder_keys",
    "frames{v}.pod_keys",
)


def _strings(obj: object, path: str, seen: set[int]) -> Iterator[tuple[str, str]]:
    """(path, string) of every string reachable from ``obj`` through containers and records."""
    if type(obj) is str:
        yield path, obj
        return
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k, path + "{k}", seen)
            yield from _strings(v, path + "{v}", seen)
    elif isinstance(obj, tuple | list | set | frozenset):
        for v in obj:
            yield from _strings(v, path + "[]", seen)
    elif is_record(obj):
        for name in field_names(type(obj)):
            yield from _strings(getattr(obj, name), f"{path}.{name}", seen)


def test_what_is_kept_per_device_holds_one_copy_of_each_string() -> None:
    t = Tables.in_memory()
    proc = Processor(t)
    live = LiveDevices()
    for record in stream(8, 6, start_ms=1_700_000_000_000, churn_every=2):
        for out in proc.handle(codec.decode(codec.encode(record))):
            if isinstance(out, AttributionEvent):
                live.update(0, out)
    roots = {
        "live": live._latest,
        "alert_state": t.alert_state,
        "pods": t.pods,
        "node_pods": t.node_pods,
        "slot_holders": t.slot_holders,
        "node_state": t.node_state,
        "frames": proc.spine.joins.frames._frames,
    }
    copies: dict[str, set[int]] = defaultdict(set)
    where: dict[str, set[str]] = defaultdict(set)
    for name, root in roots.items():
        for path, text in _strings(root, name, set()):
            if path.startswith(PER_DEVICE):
                copies[text].add(id(text))
                where[text].add(path)
    walked = {
        prefix
        for prefix in PER_DEVICE
        for paths in where.values()
        for path in paths
        if path.startswith(prefix)
    }
    assert walked == set(PER_DEVICE)  # every part was walked, and held strings
    doubled = {text: sorted(where[text]) for text, ids in copies.items() if len(ids) > 1}
    assert not doubled, (
        f"{len(doubled)} strings kept more than once, e.g. {list(doubled.items())[:3]}"
    )
