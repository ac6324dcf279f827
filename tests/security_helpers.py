"""Shared by the security tests: the secrets that must never leak, and one alert to send.

Every value in ``SECRETS`` is searched for in logs, reprs and records by
``tests/unit/test_security_secrets.py``; ``SECRET`` signs webhooks in
``tests/unit/test_security_webhooks.py``.
"""

from __future__ import annotations

from contract.outputs import Alert, AlertFigures, Holder

SECRET = b"whsec-Hk29Lm-signing-key"
SASL_PASSWORD = "sasl-pw-Zq8x7Yw-do-not-log"
WEBHOOK_SECRET = "whsec-Hk29Lm-do-not-log"
SLACK_TOKEN = "xoxSLACKTOKEN12345abc"
WEBHOOK_TOKEN = "hooktoken98765xyz"
SECRETS = (SASL_PASSWORD, WEBHOOK_SECRET, SLACK_TOKEN, WEBHOOK_TOKEN)


def make_alert(status: str = "firing") -> Alert:
    return Alert(
        id="idle-0123456789abcdef01234567",
        kind="idle",
        status=status,  # type: ignore[arg-type]
        node="gpu-node-1",
        device_uuid="GPU-8b2c4a51",
        gpu_uuid="GPU-8b2c4a51",
        model="NVIDIA A100",
        mig=None,
        sharing="mps",
        holders=(
            Holder("ml", "a", "main", "nvidia.com/gpu", ("GPU-8b2c4a51::0",), 1, 0.25, "uid-a"),
            Holder("ml", "b", "main", "nvidia.com/gpu", ("GPU-8b2c4a51::1",), 1, 0.25, "uid-b"),
        ),
        figures=AlertFigures(util_pct=1.0, util_threshold_pct=5.0),
        window_s=1800.0,
        started_ms=1_700_000_000_000,
        ts_ms=1_700_000_900_000,
        device_wide=True,
        summary="idle: 2 tenants sharing GPU-8b2c4a51 (device-wide figure)",
    )
