"""The doctor's clock probe: written to the ``doctor`` topic, read by nobody."""

from __future__ import annotations

from contract.records import Record


class DoctorProbe(Record, frozen=True):
    """One ``gpuattr doctor`` run's record: the broker stamps its append time on it, which the
    doctor compares with this host's clock at send and acknowledgement."""

    role: str
    sent_ms: int


KINDS: dict[str, tuple[type, int]] = {"doctor.probe": (DoctorProbe, 1)}
