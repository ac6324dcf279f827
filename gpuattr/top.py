"""``gpuattr top``: the cluster's GPUs in one terminal view, refreshed in place.

One row per device or MIG instance, from any worker's query API (``/api/v1/devices``; the worker
gathers the others). A shared device shows "N tenants · device-wide X%" and every holder with
its allocation share; a holder's own use appears only where the hardware measured its processes
("measured 11.7 GiB · SM 41% (exporter)"), never a split of the device's figure. Beside usage
(busy: any kernel running), ``EFF`` is the device's
effective activity (SM or graphics-engine active) and its kind of work where notable
(``memory-bound``, ``tensor``), ``?`` with the reason where no profiling field is exported —
never 0; ``HEALTH`` the device's marks (``HOT``, ``THR`` throttled, ``MEM`` memory fault,
``PCIe`` replays). Above the devices, each node's GPU stack in one line, broken nodes first and
the broken boundary first in the line ("gpu-a  BROKEN  container toolkit not ready on gpu-a
(…); device plugin, dcgm-exporter and GFD wait on it"). Above those, each pool's demand in one
line, oldest wait first (``/api/v1/demand``): "nvidia.com/gpu  12 pods wait (24 GPUs, oldest 28 d:
"0/8 nodes are available: …") · 5 allocated idle ≥ 2 h: ns/pod, … (of 8 allocated)". ``--once
--json`` prints the rows for scripts (the pools under ``pools``). Every request carries the
query API's bearer token (``GPUATTR_API_TOKEN``, ``GPUATTR_API_TOKEN_FILE`` or ``--token-file``).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from streams.present.noderows import NODE_ROWS, NodeRow, node_line
from streams.present.poolrows import POOL_ROWS, PoolRow, pool_line
from streams.present.views import (
    ROWS,
    SORT_KEYS,
    DeviceRow,
    effective_text,
    health_text,
    measured_text,
    usage_text,
)

#: how each stack state is drawn
STACK_STYLE = {
    "broken": "bold red",
    "conflict": "bold magenta",
    "unknown": "yellow",
    "reconciling": "cyan",
    "disabled": "dim",
}


def query_url(base: str, filters: dict[str, Any], sort: str) -> str:
    params = {k: ("1" if v is True else str(v)) for k, v in filters.items() if v}
    params["sort"] = sort
    return f"{base.rstrip('/')}/api/v1/devices?{urlencode(params)}"


#: the query API's Authorization header, read at each request (a rotated token file)
Credentials = Callable[[], Mapping[str, str]]


async def fetch(
    session: aiohttp.ClientSession, url: str, credentials: Credentials
) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=10)
    async with session.get(url, timeout=timeout, headers=dict(credentials())) as resp:
        body: dict[str, Any] = orjson.loads(await resp.read())
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {body.get('error', body)}")
        return body


def demand_url(base: str) -> str:
    return f"{base.rstrip('/')}/api/v1/demand"


async def fetch_demand(
    session: aiohttp.ClientSession, base: str, credentials: Credentials
) -> dict[str, Any]:
    """The pools' demand; a worker of an older release has none to give (no pools, not an
    error: the devices are still shown)."""
    try:
        return await fetch(session, demand_url(base), credentials)
    except (RuntimeError, orjson.JSONDecodeError):  # a 404 is not JSON
        return {"pools": []}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _holders(row: DeviceRow) -> Text:
    if not row.holders:
        return Text("—", style="dim")
    lines = []
    for h in row.holders:
        who = f"{h.namespace}/{h.pod}"
        extra = [h.workload or "no workload", h.uid_prefix or "uid?"]
        if row.state == "shared" and h.allocation_share is not None:
            extra.append(f"alloc {h.allocation_share:.0%}")
        measured = measured_text(row, h.namespace, h.pod)
        if measured is not None:
            extra.append(measured)
        lines.append(f"{who} ({' · '.join(extra)})")
    return Text("\n".join(lines))


def stack_lines(nodes: Sequence[NodeRow]) -> Text:
    """Each node's GPU stack in one line (broken first, as the API orders them)."""
    text = Text()
    for i, row in enumerate(nodes):
        if i:
            text.append("\n")
        text.append(node_line(row), style=STACK_STYLE.get(row.state, "green"))
    return text


def demand_lines(pools: Sequence[PoolRow]) -> Text:
    """Each pool's demand in one line (oldest wait first, as the API orders them): red where
    pods wait while GPUs of the pool idle, yellow where pods wait."""
    text = Text()
    for i, row in enumerate(pools):
        if i:
            text.append("\n")
        waits = row.pending_pods or row.queued_workloads
        style = "bold red" if waits and row.idle_gpus else ""
        text.append(pool_line(row), style=style or ("yellow" if waits else "dim"))
    return text


