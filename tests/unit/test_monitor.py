"""The worker's Faust monitor (streams.worker.monitor): per message it keeps only what Faust's
consumer reads back (each partition's last stream event time), and Faust's full monitor is
used when Faust's own views, which show its figures, are asked for."""

from __future__ import annotations

import inspect
from pathlib import Path
from time import monotonic
from types import SimpleNamespace

import faust
from faust.sensors.monitor import Monitor
from faust.types import TP

from infra.settings import AlertSettings, KafkaSettings, WorkerSettings
from streams.worker.app import build_app
from streams.worker.monitor import LeanMonitor

TP0 = TP("b.node-events", 3)
PER_MESSAGE = (
    "on_message_in",
    "on_stream_event_in",
    "on_stream_event_out",
    "on_message_out",
    "on_table_get",
    "on_table_set",
    "on_table_del",
)


class _Task:
    """The task that owns a stream, as Faust's monitor keys its tally."""


class _Stream:
    """What Faust's monitor reads of a stream: its name, and the task that owns it."""

    def __init__(self) -> None:
        self.task_owner = _Task()


def _app(tmp_path: Path, **worker: object) -> faust.App:
    settings = WorkerSettings(data_dir=tmp_path, web_enabled=False, **worker)  # type: ignore[arg-type]
    return build_app(KafkaSettings(bootstrap="localhost:1"), settings, AlertSettings())


def test_a_stream_event_records_when_its_partition_last_had_one() -> None:
    monitor = LeanMonitor()
    before = monotonic()
    assert monitor.on_stream_event_in(TP0, 41, object(), object()) is None
    assert before <= monitor.stream_inbound_time[TP0] <= monotonic()
    assert set(monitor.stream_inbound_time) == {TP0}


def test_per_message_and_table_hooks_keep_no_figures() -> None:
    monitor = LeanMonitor()
    message = SimpleNamespace(time_in=None)
    monitor.on_message_in(TP0, 41, message)
    state = monitor.on_stream_event_in(TP0, 41, object(), object())
    monitor.on_stream_event_out(TP0, 41, object(), object(), state)
    monitor.on_message_out(TP0, 41, message)
    table = SimpleNamespace(name="slot_holders")
    monitor.on_table_get(table, "k")
    monitor.on_table_set(table, "k", 1)
    monitor.on_table_del(table, "k")
    assert (monitor.messages_received_total, monitor.events_total) == (0, 0)
    assert (monitor.messages_active, monitor.events_active) == (0, 0)
    assert not monitor.events_by_stream
    assert not monitor.tp_read_offsets
    assert not monitor.events_runtime
    assert not monitor.tables
    assert message.time_in is None


def test_faust_full_monitor_does_keep_them() -> None:
    """The counterpart: what the lean monitor leaves out is what Faust's own records."""
    monitor = Monitor()
    message = SimpleNamespace(time_in=None)
    monitor.on_message_in(TP0, 41, message)
    monitor.on_stream_event_in(TP0, 41, _Stream(), object())
    assert (monitor.messages_received_total, monitor.events_total) == (1, 1)
    assert message.time_in is not None


def test_its_hooks_are_faust_monitors_hooks() -> None:
    """Each hook it replaces is one Faust calls, with the same parameters: a Faust release that
    renamed or reshaped one would leave Faust's own in place, unnoticed, without this."""
    for name in PER_MESSAGE:
        ours = inspect.signature(getattr(LeanMonitor, name))
        faust_own = inspect.signature(getattr(Monitor, name))
        assert list(ours.parameters) == list(faust_own.parameters), name
        assert getattr(LeanMonitor, name) is not getattr(Monitor, name), name


def test_the_worker_runs_the_lean_monitor_unless_faust_views_are_asked_for(
    tmp_path: Path,
) -> None:
    assert type(_app(tmp_path / "a").monitor) is LeanMonitor
    assert type(_app(tmp_path / "b", faust_views=True).monitor) is Monitor
