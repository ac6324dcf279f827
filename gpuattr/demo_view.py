"""The demo's live view, refreshed in place: each node's GPU stack in one line (the latest
node-status: its state and summary, the first broken boundary first), the latest attribution
event per device, the latest alerts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group
from rich.table import Table


def _holders(ev: Mapping[str, Any]) -> str:
    parts = []
    for h in ev["holders"]:
        wl = h.get("workload")
        uid = (h.get("uid") or "")[:8] or h.get("uid_status", "")
        who = f"{h['namespace']}/{h['pod']}"
        if wl:
            who += f" ({wl['kind']}/{wl['name']})"
        share = h.get("allocation_share")
        alloc = f" alloc {share:.0%}" if share is not None and ev["state"] == "shared" else ""
        parts.append(f"{who} uid:{uid}{alloc}")
    return "\n".join(parts) or "-"


def _usage(ev: Mapping[str, Any]) -> str:
    u = ev["usage"]
    tele = ev.get("telemetry") or {}
    if tele.get("status") == "unknown":  # never 0, never blank: why
        return f"unknown: {tele.get('reason') or tele.get('cause')}"
    util = "n/a" if u["util_pct"] is None else f"{u['util_pct']:.0f}%"
    if ev["state"] == "shared" and ev["tenant_count"] > 1:
        util = f"{ev['tenant_count']} tenants · device-wide {util}"
    mem = "" if u["fb_used_mib"] is None else f" · {u['fb_used_mib'] / 1024:.1f} GiB"
    return util + mem


STACK_STYLE = {"ready": "green", "broken": "red", "reconciling": "yellow"}


def _stack_line(status: Mapping[str, Any]) -> str:
    """``broken at container-toolkit · container toolkit not ready on … ; … wait on it``."""
    state = str(status["state"])
    first = status.get("first_broken")
    head = f"{state} at {first}" if first else state
    line = f"[{STACK_STYLE.get(state, 'default')}]{head}[/] · {status['summary']}"
    if status.get("telemetry_disabled") and status.get("telemetry_reason"):
        line += f" · telemetry off on purpose: {status['telemetry_reason']}"
    return line


def stack_table(stacks: Mapping[str, Mapping[str, Any]]) -> Table:
    table = Table(title="GPU stack per node (GPU Operator)", expand=True, show_header=False)
    table.add_column("node", no_wrap=True)
    table.add_column("stack", overflow="fold")
    for node in sorted(stacks):
        table.add_row(node, _stack_line(stacks[node]))
    return table


def render(
    latest: Mapping[str, Mapping[str, Any]],
    alerts: Sequence[Mapping[str, Any]],
    title: str,
    stacks: Mapping[str, Mapping[str, Any]] | None = None,
) -> Group:
    table = Table(title=title, expand=True)
    for col in ("node", "device", "model", "state", "holders", "usage", "exporter says"):
        table.add_column(col, overflow="fold")
    for key in sorted(latest):
        ev = latest[key]
        if ev.get("origin") == "gone":
            continue
        dev = ev["device_uuid"][:17]
        if ev.get("mig"):
            dev += f" (gi{ev['mig']['instance_id']} {ev['mig']['profile']})"
        state = ev["state"] if ev["sharing"] in ("none",) else f"{ev['state']} · {ev['sharing']}"
        if ev.get("origin") == "stale":
            state += " · stale"
        exp = ev["exporter"]
        claims = ", ".join(c["pod"] for c in exp["claims"]) or "-"
        verdict = "trusted" if exp["trusted"] else "UNTRUSTED"
        table.add_row(
            ev["node"], dev, ev["model"], state, _holders(ev), _usage(ev), f"{claims} [{verdict}]"
        )
    recent = Table(title="alerts (latest 8)", expand=True, show_header=False)
    recent.add_column("alert", overflow="fold")
    for a in list(alerts)[-8:]:
        mark = "[green]RESOLVED[/]" if a["status"] == "resolved" else "[red]FIRING[/]"
        recent.add_row(f"{mark} {a['summary']}")
    if not alerts:
        recent.add_row("none yet")
    if stacks:  # only nodes the GPU Operator manages have one
        return Group(stack_table(stacks), table, recent)
    return Group(table, recent)
