"""The demo's live table: the latest attribution event per device, refreshed in place."""

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


def render(
    latest: Mapping[str, Mapping[str, Any]], alerts: Sequence[Mapping[str, Any]], title: str
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
    return Group(table, recent)
