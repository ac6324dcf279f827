"""dcgm-exporter text → samples: labels and values.

Lowercase ``hostname``, virtual-GPU copies taken once, exported pod labels and ``pod_uid``,
empty pod labels, NaN and unknown fields, and per-process rows recognised and left out of the
device-wide reading.
"""

from __future__ import annotations

from contract.inputs import ExporterClaim
from tests.dcgm_captures import GPU, parse, row

# -- labels and values -----------------------------------------------------------------------------


def test_lowercase_hostname_label_is_accepted() -> None:
    labels = {**GPU, "hostname": "node-9"}
    del labels["Hostname"]
    (sample,) = parse(row("DCGM_FI_DEV_GPU_TEMP", "40", **labels)).samples
    assert (sample.hostname, sample.temp_c) == ("node-9", 40)


def test_virtual_gpu_copies_are_one_sample_with_values_taken_once() -> None:
    text = "".join(
        row(name, value, **GPU, container="c", namespace="ns", pod=f"p{i}", vgpu=str(i))
        for name, value in (("DCGM_FI_DEV_GPU_UTIL", "30"), ("DCGM_FI_DEV_FB_USED", "1000"))
        for i in range(4)
    )
    (sample,) = parse(text).samples
    assert (sample.util_pct, sample.fb_used_mib) == (30, 1000)  # not 120 / 4000
    assert sample.exporter_claims == tuple(
        ExporterClaim("ns", f"p{i}", "c", vgpu=str(i)) for i in range(4)
    )
    assert (len(sample.exporter_claims), sample.exporter_split_fields) == (4, ())


def test_exported_pod_labels_and_pod_uid() -> None:
    text = row(
        "DCGM_FI_DEV_GPU_UTIL",
        "1",
        **GPU,
        exported_container="c",
        exported_namespace="ns",
        exported_pod="p",
        pod_uid="",
    ) + row("DCGM_FI_DEV_GPU_UTIL", "1", **GPU, container="d", namespace="ns", pod="q", pod_uid="u")
    (sample,) = parse(text).samples
    assert sample.exporter_claims == (
        ExporterClaim("ns", "p", "c", pod_uid=None),
        ExporterClaim("ns", "q", "d", pod_uid="u"),
    )


def test_empty_pod_label_is_no_claim() -> None:
    text = row("DCGM_FI_DEV_GPU_UTIL", "1", **GPU, container="", namespace="", pod="")
    (sample,) = parse(text).samples
    assert sample.exporter_claims == ()


def test_nan_is_no_reading_and_unknown_fields_are_ignored() -> None:
    text = (
        row("DCGM_FI_DEV_GPU_UTIL", "NaN", **GPU)
        + row("DCGM_FI_DEV_SM_CLOCK", "1440", **GPU)
        + row("DCGM_FI_DEV_XID_ERRORS", "43", **GPU)
        + row("go_goroutines", "7")
    )
    (sample,) = parse(text).samples
    assert (sample.util_pct, sample.xid) == (None, 43)


def test_per_process_rows_are_recognised_and_left_out() -> None:
    text = "".join(
        row(name, value(i), **GPU, container="c", namespace="ns", pod=f"p{i}")
        for name, value in (
            ("DCGM_FI_DEV_GPU_UTIL", lambda i: str(10 * (i + 1))),
            ("DCGM_FI_DEV_GPU_TEMP", lambda i: "40"),
        )
        for i in range(3)
    )
    (sample,) = parse(text).samples
    assert sample.exporter_split_fields == ("util_pct",)
    assert sample.util_pct is None  # 10/20/30 per process: not a device-wide reading
    assert sample.temp_c == 40  # identical copies stay
    assert len(sample.exporter_claims) == 3
