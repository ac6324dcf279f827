"""Faust's monitor, fed only what Faust reads back for itself.

Faust adds its :class:`faust.sensors.Monitor` to every app's sensors and calls it four times for
every consumed message (message in, stream event in and out, message out) and on every table
read and write: counters, per-stream and per-task tallies keyed by ``str(stream)``, a time per
message and a runtime per event for its averages. Those figures feed only Faust's own web views
(``/stats``, ``/metrics``), which the worker serves only when asked for
(``GPUATTR_WORKER_FAUST_VIEWS``; its own metrics are ``streams.worker.selfmetrics``). On the
bench fleet a worker whose record loop does nothing spent ~111 µs per input record with it and
~90 with :class:`LeanMonitor` (``bench.floor``'s Faust-only worker, four alternating pairs;
bench.run).

One figure Faust reads itself: each partition's last stream event time
(``stream_inbound_time``), by the consumer's slow-processing check, which warns when a partition
with lag has had no event for a while. :class:`LeanMonitor` keeps exactly that, so the warning
stays true; every other per-message and per-table hook does nothing. Commits, rebalances and
assignments (rare) are recorded as Faust records them.
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from faust.sensors.monitor import Monitor


class LeanMonitor(Monitor):  # type: ignore[misc]
    """A :class:`faust.sensors.Monitor` that records per message only the partition's last
    stream event time (what Faust's consumer reads back); see the module docstring."""

    def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
        return None

    def on_stream_event_in(self, tp: Any, offset: int, stream: Any, event: Any) -> None:
        self.stream_inbound_time[tp] = monotonic()

    def on_stream_event_out(
        self, tp: Any, offset: int, stream: Any, event: Any, state: Any = None
    ) -> None:
        return None

    def on_message_out(self, tp: Any, offset: int, message: Any) -> None:
        return None

    def on_table_get(self, table: Any, key: Any) -> None:
        return None

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        return None

    def on_table_del(self, table: Any, key: Any) -> None:
        return None
