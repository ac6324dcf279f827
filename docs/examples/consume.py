"""Read gpu-attribution's output with plain aiokafka: no gpuattr code needed.

    pip install aiokafka cramjam    # cramjam: the output's batches are zstd-compressed
    python docs/examples/consume.py --bootstrap localhost:9092 [--prefix gpuattr.] [--max 20]

Prints one line per attribution event and per alert. Payloads are JSON with a `schema` name and
version `v`; check `v` and skip (or dead-letter) versions you do not understand.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from aiokafka import AIOKafkaConsumer

# the versions whose fields describe() reads (attribution v2 added a telemetry cause and plane)
SUPPORTED = {"attribution": {1, 2}, "alert": {1}}


def describe(event: dict) -> str:  # type: ignore[type-arg]
    if event["schema"] == "alert":
        return f"ALERT {event['status']:8} {event['kind']:15} {event['summary']}"
    holders = (
        ", ".join(
            f"{h['namespace']}/{h['pod']} uid={(h['uid'] or '?')[:8]}"
            + (f" alloc={h['allocation_share']:.0%}" if h["allocation_share"] is not None else "")
            for h in event["holders"]
        )
        or "-"
    )
    telemetry = event.get("telemetry") or {"status": "measured"}  # added in place to v1
    if telemetry["status"] == "unknown":  # never 0, never idle: unknown, and why
        reading = f"usage unknown ({telemetry.get('cause')}: {telemetry.get('reason')})"
    else:
        scope = "device-wide" if event["credit"] == "device-wide" else "credited"
        reading = f"util={event['usage']['util_pct']}% ({scope})"
    return (
        f"{event['node']:10} {event['device_uuid'][:20]:20} {event['state']:11} "
        f"{event['sharing']:12} {reading} holders: {holders}"
    )


async def main(bootstrap: str, prefix: str, limit: int | None, group: str | None) -> int:
    consumer = AIOKafkaConsumer(
        f"{prefix}attribution",
        f"{prefix}alerts",
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=group is not None,
    )
    await consumer.start()
    seen = 0
    try:
        async for msg in consumer:
            event = json.loads(msg.value)
            if event.get("v") not in SUPPORTED.get(event.get("schema"), set()):
                continue  # a schema or version this consumer was not written for
            print(describe(event), flush=True)
            seen += 1
            if limit is not None and seen >= limit:
                break
    finally:
        await consumer.stop()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--prefix", default="gpuattr.")
    parser.add_argument("--max", type=int, default=None, help="stop after N events")
    parser.add_argument("--group", default=None, help="consumer group (default: none)")
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.bootstrap, args.prefix, args.max, args.group)))
