"""What operators see of each node's GPU stack: one row per node, beside the device rows. Pure.

A row is the node's last ``node-status`` (:mod:`streams.core.stack.operatorstack`, kept in the
``node-stack`` table) and its open ``stack-broken`` alert (:mod:`streams.core.stack.stackalerts`).
Broken nodes come first; the line ``gpuattr top`` prints puts the broken boundary first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pydantic

from contract.outputs import NodeStatus
from contract.records import fast_init
from streams.core.stack.nodestack import NodeStack

#: the order rows are listed in: what needs a person first
STATE_ORDER = ("broken", "conflict", "unknown", "reconciling", "disabled", "ready")


@fast_init
@dataclass(frozen=True, slots=True)
class PlaneRow:
    name: str
    state: str  # ready, not-ready, waiting, unreachable, refused, disabled, unknown
    intent: str  # deploy, host, disabled, paused, unlabelled, unknown
    reason: str


@fast_init
@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    state: str  # ready, broken, reconciling, disabled, unknown
    summary: str
    first_broken: str | None
    broken_reason: str | None  # the first broken plane's own line
    blocked: tuple[str, ...]  # the planes that wait on it
    planes: tuple[PlaneRow, ...]
    telemetry_reason: str | None
    telemetry_disabled: bool
    alert: str | None  # the open stack-broken alert's id
    ts_ms: int


NODE_ROWS = pydantic.TypeAdapter(list[NodeRow])


def node_row(stack: NodeStack) -> NodeRow | None:
    """The node's row, from what its stack last said (None: it never said anything)."""
    s: NodeStatus | None = stack.last
    if s is None:
        return None
    first = next((p for p in s.planes if p.name == s.first_broken), None)
    return NodeRow(
        node=s.node,
        state=s.state,
        summary=s.summary,
        first_broken=s.first_broken,
        broken_reason=first.reason if first is not None else None,
        blocked=tuple(s.blocked),
        planes=tuple(PlaneRow(p.name, p.state, p.intent.kind, p.reason) for p in s.planes),
        telemetry_reason=s.telemetry_reason,
        telemetry_disabled=s.telemetry_disabled,
        alert=stack.broken.fired.id if stack.broken and stack.broken.fired else None,
        ts_ms=s.ts_ms,
    )


def _order(row: NodeRow) -> tuple[int, str]:
    rank = STATE_ORDER.index(row.state) if row.state in STATE_ORDER else len(STATE_ORDER)
    return rank, row.node


def ordered(rows: Iterable[NodeRow], node: str | None = None) -> list[NodeRow]:
    """Broken first, then by node name; only ``node``'s when asked."""
    return sorted((r for r in rows if node is None or r.node == node), key=_order)


def merge_nodes(parts: Sequence[Iterable[NodeRow]]) -> list[NodeRow]:
    """Rows gathered from several workers: one per node, the latest (a node that moved between
    workers mid-gather may be listed by both)."""
    latest: dict[str, NodeRow] = {}
    for part in parts:
        for row in part:
            if row.node not in latest or row.ts_ms >= latest[row.node].ts_ms:
                latest[row.node] = row
    return ordered(latest.values())


def node_line(row: NodeRow) -> str:
    """One line: the node, its state, and what matters first — the broken boundary and what
    waits on it, or why its telemetry is off when that was intended."""
    line = row.summary
    if row.state != "broken" and row.telemetry_disabled and row.telemetry_reason:
        line += f"; {row.telemetry_reason}"
        line += "" if "by intent" in row.telemetry_reason else " (disabled by intent)"
    if row.alert:
        line += " [alert open]"
    return f"{row.node}  {row.state.upper()}  {line}"
