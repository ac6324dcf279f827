"""The worker's tables by name. Changelog topics are ``<app id>-<name>-changelog``, compacted,
with the input topic's partition count (see :func:`gpuattr.topics.changelog_specs`)."""

from __future__ import annotations

#: :class:`streams.processor.Tables` field → Faust table name
TABLES: dict[str, str] = {
    "slot_holders": "slot-holders",
    "node_devices": "node-devices",
    "inventories": "inventories",
    "pods": "pods",
    "node_pods": "node-pods",
    "nodes": "nodes",
    "alert_state": "alert-state",
}
