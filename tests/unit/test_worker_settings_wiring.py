"""The worker's read-ahead settings reach the Faust app and the consumer they configure; its
demand-record interval reaches the demand stage."""

from __future__ import annotations

from pathlib import Path

import faust
import pytest

from infra.settings import AlertSettings, KafkaSettings, SpineSettings, WorkerSettings
from streams.worker.app import build_app


def _app(tmp_path: Path, **worker: object) -> faust.App:
    settings = WorkerSettings(data_dir=tmp_path, web_enabled=False, **worker)  # type: ignore[arg-type]
    return build_app(KafkaSettings(bootstrap="localhost:1"), settings, AlertSettings())


def test_read_ahead_settings_reach_faust_and_its_consumer(tmp_path: Path) -> None:
    app = _app(tmp_path, stream_buffer=17, fetch_bytes_per_partition=65_536)
    assert app.conf.stream_buffer_maxsize == 17
    assert app.conf.consumer_max_fetch_size == 65_536


def test_by_default_the_worker_reads_ahead_less_than_faust_would(tmp_path: Path) -> None:
    """Faust's own defaults let a worker on a backlog hold tens of MiB of unread input
    (bench.run): the worker's defaults replace them."""
    faust_defaults = faust.App("defaults-only").conf
    app = _app(tmp_path)
    assert app.conf.stream_buffer_maxsize < faust_defaults.stream_buffer_maxsize
    assert app.conf.consumer_max_fetch_size < faust_defaults.consumer_max_fetch_size


def test_read_ahead_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUATTR_WORKER_STREAM_BUFFER", "256")
    monkeypatch.setenv("GPUATTR_WORKER_FETCH_BYTES_PER_PARTITION", "262144")
    worker = WorkerSettings()
    assert (worker.stream_buffer, worker.fetch_bytes_per_partition) == (256, 262_144)
    with pytest.raises(ValueError, match="fetch_bytes_per_partition"):
        WorkerSettings(fetch_bytes_per_partition=1024)


def test_the_demand_record_interval_reaches_the_demand_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _app(tmp_path, demand_supply_every_s=3.5).demand_stage.every_ms == 3500
    assert _app(tmp_path).demand_stage.every_ms == 10_000  # shipped: coalesced
    monkeypatch.setenv("GPUATTR_WORKER_DEMAND_SUPPLY_EVERY_S", "0")
    assert WorkerSettings().demand_supply_every_s == 0.0  # every change: nothing coalesced
    with pytest.raises(ValueError, match="demand_supply_every_s"):
        WorkerSettings(demand_supply_every_s=-1)


def test_the_clock_jump_bound_reaches_both_stages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUATTR_SPINE_MAX_CLOCK_JUMP_S", "45")
    settings = WorkerSettings(data_dir=tmp_path, web_enabled=False)
    app = build_app(
        KafkaSettings(bootstrap="localhost:1"), settings, AlertSettings(), SpineSettings()
    )
    assert app.demand_stage.life.max_clock_jump_ms == 45_000
    assert SpineSettings.model_construct().max_clock_jump_s == 120.0  # shipped


def test_the_worker_compresses_its_batches_in_zstd_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attribution events are kilobytes of repeated JSON: compressed by default, with a codec
    the producer can load (aiokafka refuses one whose library is missing when it starts)."""
    from aiokafka.codec import has_zstd

    assert has_zstd()
    assert _app(tmp_path).conf.producer_compression_type == "zstd"
    assert _app(tmp_path, producer_compression="none").conf.producer_compression_type is None
    monkeypatch.setenv("GPUATTR_WORKER_PRODUCER_COMPRESSION", "lz4")
    assert WorkerSettings().producer_compression == "lz4"
    with pytest.raises(ValueError, match="producer_compression"):
        WorkerSettings(producer_compression="brotli")