#: the columns, and the widest the narrow ones may grow (the reason under ``?`` folds)
COLUMNS = (
    "node",
    "gpu",
    "model",
    "sharing",
    "holders",
    "usage",
    "eff",
    "health",
    "memory",
    "idle",
    "alerts",
)
MAX_WIDTH = {"eff": 18, "health": 9}


def _effective(row: DeviceRow) -> Text:
    """``?`` with why, where usage itself is known (else the usage cell already says why)."""
    text = effective_text(row)
    if row.effective_pct is not None:
        return Text(text, style="yellow" if row.work == "memory-bound" else "")
    if row.telemetry != "unknown" and row.effective_reason:
        return Text.assemble(text, "\n", (row.effective_reason, "dim"))
    return Text(text, style="dim")


def render(body: dict[str, Any], rows: Sequence[DeviceRow], title: str) -> Group:
    nodes = NODE_ROWS.validate_python(body.get("nodes", []))
    pools = POOL_ROWS.validate_python(body.get("pools", []))
    table = Table(title=title, expand=True, show_lines=True)
    for name in COLUMNS:
        table.add_column(name.upper(), overflow="fold", max_width=MAX_WIDTH.get(name))
    for r in rows:
        gpu = str(r.gpu_index) if r.gpu_index is not None else r.gpu_uuid[:12]
        if r.mig_instance is not None:
            gpu += f" mig{r.mig_instance} {r.mig_profile or ''}".rstrip()
        mem = ""
        if r.fb_used_mib is not None:
            total = r.fb_used_mib + (r.fb_free_mib or 0)
            mem = f"{r.fb_used_mib:.0f}/{total:.0f} MiB"
        sharing = r.sharing if r.state != "unallocated" else f"{r.sharing} (free)"
        if r.stale:
            sharing += " (stale: node silent)"
        usage = Text(usage_text(r))
        if r.telemetry == "unknown" and r.telemetry_reason:
            usage = Text(f"{usage_text(r)}\n{r.telemetry_reason}", style="yellow")
        table.add_row(
            r.node,
            gpu,
            r.model,
            sharing,
            _holders(r),
            usage,
            _effective(r),
            Text(health_text(r), style="bold red"),
            mem,
            _duration(r.idle_s),
            Text(", ".join(r.open_alerts), style="bold red") if r.open_alerts else "",
        )
    notes: list[Table | Text] = [demand_lines(pools)] if pools else []
    notes += [stack_lines(nodes), table] if nodes else [table]
    if body.get("unavailable"):
        missing = ", ".join(body["unavailable"])
        notes.append(Text(f"workers not answering: {missing}", style="yellow"))
    if body.get("unverified"):
        strangers = ", ".join(body["unverified"])
        notes.append(
            Text(
                f"not verified, not asked (their devices are missing): {strangers}", style="yellow"
            )
        )
    return Group(*notes)


async def run(
    url: str,
    filters: dict[str, Any],
    sort: str,
    *,
    interval_s: float,
    once: bool,
    as_json: bool,
    credentials: Credentials,
) -> int:
    if sort not in SORT_KEYS:
        print(f"--sort must be one of {', '.join(SORT_KEYS)}", file=sys.stderr)
        return 2
    try:
        credentials()
    except OSError as exc:
        print(f"cannot read the query API token (GPUATTR_API_TOKEN_FILE): {exc}", file=sys.stderr)
        return 2
    target = query_url(url, filters, sort)
    async with aiohttp.ClientSession() as session:
        if once:
            try:
                body = await fetch(session, target, credentials)
            except RuntimeError as exc:  # the API's answer: 401 without the right token, 400
                print(exc, file=sys.stderr)
                return 1
            body["pools"] = (await fetch_demand(session, url, credentials)).get("pools", [])
            if as_json:
                sys.stdout.buffer.write(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
            else:
                width = None if sys.stdout.isatty() else 180  # a pipe or file: don't squeeze
                Console(width=width).print(render(body, ROWS.validate_python(body["devices"]), url))
            return 0
        with Live(Text("connecting…"), auto_refresh=False, screen=False) as live:
            while True:
                try:
                    body = await fetch(session, target, credentials)
                    pools = await fetch_demand(session, url, credentials)
                    body["pools"] = pools.get("pools", [])
                    rows = ROWS.validate_python(body["devices"])
                    title = f"{url} · {len(rows)} devices · {time.strftime('%H:%M:%S')}"
                    live.update(render(body, rows, title), refresh=True)
                except (aiohttp.ClientError, TimeoutError, RuntimeError, OSError) as exc:
                    live.update(Text(f"{url}: {exc!r} — retrying", style="red"), refresh=True)
                await asyncio.sleep(interval_s)
