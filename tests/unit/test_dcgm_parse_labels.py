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
    exported = row(
        "DCGM_FI_DEV_GPU_UTIL",
        "1",
        **GPU,
        exported_container="c",
        exported_namespace="ns",
        exported_pod="p",
        pod_uid="",
    )
    plain = row(
        "DCGM_FI_DEV_GPU_UTIL", "1", **GPU, container="d", namespace="ns", pod="q", pod_uid="u"
    )
    claims = [parse(text).samples[0].exporter_claims for text in (exported, plain)]
    assert claims == [
        (ExporterClaim("ns", "p", "c", pod_uid=None),),
        (ExporterClaim("ns", "q", "d", pod_uid="u"),),
    ]


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


# -- --use-old-namespace and the 1.x counters file ---------------------------------------------

OLD = {"gpu": "0", "uuid": "GPU-1", "device": "nvidia0", "modelName": "Tesla T4", "Hostname": "h"}
OLD_POD = {"pod_namespace": "ml", "pod_name": "train-0", "container_name": "trainer"}


def test_old_namespace_labels_with_the_default_field_names() -> None:
    text = row("DCGM_FI_DEV_GPU_UTIL", "71", **OLD, **OLD_POD) + row(
        "DCGM_FI_DEV_FB_USED", "9000", **OLD, **OLD_POD
    )
    result = parse(text)
    assert result.rejected == ()
    (sample,) = result.samples
    assert (sample.uuid, sample.util_pct, sample.fb_used_mib) == ("GPU-1", 71, 9000)
    assert sample.exporter_claims == (ExporterClaim("ml", "train-0", "trainer"),)


def test_old_namespace_with_the_1x_counters_file() -> None:
    old_builds = {"pod_namespace": "ml", "pod_name": "train-0", "pod_container_name": "trainer"}
    text = "".join(
        row(name, value, **OLD, **old_builds)
        for name, value in (
            ("dcgm_gpu_utilization", "12"),
            ("dcgm_fb_used", "512"),
            ("dcgm_fb_free", "14848"),
            ("dcgm_power_usage", "31.5"),
            ("dcgm_gpu_temp", "44"),
            ("dcgm_xid_errors", "0"),
            ("dcgm_fi_prof_gr_engine_active", "0.12"),
            ("dcgm_sm_clock", "1590"),
            ("dcgm_memory_clock", "5000"),
        )
    )
    result = parse(text)
    assert result.rejected == ()
    (sample,) = result.samples
    assert (sample.util_pct, sample.fb_used_mib, sample.fb_free_mib) == (12, 512, 14848)
    assert (sample.power_w, sample.temp_c, sample.xid, sample.gr_engine_active) == (
        31.5,
        44,
        0,
        0.12,
    )
    assert sample.sm_clock_mhz == 1590
    assert sample.exporter_claims == (ExporterClaim("ml", "train-0", "trainer"),)
    assert [(f.name, f.reason) for f in result.ignored] == [
        ("dcgm_memory_clock", "a DCGM field gpuattr does not use")
    ]


def test_families_read_but_not_used_are_reported_with_their_reason() -> None:
    text = (
        row("DCGM_FI_DEV_GPU_UTIL", "5", **GPU)
        + row("DCGM_FI_DEV_MEM_CLOCK", "405", **GPU)
        + row("node_cpu_seconds_total", "1", cpu="0")
    )
    result = parse(text)
    assert len(result.samples) == 1
    assert {(f.name, f.reason) for f in result.ignored} == {
        ("DCGM_FI_DEV_MEM_CLOCK", "a DCGM field gpuattr does not use"),
        ("node_cpu_seconds_total", "not a DCGM field"),
    }
