"""Times as the API server writes them."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(epoch_s: float) -> str:
    return datetime.fromtimestamp(int(epoch_s), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
