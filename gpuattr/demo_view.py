"""The demo's live view, refreshed in place: each node's GPU stack in one line (the latest
node-status: its state and summary, the first broken boundary first), the latest attribution
event per device, the waiting line per pool (the latest demand record: who waits, how long, with
the scheduler's word, and the pool's allocated GPUs that idle meanwhile), the latest alerts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group
from rich.table import Table


def _measured(ev: Mapping[str, Any], namespace: str, pod: str) -> str:
    """A holder pod's own measured use (per-process readings), labelled so; "" where none."""
    for p in ev.get("pods") or ():
        m = p.get("measured")
        if (p["namespace"], p["pod"]) != (namespace, pod) or not m:
            continue
        figures = []
        if m.get("fb_used_mib") is not None:
            figures.append(f"{m['fb_used_mib'] / 1024:.1f} GiB")
        if m.get("sm_util_pct") is not None:
            figures.append(f"SM {m['sm_util_pct']:.0f}%")
        return f" measured {' · '.join(figures) or 'n/a'} ({m['source']})"
    return ""


def _holders(ev: Mapping[str, Any]) -> str:
    parts = []
    seen: set[tuple[str, str]] = set()
    for h in ev["holders"]:
        wl = h.get("workload")
        uid = (h.get("uid") or "")[:8] or h.get("uid_status", "")
        who = f"{h['namespace']}/{h['pod']}"
        if wl:
            who += f" ({wl['kind']}/{wl['name']})"
        share = h.get("allocation_share")
        alloc = f" alloc {share:.0%}" if share is not None and ev["state"] == "shared" else ""
        pod = (h["namespace"], h["pod"])
        measured = _measured(ev, *pod) if pod not in seen else ""
        seen.add(pod)
        parts.append(f"{who} uid:{uid}{alloc}{measured}")
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


STACK_STYLE = {"ready": "green", "broken": "red", "conflict": "magenta", "reconciling": "yellow"}


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


def _age(ms: int) -> str:
    s = max(0, ms) // 1000
    return f"{s // 86400} d" if s >= 86400 else f"{s // 3600} h" if s >= 3600 else f"{s} s"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def waiting_line(pool: Mapping[str, Any]) -> str:
    """``2 pods wait for 2 GPUs (oldest 40 s): inference/serve-mistral-…, … — 0/3 nodes are
    available: …`` and, below, ``4 allocated · 3 idle: dem-a GPU-… (research/notebook-kim-0)``."""
    now = int(pool["ts_ms"])
    waiting = [w for w in pool["waiting"] if w.get("waits_for", "scheduler") == "scheduler"]
    queued = [w for w in pool["waiting"] if w.get("waits_for") == "quota"]
    heads: list[str] = []
    oldest = pool.get("oldest_since_ms")
    age = f" (oldest {_age(now - int(oldest))})" if oldest is not None else ""
    if pool["pending_pods"]:
        pods = ", ".join(f"{w['namespace']}/{w['pod']}" for w in waiting[:3])
        more = f" +{pool['pending_pods'] - 3}" if pool["pending_pods"] > 3 else ""
        said = next((w["message"] for w in waiting if w.get("message")), "")
        asked = pool["gpus_requested"] - pool.get("gpus_for_quota", 0)
        heads.append(
            f"[yellow]{_count(pool['pending_pods'], 'pod waits', 'pods wait')} for "
            f"{_count(asked, 'GPU', 'GPUs')}[/]"
            f"{age}: {pods}{more}" + (f" — {said}" if said else "")
        )
    if pool.get("queued_workloads"):
        queues = sorted(
            {f"ClusterQueue {w['cluster_queue']}" for w in queued if w["cluster_queue"]}
        )
        names = ", ".join(
            f"{w['namespace']}/{w['pod']}" + (f" ({w['workload']})" if w.get("workload") else "")
            for w in queued[:3]
        )
        said = next((w["message"] for w in queued if w.get("message")), "")
        heads.append(
            f"[yellow]{_count(pool['queued_workloads'], 'Workload waits', 'Workloads wait')} "
            f"for quota for {_count(pool['gpus_for_quota'], 'GPU', 'GPUs')}[/]"
            + (f" in {', '.join(queues)}" if queues else "")
            + f": {names}"
            + (f" — Kueue: {said}" if said else "")
        )
    head = "\n".join(heads) or "nobody waits"
    idle = pool["idle"]
    supply = f"{pool['allocated_gpus']} allocated"
    if idle:
        who = ", ".join(
            f"{g['node']} {g['device_uuid'][:12]} "
            f"({', '.join(h['namespace'] + '/' + h['pod'] for h in g['holders']) or '-'}, "
            f"idle {_age(now - int(g['since_ms']))})"
            for g in idle
        )
        mark = "red" if pool["pending_pods"] or pool.get("queued_workloads") else "default"
        supply += f" · [{mark}]{len(idle)} idle[/]: {who}"
    if pool.get("unmeasured_gpus"):
        supply += f" · {pool['unmeasured_gpus']} unmeasured"
    return f"{head}\n{supply}"


def demand_table(pools: Mapping[str, Mapping[str, Any]]) -> Table:
    table = Table(title="GPU demand per pool", expand=True, show_header=False)
    table.add_column("pool", no_wrap=True)
    table.add_column("waiting line", overflow="fold")
    for key in sorted(pools):
        table.add_row(key, waiting_line(pools[key]))
    return table


def render(
    latest: Mapping[str, Mapping[str, Any]],
    alerts: Sequence[Mapping[str, Any]],
    title: str,
    stacks: Mapping[str, Mapping[str, Any]] | None = None,
    pools: Mapping[str, Mapping[str, Any]] | None = None,
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
    parts: list[Table] = []
    if stacks:  # only nodes the GPU Operator manages have one
        parts.append(stack_table(stacks))
    parts.append(table)
    if pools:  # only where pods ask for GPUs the scheduler has not given
        parts.append(demand_table(pools))
    return Group(*parts, recent)
