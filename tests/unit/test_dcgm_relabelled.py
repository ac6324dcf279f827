"""dcgm-exporter pages as Prometheus writes them back (honor_labels=false): the golden captures
relabelled, and the pod they credit.

A PodMonitor scrape of the exporter adds its target's labels: the exporter pod's own
``namespace``/``pod``/``container``, and ``instance``/``job``. Where the exporter already wrote
one of them, Prometheus keeps the exporter's value as ``exported_<name>``. A federated or
read-back page therefore names the holder under ``exported_*`` and the exporter itself under the
plain names; the samples must be those of the page the exporter served.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contract.inputs import ExporterClaim
from tests.dcgm_captures import FIXTURES, GPU, as_json, golden, parse, row

#: the exporter pod's own target labels, as a PodMonitor of the GPU Operator's exporter has them
TARGET = {
    "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-ml2wh",
    "container": "nvidia-dcgm-exporter",
    "instance": "10.0.3.7:9400",
    "job": "gpu-operator/nvidia-dcgm-exporter",
}
_CLASH = re.compile(r"(?<=[{,])(namespace|pod|container)=")


def relabelled(text: str) -> str:
    """``text`` as Prometheus stores it with honor_labels=false: clashing labels renamed
    ``exported_*``, then the target's labels added to every sample."""
    target = ",".join(f'{k}="{v}"' for k, v in TARGET.items())
    out = []
    for line in text.splitlines(keepends=True):
        if line.strip() and not line.startswith("#") and "{" in line:
            line = _CLASH.sub(r"exported_\1=", line).replace("}", f",{target}}}", 1)
        out.append(line)
    return "".join(out)


HOLDING = [p for p in FIXTURES if 'pod="' in p.read_text()]


def test_the_relabelled_captures_include_pages_that_name_holders() -> None:
    assert {p.name[:2] for p in HOLDING} >= {"02", "03"}


@pytest.mark.parametrize("path", HOLDING, ids=lambda p: p.stem)
def test_a_relabelled_capture_parses_to_the_golden_samples_of_the_original(path: Path) -> None:
    text = relabelled(path.read_text())
    assert "exported_pod=" in text
    result = parse(text)
    assert result.rejected == ()
    got = as_json(result.samples)
    assert got == golden(path.stem, got)
    assert all(claim.pod != TARGET["pod"] for s in result.samples for claim in s.exporter_claims)


@pytest.mark.parametrize(
    ("labels", "claims"),
    [
        pytest.param(
            {"exported_namespace": "ml", "exported_pod": "train-0", "exported_container": "c"},
            (ExporterClaim("ml", "train-0", "c"),),
            id="exported-holder-beside-the-target-labels",
        ),
        pytest.param(
            {"exported_namespace": "ml", "exported_pod": "train-0", "pod_uid": "u-1"},
            (ExporterClaim("ml", "train-0", "", pod_uid="u-1"),),
            id="pod-uid-clashes-with-no-target-label",
        ),
        pytest.param(
            {"pod_namespace": "ml", "pod_name": "train-0", "container_name": "c"},
            (ExporterClaim("ml", "train-0", "c"),),
            id="use-old-namespace-holder-beside-the-target-labels",
        ),
    ],
)
def test_the_target_labels_are_never_the_holder(
    labels: dict[str, str], claims: tuple[ExporterClaim, ...]
) -> None:
    (sample,) = parse(row("DCGM_FI_DEV_GPU_UTIL", "1", **GPU, **labels, **TARGET)).samples
    assert sample.exporter_claims == claims


def test_a_free_gpu_on_a_relabelled_page_is_credited_to_nobody() -> None:
    """The holder's GPU names it under ``exported_pod``; the free GPU beside it has only the
    target labels, the exporter's own pod."""
    held = {**GPU, "exported_namespace": "ml", "exported_pod": "train-0"}
    free = {**GPU, "gpu": "1", "UUID": "GPU-2", "device": "nvidia1"}
    text = row("DCGM_FI_DEV_GPU_UTIL", "1", **held, **TARGET) + row(
        "DCGM_FI_DEV_GPU_UTIL", "0", **free, **TARGET
    )
    by_uuid = {s.uuid: s.exporter_claims for s in parse(text).samples}
    assert by_uuid == {"GPU-1": (ExporterClaim("ml", "train-0", ""),), "GPU-2": ()}
