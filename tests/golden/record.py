"""Golden inputs and outputs of the worker's pure core: every demo scenario and the bench fleet.

``python -m tests.golden.record [names]`` writes ``tests/golden/<name>.inputs.jsonl.gz`` (what
the agents and the cluster role publish, in order, each with its topic, partition and key; the
value in :mod:`contract.codec`) and ``<name>.outputs.jsonl.gz`` (what the worker's core makes
of them, :func:`replay`); ``--check`` makes both afresh in memory and names the files that
differ, writing nothing (exit 1 on a difference).

Inputs:
- each scenario of ``sim/scenarios`` as its agents would publish it over its own horizon
  (:mod:`tests.golden.scripted`);
- the golden-only scenarios of ``tests/golden/scenarios`` with the agent faults :data:`EXTRA`
  gives them: exporter-misattribution flags, refused telemetry and a retired node-status, which
  no demo scenario makes;
- the bench fleet (:func:`bench.fleet.stream`) at a reduced size, 60 nodes x 8 intervals of 5 s
  (every sharing mode, two pod hand-overs per node; :mod:`bench.core` runs 250 x 8 of the same
  fleet), every record read from partition 0 as :mod:`bench.core` feeds it.

Outputs: everything :class:`~streams.core.flow.processor.Processor` returns on in-memory
tables; the node supply it emits fed on at once to
:class:`~streams.core.flow.demandstage.DemandStage` (as the worker's second agent reads it from
demand-events, in the partition of its key), the demand-events inputs fed to the stage; and
the dead letter's reason for any record refused. Each output line holds the index of the input
that caused it, its kind, its Kafka key and its value as the worker sends it (``null``: a
tombstone). The scenarios run on the demo's worker settings (:data:`gpuattr.demo.DEMO_ALERTS`,
:data:`gpuattr.demo.DEMO_SPINE`), the fleet on :mod:`bench.core`'s; everything else is the
settings' defaults.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from bench.fleet import stream
from contract import codec
from contract.inputs import NodeSupply
from gpuattr.demo import DEMO_ALERTS, DEMO_SPINE
from infra.settings import AlertSettings, SpineSettings, WorkerSettings
from sim.scenario import builtin_names, load
from streams.core.flow.demandstage import (
    DemandClockJump,
    DemandStage,
    DemandTables,
    UnusableDemandRecord,
)
from streams.core.flow.processor import ClockJump, Processor, Tables, UnusableRecord
from streams.worker.app import Published as Output
from streams.worker.app import lifetimes_of, output_key, output_value
from tests.golden.scripted import AgentFaults, Published, partition_for, scenario_inputs

FOLDER = Path(__file__).parent
BENCH = "bench-fleet"
#: golden-only scenarios (``tests/golden/scenarios``): the outputs no demo scenario makes, with
#: the agent faults that make them
EXTRA = {
    "edges": {"edge-a": AgentFaults(exporter_lag_s=6.0, misrouted=("edge-b", 40.0, 50.0))},
}
BENCH_NODES, BENCH_INTERVALS = 60, 8
BENCH_START_MS = 1_700_000_000_000
BENCH_IDLE_WINDOW_S = 20.0  # bench.core's


def names() -> list[str]:
    return [*builtin_names(), *EXTRA, BENCH]


def _settings(prefix: str, values: dict[str, str]) -> dict[str, Any]:
    return {k.removeprefix(prefix).lower(): float(v) for k, v in values.items()}


def worker_of(name: str) -> tuple[Processor, DemandStage]:
    """The core as the worker that reads ``name``'s inputs runs it, on in-memory tables."""
    if name == BENCH:
        alerts = AlertSettings.model_construct(idle_window_s=BENCH_IDLE_WINDOW_S)
        processor = Processor(Tables.in_memory(), alerts)
        window = BENCH_IDLE_WINDOW_S
        life = None
    else:
        alerts = AlertSettings.model_construct(**_settings("GPUATTR_ALERTS_", DEMO_ALERTS))
        life = lifetimes_of(
            SpineSettings.model_construct(**_settings("GPUATTR_SPINE_", DEMO_SPINE))
        )
        processor = Processor(Tables.in_memory(), alerts, life)
        window = alerts.demand_window_s
    every = WorkerSettings.model_construct().demand_supply_every_s
    return processor, DemandStage(DemandTables(), window, every, life)


# --- inputs


