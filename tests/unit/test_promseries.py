"""Attribution series for Prometheus: identity in info series, device-wide figures only, bounded
by live devices; rendered and parsed back with prometheus_client."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from streams.present.views import device_row
from streams.worker.promexport import exposition
from tests.unit.test_processor_dra import EVENTS, GPU, MIG7


def parsed(rows: list) -> dict[str, list[tuple[dict[str, str], float]]]:  # type: ignore[type-arg]
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(exposition(rows).decode()):
        out[family.name] = [(s.labels, s.value) for s in family.samples]
    return out


ROWS = [device_row(ev, None) for ev in EVENTS.values()]
SERIES = parsed(ROWS)


def test_every_device_has_one_info_series_with_its_identity() -> None:
    info = {labels["device_uuid"]: labels for labels, _ in SERIES["gpuattr_device_info"]}
    assert set(info) == set(EVENTS)
    shared = info[GPU[1]]
    assert (shared["sharing"], shared["state"], shared["allocation"]) == (
        "time-slicing",
        "shared",
        "dra",
    )
    assert info[MIG7]["mig_instance"] == "7"
    assert all(value == 1.0 for _, value in SERIES["gpuattr_device_info"])


def test_holders_are_info_series_with_uids_and_claims() -> None:
    holders = [
        labels
        for labels, _ in SERIES["gpuattr_device_holder_info"]
        if labels["device_uuid"] == GPU[1]
    ]
    assert sorted((h["pod"], h["pod_uid"], h["claim"]) for h in holders) == [
        ("infer-a", "uid-infer-a", "ml/infer"),
        ("infer-b", "uid-infer-b", "ml/infer"),
        ("infer-c", "uid-infer-c", "ml/infer"),
    ]


def test_each_pod_has_one_share_series_per_device_with_its_basis() -> None:
    shares = {
        (labels["device_uuid"], labels["pod"]): (value, labels["basis"])
        for labels, value in SERIES["gpuattr_pod_device_share"]
    }
    assert len(shares) == len(SERIES["gpuattr_pod_device_share"])  # unique label sets
    # a claim shared by three pods: no finer split exists, so each is a third, said as such
    for pod in ("infer-a", "infer-b", "infer-c"):
        value, basis = shares[(GPU[1], pod)]
        assert (round(value, 4), basis) == (0.3333, "equal-split")
    named = {k[1]: shares[k][0] for k in shares if k[1] in ("cc-a", "cc-b", "train-0")}
    assert named == {"cc-a": 0.25, "cc-b": 0.5, "train-0": 1.0}
    per_device: dict[str, float] = {}
    for (device, _), (value, _) in shares.items():
        per_device[device] = per_device.get(device, 0.0) + value
    assert all(total <= 1.0 + 1e-6 for total in per_device.values())


def test_no_usage_series_names_a_pod() -> None:
    for name in ("gpuattr_device_utilization_ratio", "gpuattr_device_memory_used_bytes"):
        for labels, _ in SERIES[name]:
            assert set(labels) == {"node", "device_uuid", "scope"}
    util = {labels["device_uuid"]: v for labels, v in SERIES["gpuattr_device_utilization_ratio"]}
    assert util[GPU[1]] == 0.5  # the device's figure
    tenants = {labels["device_uuid"]: v for labels, v in SERIES["gpuattr_device_tenants"]}
    assert tenants[GPU[1]] == 3.0


def test_no_devices_no_series() -> None:
    assert all(samples == [] for samples in parsed([]).values())


def test_each_device_says_what_the_exporters_labels_amount_to() -> None:
    verdicts = {
        labels["device_uuid"]: (labels["verdict"], labels["mode"])
        for labels, _ in SERIES["gpuattr_device_exporter_verdict"]
    }
    assert set(verdicts) == set(EVENTS)  # one series per device, never per sample or per pod
    for uuid, ev in EVENTS.items():
        assert verdicts[uuid] == (ev.exporter.verdict, ev.exporter.mode)
    assert all(value == 1.0 for _, value in SERIES["gpuattr_device_exporter_verdict"])
