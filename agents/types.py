"""Small shared types for the agent's collectors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agents.events import (
    DcgmSample,
    DeviceInventory,
    NodeRecord,
    PodListSnapshot,
    PodRecord,
    PodResourcesDiff,
    PodResourcesSnapshot,
)

AgentRecord = (
    PodResourcesSnapshot
    | PodResourcesDiff
    | DcgmSample
    | PodRecord
    | PodListSnapshot
    | NodeRecord
    | DeviceInventory
)

#: Where collectors hand their records: the publisher routes them to topics keyed by node.
Emit = Callable[[AgentRecord], Awaitable[None]]

#: The injected clock: milliseconds since the epoch.
NowMs = Callable[[], int]
