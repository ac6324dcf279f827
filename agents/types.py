"""Small shared types for the agent's collectors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from contract.inputs import InputRecord

#: Every record a collector hands over (the node-events topic's records)
AgentRecord = InputRecord

#: Where collectors hand their records: the publisher routes them to topics keyed by node.
Emit = Callable[[AgentRecord], Awaitable[None]]

#: The injected clock: milliseconds since the epoch.
NowMs = Callable[[], int]