def bench_inputs() -> Iterator[Published]:
    """The bench fleet as :mod:`bench.core` feeds it: every record read from partition 0."""
    for record in stream(BENCH_NODES, BENCH_INTERVALS, start_ms=BENCH_START_MS):
        yield Published("node-events", 0, record.node.encode(), record)


def inputs_of(name: str) -> Iterator[Published]:
    if name == BENCH:
        return bench_inputs()
    if name in EXTRA:
        return scenario_inputs(load(str(FOLDER / "scenarios" / f"{name}.toml")), EXTRA[name])
    return scenario_inputs(load(name))


def input_line(p: Published) -> bytes:
    value = codec.encode(p.record)
    head = {"topic": p.topic, "partition": p.partition, "key": _text(p.key)}
    return orjson.dumps({**head, "value": orjson.Fragment(value)})


def read_input(line: bytes) -> tuple[Published, bytes]:
    """An input line: the input, and its value as the topic carries it."""
    doc = orjson.loads(line)
    value = orjson.dumps(doc["value"])
    key = doc["key"].encode() if doc["key"] is not None else None
    return Published(doc["topic"], doc["partition"], key, codec.decode(value)), value


def _text(key: bytes | None) -> str | None:
    return key.decode() if key is not None else None


# --- outputs


def _line(index: int, kind: str, key: bytes | None, value: bytes | None) -> bytes:
    """``value`` None: a tombstone (a retired node-status or pool)."""
    json = orjson.Fragment(value) if value is not None else None
    return orjson.dumps({"i": index, "kind": kind, "key": _text(key), "value": json})


def _output(index: int, out: Output) -> bytes:
    """An output as the worker sends it: its key and value on its topic."""
    return _line(index, type(out).__name__, output_key(out), output_value(out))


def _dead(index: int, key: bytes | None, error: str) -> bytes:
    return _line(index, "DeadLetter", key, orjson.dumps(error))


def replay(name: str, inputs: Iterable[Published]) -> Iterator[bytes]:
    """Each input through the core in order; one line per output (module docstring)."""
    processor, stage = worker_of(name)
    for index, p in enumerate(inputs):
        if p.topic == "demand-events":
            yield from _demand(stage, index, p.record, p.partition, p.key)
            continue
        try:
            outputs = processor.handle(p.record, p.partition)
        except ClockJump as exc:
            yield _dead(index, p.key, f"refused: {exc}")
            continue
        except UnusableRecord as exc:
            yield _dead(index, p.key, f"unusable: {exc}")
            continue
        for out in outputs:
            yield _output(index, out)
        for out in outputs:
            if isinstance(out, NodeSupply):
                key = output_key(out)
                yield from _demand(stage, index, out, partition_for(key), key)


def _demand(
    stage: DemandStage, index: int, record: Any, partition: int, key: bytes | None
) -> Iterator[bytes]:
    try:
        outputs = stage.handle(record, partition, key)
    except DemandClockJump as exc:
        yield _dead(index, key, f"refused: {exc}")
        return
    except UnusableDemandRecord as exc:
        yield _dead(index, key, f"unusable: {exc}")
        return
    for out in outputs:
        yield _output(index, out)


# --- files


def paths(name: str) -> tuple[Path, Path]:
    return FOLDER / f"{name}.inputs.jsonl.gz", FOLDER / f"{name}.outputs.jsonl.gz"


def read_lines(path: Path) -> list[bytes]:
    with gzip.open(path, "rb") as f:
        return f.read().splitlines()


def _gz(lines: list[bytes]) -> bytes:
    # mtime 0 and no file name: the same lines give the same bytes
    return gzip.compress(b"".join(line + b"\n" for line in lines), compresslevel=9, mtime=0)


def generate(name: str) -> tuple[list[bytes], list[bytes]]:
    """The input lines made afresh and the output lines replayed from them (as read back)."""
    inputs = [input_line(p) for p in inputs_of(name)]
    return inputs, list(replay(name, (read_input(line)[0] for line in inputs)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("names", nargs="*", help=f"default: all ({', '.join(names())})")
    args = parser.parse_args(argv)
    differ = []
    for name in args.names or names():
        inputs, outputs = generate(name)
        for path, lines in zip(paths(name), (inputs, outputs), strict=True):
            if args.check:
                if not path.exists() or read_lines(path) != lines:
                    differ.append(path.name)
                continue
            path.write_bytes(_gz(lines))
        print(f"{name}: {len(inputs)} inputs, {len(outputs)} outputs", file=sys.stderr)
    if differ:
        print(f"differ from the files: {', '.join(differ)}", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
