"""The latest attribution event of each device this worker owns, for the query API.

Deliberately not a changelog table: it is a cache of the output stream, not state the join
needs. Writing it to a changelog would add one record per sample to the hot path for a value
the next scrape (one interval later) replaces. After a restart or rebalance a device appears
again with its next sample; until then the API says which partitions it cannot show yet.
Holders and alert state, which *are* state, come from the changelog-backed tables.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from contract.outputs import AttributionEvent
from streams.core.alerts.alerts import DeviceAlerts
from streams.core.keys import alert_key
from streams.present.views import DeviceRow, device_row


class LiveDevices:
    def __init__(self) -> None:
        self._latest: dict[str, tuple[int, AttributionEvent]] = {}

    def update(self, partition: int, event: AttributionEvent) -> None:
        """Keep the device's newest event; a device's last event (``gone``) removes it."""
        key = alert_key(event.node, event.device_uuid)  # one copy of it with the alert state's
        if event.origin == "gone":
            self._latest.pop(key, None)
            return
        current = self._latest.get(key)
        if current is None or event.ts_ms >= current[1].ts_ms:
            self._latest[key] = (partition, event)

    def partitions(self) -> set[int]:
        return {p for p, _ in self._latest.values()}

    def rows(
        self, owned: Collection[int], alert_state: Mapping[str, DeviceAlerts]
    ) -> list[DeviceRow]:
        """Rows of the devices on partitions this worker owns now; others are dropped."""
        for key in [k for k, (p, _) in self._latest.items() if p not in owned]:
            del self._latest[key]
        return [device_row(ev, alert_state.get(key)) for key, (_, ev) in self._latest.items()]

    def __len__(self) -> int:
        return len(self._latest)
