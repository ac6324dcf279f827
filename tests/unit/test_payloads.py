"""Webhook signatures, idempotency keys and the Slack message a person reads. Pure."""

from __future__ import annotations

import random

import pytest

from contract.outputs import Alert, AlertFigures, Holder, Workload
from contract.records import replace
from sinks.delivery import RetryPolicy
from sinks.payloads import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    idempotency_key,
    slack_message,
    verify,
    webhook_request,
)

H = Holder(
    "ml",
    "a",
    "c",
    "nvidia.com/gpu",
    ("GPU-1::0",),
    1,
    0.5,
    "0f3a9c12-aaaa",
    "resolved",
    Workload("Deployment", "train"),
)


def alert(status: str = "firing", holders: tuple[Holder, ...] = (H,)) -> Alert:
    return Alert(
        id="idle-abc",
        kind="idle",
        status=status,
        node="n1",
        device_uuid="GPU-1",  # type: ignore[arg-type]
        gpu_uuid="GPU-1",
        model="A100",
        mig=None,
        sharing="mps",
        holders=holders,
        figures=AlertFigures(util_pct=1.0, util_threshold_pct=5.0),
        window_s=60,
        started_ms=1,
        ts_ms=2,
        device_wide=len(holders) > 1,
        summary="idle: ...",
    )


def test_signature_verifies_and_detects_tampering() -> None:
    body, headers = webhook_request(b'{"schema":"alert"}', alert(), b"s3cret", 1_700_000_000)
    assert headers[IDEMPOTENCY_HEADER] == "idle-abc:firing"
    sig, key = headers[SIGNATURE_HEADER], headers[IDEMPOTENCY_HEADER]
    assert verify(b"s3cret", 1_700_000_000, key, body, sig)
    assert not verify(b"s3cret", 1_700_000_000, key, body + b" ", sig)
    assert not verify(b"other", 1_700_000_000, key, body, sig)
    assert not verify(b"s3cret", 1_700_000_001, key, body, sig)
    assert not verify(b"s3cret", 1_700_000_000, "idle-abc:resolved", body, sig)


def test_idempotency_key_separates_firing_and_resolved() -> None:
    assert idempotency_key(alert("firing")) != idempotency_key(alert("resolved"))
    assert idempotency_key(alert("firing")) == idempotency_key(alert("firing"))


def test_slack_message_names_owners_and_says_device_wide() -> None:
    shared = alert(holders=(H, Holder("ml", "b", "c", "nvidia.com/gpu", ("GPU-1::1",), 1, 0.5)))
    text = str(slack_message(shared))
    assert "`ml/a` (Deployment train)" in text
    assert "`ml/b`" in text
    assert "device-wide utilization" in text
    assert "allocation 50%" in text
    blocks = slack_message(alert("resolved"))["blocks"]
    assert blocks[0]["text"]["text"].startswith(":white_check_mark: Resolved")


@pytest.mark.parametrize("attempt", range(1, 12))
def test_backoff_grows_with_jitter_and_a_cap(attempt: int) -> None:
    policy = RetryPolicy(max_attempts=12, base_delay_s=0.5, max_delay_s=30)
    cap = min(30, 0.5 * 2 ** (attempt - 1))
    delays = {policy.delay(attempt, random.Random(seed)) for seed in range(20)}
    assert all(cap / 2 <= d <= cap for d in delays)
    assert len(delays) > 1  # jittered


@pytest.mark.parametrize(
    ("kind", "figures", "shown"),
    [
        pytest.param(
            "low-efficiency",
            AlertFigures(
                util_pct=100.0,
                busy_threshold_pct=50.0,
                effective_pct=3.0,
                effective_threshold_pct=15.0,
                effective_source="DCGM_FI_PROF_SM_ACTIVE",
            ),
            [
                ":turtle: low-efficiency",
                "utilization* 100% (threshold 50%)",
                "effective activity* 3% (DCGM_FI_PROF_SM_ACTIVE) (threshold 15%)",
            ],
            id="low-efficiency",
        ),
        pytest.param(
            "thermal",
            AlertFigures(gpu_temp_c=91.0, temp_threshold_c=85.0, thermal_throttle_pct=12.5),
            [":fire: thermal", "GPU temperature* 91 °C", "thermal throttling* 12.5%"],
            id="thermal",
        ),
        pytest.param(
            "memory-fault",
            AlertFigures(uncorrectable_remapped_rows=3.0, ecc_dbe_increase=2.0),
            [":boom: memory-fault", "remapped rows* 3", "double-bit ECC errors* +2"],
            id="memory-fault",
        ),
        pytest.param(
            "pcie-replays",
            AlertFigures(pcie_replays_per_min=40.0, pcie_threshold_per_min=8.0),
            [":electric_plug: pcie-replays", "PCIe replays* 40/min (threshold 8)"],
            id="pcie-replays",
        ),
        pytest.param(
            "some-future-kind", AlertFigures(), [":warning: some-future-kind"], id="unknown"
        ),
    ],
)
def test_slack_message_renders_every_kind(
    kind: str, figures: AlertFigures, shown: list[str]
) -> None:
    text = str(slack_message(replace(alert(), kind=kind, figures=figures)))  # type: ignore[arg-type]
    for part in shown:
        assert part in text
