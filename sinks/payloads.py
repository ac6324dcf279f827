"""What a destination receives: a Slack Block Kit message, or a signed JSON webhook. Pure.

Webhook signature: ``X-Gpuattr-Signature: v2=<hex HMAC-SHA256(key,
"<timestamp>.<idempotency key>.<body>")>`` with ``X-Gpuattr-Timestamp`` (Unix seconds) and
``Idempotency-Key: <alert id>:<status>`` — the same on every retry and redelivery of one alert
record, distinct for its resolution. The key is signed too (v1 signed only the timestamp and the
body, so a replayed request with a fresh key passed a receiver's dedupe). Receivers verify the
signature over the exact bytes, reject stale timestamps and drop repeated keys.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import orjson

from contract.outputs import Alert

SIGNATURE_HEADER = "X-Gpuattr-Signature"
TIMESTAMP_HEADER = "X-Gpuattr-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"


def idempotency_key(alert: Alert) -> str:
    """One key per alert state change: a retry repeats it, a resolution gets its own."""
    return f"{alert.id}:{alert.status}"


SCHEME = "v2"


def sign(secret: bytes, timestamp: int, key: str, body: bytes) -> str:
    signed = f"{timestamp}.{key}.".encode() + body
    return f"{SCHEME}=" + hmac.new(secret, signed, hashlib.sha256).hexdigest()


def verify(secret: bytes, timestamp: int, key: str, body: bytes, signature: str) -> bool:
    return hmac.compare_digest(sign(secret, timestamp, key, body), signature)


def webhook_request(
    alert_payload: bytes, alert: Alert, secret: bytes | None, timestamp: int
) -> tuple[bytes, dict[str, str]]:
    """Body (the alert's own JSON, untouched) and headers for a generic webhook."""
    key = idempotency_key(alert)
    headers = {
        "Content-Type": "application/json",
        IDEMPOTENCY_HEADER: key,
        TIMESTAMP_HEADER: str(timestamp),
    }
    if secret:
        headers[SIGNATURE_HEADER] = sign(secret, timestamp, key, alert_payload)
    return alert_payload, headers


_EMOJI = {
    "idle": ":zzz:",
    "xid": ":rotating_light:",
    "orphaned-memory": ":ghost:",
    "stack-broken": ":construction:",
    "low-efficiency": ":turtle:",
    "thermal": ":fire:",
    "memory-fault": ":boom:",
    "pcie-replays": ":electric_plug:",
    "demand-while-idle": ":hourglass_flowing_sand:",
    "idle-tenant": ":sleeping:",
    "memory-hog": ":elephant:",
    "device-unhealthy": ":hospital:",
}
#: a kind this sink does not know yet (a newer worker's) still renders
_EMOJI_UNKNOWN = ":warning:"


def _waited(since_ms: int, ts_ms: int) -> str:
    s = max(0, ts_ms - since_ms) // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s // size} {unit}"
    return f"{s} s"


def _where(alert: Alert) -> tuple[dict[str, str], dict[str, str]]:
    """The two fields beside the summary: the device and its sharing, for a node's alert
    (``stack-broken``) the broken plane and the GPUs it costs, for a pool's
    (``demand-while-idle``) the pods waiting and the idle GPUs."""
    if alert.demand is not None:
        d = alert.demand
        waiting = "\n".join(
            f"• `{w.namespace}/{w.pod}`"
            + (f" ({w.workload})" if w.workload else "")
            + f" · {w.gpus} GPU · {_waited(w.since_ms, alert.ts_ms)}"
            + (f" · {w.reason}" if w.reason else "")
            for w in d.waiting[:10]
        )
        more = len(d.waiting) - 10
        if more > 0:
            waiting += f"\n… and {more} more listed"
        idle = "\n".join(
            f"• `{g.node}` · `{g.device_uuid}` · idle {_waited(g.since_ms, alert.ts_ms)}"
            for g in d.idle[:10]
        )
        if len(d.idle) > 10:
            idle += f"\n… and {len(d.idle) - 10} more"
        return (
            {"type": "mrkdwn", "text": f"*Waiting for `{d.pool}`*\n{waiting or 'nobody'}"[:1900]},
            {"type": "mrkdwn", "text": f"*Idle GPUs of the pool*\n{idle or 'none'}"[:1900]},
        )
    if alert.stack is not None:
        b = alert.stack
        plane = f"`{alert.node}` · *{b.plane}*: {b.reason}"
        if b.blocked:
            plane += f"\nwaiting on it: {', '.join(b.blocked)}"
        blind = ", ".join(f"`{u}`" for u in b.unmeasured) or "none"
        gpus = f"{len(b.held)} held; without telemetry: {blind}"
        return (
            {"type": "mrkdwn", "text": f"*Broken plane*\n{plane}"[:1900]},
            {"type": "mrkdwn", "text": f"*GPUs*\n{gpus}"[:1900]},
        )
    device = f"`{alert.node}` · {alert.model} · `{alert.device_uuid}`"
    if alert.mig:
        device += f" (MIG {alert.mig.profile}, GI {alert.mig.instance_id})"
    return (
        {"type": "mrkdwn", "text": f"*Device*\n{device}"},
        {"type": "mrkdwn", "text": f"*Sharing*\n{alert.sharing}"},
    )


def _limit(value: float | None, unit: str = "") -> str:
    return "" if value is None else f" (threshold {value:g}{unit})"


def _figures(alert: Alert) -> list[str]:
    """The alert's figures, each with its threshold where it has one; device-wide on a shared
    device."""
    f = alert.figures
    scope = "device-wide " if alert.device_wide else ""
    out = []
    if f.util_pct is not None:
        limit = f.util_threshold_pct if f.util_threshold_pct is not None else f.busy_threshold_pct
        out.append(f"*{scope}utilization* {f.util_pct:g}%{_limit(limit, '%')}")
    if f.effective_pct is not None:
        source = f" ({f.effective_source})" if f.effective_source else ""
        out.append(
            f"*{scope}effective activity* {f.effective_pct:g}%{source}"
            + _limit(f.effective_threshold_pct, "%")
        )
    if f.fb_used_mib is not None:
        out.append(f"*memory used* {f.fb_used_mib:g} MiB")
    if f.xid is not None:
        out.append(f"*XID* {f.xid}")
    if f.gpu_temp_c is not None:
        out.append(f"*GPU temperature* {f.gpu_temp_c:g} °C")
    if f.memory_temp_c is not None:
        out.append(f"*memory temperature* {f.memory_temp_c:g} °C")
    if f.thermal_throttle_pct is not None:
        out.append(f"*thermal throttling* {f.thermal_throttle_pct:g}% of the time")
    if f.uncorrectable_remapped_rows is not None:
        out.append(f"*uncorrectable remapped rows* {f.uncorrectable_remapped_rows:g}")
    if f.ecc_dbe_increase:
        out.append(f"*double-bit ECC errors* +{f.ecc_dbe_increase:g}")
    if f.row_remap_failure:
        out.append("*row remapping failed*")
    if f.pcie_replays_per_min is not None:
        out.append(
            f"*PCIe replays* {f.pcie_replays_per_min:g}/min{_limit(f.pcie_threshold_per_min)}"
        )
    if f.pending_pods is not None:
        out.append(f"*pods waiting* {f.pending_pods}")
    if f.gpus_requested is not None:
        out.append(f"*GPUs requested* {f.gpus_requested}")
    if f.oldest_wait_s is not None:
        out.append(f"*oldest wait* {_waited(0, int(f.oldest_wait_s * 1000))}")
    if f.idle_gpus is not None:
        out.append(f"*idle GPUs* {f.idle_gpus}")
    if f.idle_for_s is not None:
        out.append(f"*idle for* at least {_waited(0, int(f.idle_for_s * 1000))}")
    return out


def slack_message(alert: Alert) -> dict[str, Any]:
    """A Block Kit message a person can act on: what, where, who owns it, the figures."""
    resolved = alert.status == "resolved"
    head = (
        ":white_check_mark: Resolved"
        if resolved
        else f"{_EMOJI.get(alert.kind, _EMOJI_UNKNOWN)} {alert.kind}"
    )
    owners = [
        f"• `{h.namespace}/{h.pod}`"
        + (f" ({h.workload.kind} {h.workload.name})" if h.workload else "")
        + (f" · uid `{h.uid[:8]}`" if h.uid else "")
        + (
            f" · allocation {h.allocation_share:.0%}"
            if h.allocation_share is not None and alert.device_wide
            else ""
        )
        for h in alert.holders
    ] or [
        "• no pod holds a GPU on this node"
        if alert.stack
        else "• no holder named"
        if alert.demand
        else "• no pod holds this device"
    ]
    figures = _figures(alert)
    return {
        "text": alert.summary,  # notification fallback
        "blocks": [
            {
                "type": "header",
                "text": {
                    "type": "plain_text",
                    "text": f"{head}: {alert.demand.pool if alert.demand else alert.node}"[:150],
                },
            },
            {"type": "section", "text": {"type": "mrkdwn", "text": alert.summary[:2900]}},
            {
                "type": "section",
                "fields": list(_where(alert)),
            },
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": "*Holders*\n" + "\n".join(owners)[:2900]},
            },
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": " · ".join(figures) or "no figures"},
                    {"type": "mrkdwn", "text": f"alert `{alert.id}`"},
                ],
            },
        ],
    }


def slack_body(alert: Alert) -> bytes:
    return orjson.dumps(slack_message(alert))
