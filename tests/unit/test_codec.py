"""The codec: every record round-trips; poison payloads become DecodeError, never a crash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract import codec
from contract.inputs import (
    DcgmSample,
    DeviceAssignment,
    ExporterClaim,
    PodResourcesDiff,
    PodResourcesSnapshot,
)
from streams.core.flow.state import TABLE_CODEC

text = st.text(max_size=20)
assignment = st.builds(DeviceAssignment, text, text, text, text, text)
floats = st.none() | st.floats(allow_nan=False, allow_infinity=False)
claims = st.lists(
    st.builds(ExporterClaim, text, text, text, st.none() | text, st.none() | text), max_size=3
).map(tuple)
samples = st.builds(
    DcgmSample,
    node=text,
    ts_ms=st.integers(0, 2**53),
    uuid=text,
    gpu_index=st.none() | st.integers(0, 64),
    model=text,
    hostname=text,
    mig_instance_id=st.none() | st.integers(0, 14),
    util_pct=floats,
    fb_used_mib=floats,
    xid=st.none() | st.integers(0, 200),
    exporter_claims=claims,
)


@given(samples)
def test_sample_round_trip(record: DcgmSample) -> None:
    assert codec.decode(codec.encode(record)) == record


@given(
    text,
    st.integers(0, 2**53),
    st.lists(assignment, max_size=5).map(tuple),
    st.lists(assignment, max_size=5).map(tuple),
)
def test_diff_and_snapshot_round_trip(
    node: str, ts: int, added: tuple[DeviceAssignment, ...], removed: tuple[DeviceAssignment, ...]
) -> None:
    for record in (
        PodResourcesDiff(node, ts, added, removed),
        PodResourcesSnapshot(node, ts, added),
    ):
        assert codec.decode(codec.encode(record)) == record


def test_payload_carries_kind_and_version() -> None:
    payload = codec.to_dict(PodResourcesSnapshot("n", 1, ()))
    assert (payload["schema"], payload["v"]) == ("podresources.snapshot", 1)


@pytest.mark.parametrize("codec_", [codec.WIRE, TABLE_CODEC], ids=["wire", "tables"])
def test_an_unregistered_record_is_refused_by_name(codec_: codec.Codec) -> None:
    with pytest.raises(TypeError, match=r"^ExporterClaim is not a registered record$"):
        codec_.encode(ExporterClaim("a", "b", "c", None, None))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        pytest.param(b"\x00\xff garbage", "not JSON", id="binary"),
        pytest.param(b"[1,2]", "not an object", id="array"),
        pytest.param(b'{"schema":"nope","v":1}', "unknown record kind", id="unknown-kind"),
        pytest.param(b'{"schema":"dcgm.sample","v":99}', "not supported", id="future-version"),
        pytest.param(b'{"schema":"podresources.diff","v":1,"node":"n"}', "ts_ms", id="missing"),
    ],
)
def test_poison_payloads_are_decode_errors(payload: bytes, reason: str) -> None:
    with pytest.raises(codec.DecodeError, match=reason):
        codec.decode(payload)


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_random_bytes_are_a_record_or_a_decode_error(payload: bytes) -> None:
    try:
        record = codec.decode(payload)
    except codec.DecodeError as exc:
        assert str(exc)  # noqa: PT017  (always says why)
    else:
        assert type(record) in {rt.cls for rt in codec.REGISTRY.values()}


def test_table_state_round_trips() -> None:
    from contract.inputs import DeviceAssignment as A
    from streams.core.alerts.alerts import DeviceAlerts, Episode
    from streams.core.devices.holders import apply_podresources
    from streams.core.devices.identity import Inventory, MigDevice
    from streams.core.node.pods import NodePods, PodLife, PodNames

    inv = Inventory({0: "GPU-a", 3: "GPU-b"}, {"MIG-1": MigDevice("MIG-1", "GPU-b", 7, "1g.10gb")})
    index, holders = apply_podresources(
        None, {}, PodResourcesSnapshot("n", 1, (A("ns", "p", "c", "nvidia.com/gpu", "GPU-a"),))
    )
    states = [
        inv,
        index,
        *holders.values(),
        PodNames((PodLife("u", 1, 2),)),
        NodePods(("a/b",)),
        DeviceAlerts(idle=Episode(5, firing=True), last_xid=79),
    ]
    for state in states:
        assert TABLE_CODEC.decode(TABLE_CODEC.encode(state)) == state
