"""Coverage-guided fuzzing of the byte-level input edges with atheris (libFuzzer).

atheris is a dev dependency (pinned; binary wheels for CPython 3.11 on Linux x86-64). Each
target runs for a bounded number of inputs in a subprocess (libFuzzer ends its process when
done), seeded from realistic inputs:

* ``codec``: any bytes → a registered record or ``codec.DecodeError`` (seeds: fleet payloads);
* ``dcgm``: any text → ``parse_exposition`` never raises (seeds: the genuine captures);
* ``podresources``: any bytes → the protobuf parser refuses them or ``assignments_from_list``
  makes records the codec writes (seeds: serialized ``List`` replies);
* ``processor``: newline-separated payloads → decoded records into ``Processor.handle``, whose
  outputs must encode (seeds: a fleet stream). Not run by pytest (long campaigns only); the crashes
  it reached (Unicode digits, huge indexes) are fixed and pinned in ``test_fuzz_processor.py``.

A longer campaign: ``python -m tests.unit.test_fuzz_atheris <target> -max_total_time=600``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "tests" / "fixtures" / "dcgm-exporter"
INSTRUMENTED = ("gpuattr", "agents", "streams", "sinks", "prometheus_client.parser")


def _seed_corpus(target: str, directory: Path) -> None:
    from bench import fleet
    from contract import codec
    from contract.inputs import DeviceAssignment
    from sim.podresources_replies import list_response

    directory.mkdir(parents=True, exist_ok=True)
    records = list(fleet.stream(4, 1, start_ms=1_700_000_000_000))
    if target == "codec":
        seeds = [codec.encode(r) for r in records[::7]]
    elif target == "dcgm":
        seeds = [p.read_bytes() for p in sorted(CAPTURES.glob("*.prom"))]
    elif target == "podresources":
        rows = [
            DeviceAssignment("ml", f"p{i}", "c", "nvidia.com/gpu", f"GPU-{i}::1") for i in range(3)
        ]
        seeds = [list_response(rows).SerializeToString(), b""]
    else:
        seeds = [b"\n".join(codec.encode(r) for r in records[:40])]
    for i, seed in enumerate(seeds):
        (directory / f"seed-{i}").write_bytes(seed)


def _targets() -> dict[str, Callable[[bytes], None]]:
    from google.protobuf.message import DecodeError

    from agents.dcgm.translate import parse_exposition
    from agents.podresources.translate import assignments_from_list
    from contract import codec
    from contract.inputs import PodResourcesSnapshot
    from proto.podresources.v1 import api_pb2 as pb
    from streams.core.flow.processor import Processor, Tables

    def codec_target(data: bytes) -> None:
        try:
            record = codec.decode(data)
        except codec.DecodeError:
            return
        codec.encode(record)

    def dcgm_target(data: bytes) -> None:
        parse_exposition(data.decode("utf-8", errors="replace"), node="n", ts_ms=1)

    def podresources_target(data: bytes) -> None:
        try:
            message = pb.ListPodResourcesResponse.FromString(data)
        except DecodeError:
            return
        snapshot = PodResourcesSnapshot("n", 1, assignments_from_list(message))
        assert codec.decode(codec.encode(snapshot)) == snapshot

    def processor_target(data: bytes) -> None:
        proc = Processor(Tables.in_memory())
        for chunk in data.split(b"\n"):
            try:
                record = codec.decode(chunk)
            except codec.DecodeError:
                continue
            if codec.kind_of(record).kind in (
                "podresources.snapshot",
                "podresources.diff",
                "dcgm.sample",
                "k8s.pod",
                "k8s.pod-list",
                "k8s.node",
                "inventory",
            ):
                for out in proc.handle(record):
                    codec.encode(out)

    return {
        "codec": codec_target,
        "dcgm": dcgm_target,
        "podresources": podresources_target,
        "processor": processor_target,
    }


def main(argv: list[str]) -> None:
    import atheris  # type: ignore[import-untyped,unused-ignore]

    target = argv[1]
    with atheris.instrument_imports(include=list(INSTRUMENTED)):
        targets = _targets()
    atheris.Setup([argv[0], *argv[2:]], targets[target])
    atheris.Fuzz()


@pytest.mark.parametrize("target", ["codec", "dcgm", "podresources"])
def test_coverage_guided_campaign_finds_no_crash(target: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    _seed_corpus(target, corpus)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.unit.test_fuzz_atheris",
            target,
            "-runs=20000",
            "-max_total_time=8",
            "-max_len=4096",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Done" in result.stderr or "DONE" in result.stderr, result.stderr[-2000:]


if __name__ == "__main__":
    main(sys.argv)
