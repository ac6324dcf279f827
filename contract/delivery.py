"""Records the sink produces. The sinks side owns these."""

from __future__ import annotations

from contract.records import Record


class DeliveryFailure(Record, frozen=True):
    """An alert one destination would not take after every retry: kept, with the last error."""

    alert_id: str
    destination: str
    attempts: int
    last_error: str
    alert_payload: str  # the alert's JSON exactly as read from the alerts topic
    source_partition: int
    source_offset: int
    ts_ms: int


KINDS: dict[str, tuple[type, int]] = {"delivery.failure": (DeliveryFailure, 1)}
