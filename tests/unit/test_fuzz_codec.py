"""Fuzz the codec's ``decode``: whatever arrives on a topic is a record or a ``DecodeError``.

Starting points are valid payloads of *every* registered kind (agent inputs, worker outputs,
table state, sink failures) and realistic fleet records; they are then mutated at the JSON
level (fields removed, renamed, given values of the wrong type, unknown fields, another kind,
another version) and at the byte level (truncated, garbage inserted, bytes flipped). The worker
dead-letters a ``DecodeError`` and keeps going; any other exception type would escape its
``except codec.DecodeError`` and stop the partition.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bench import fleet as bench_fleet
from contract import codec, delivery, inputs, outputs
from streams.core.flow import state
from tests.fuzz_strategies import START_MS, agent_records, json_values

#: the machinery behind the wire codec and the worker's table codec, over every kind of both
ALL = codec.Codec(inputs.KINDS, outputs.KINDS, delivery.KINDS, state.KINDS)

REGISTERED = {rt.cls for rt in ALL.registry.values()}
KINDS = sorted(ALL.registry)
FLEET_PAYLOADS = [ALL.encode(r) for r in bench_fleet.stream(4, 1, start_ms=START_MS)]


@st.composite
def any_registered_record(draw: st.DrawFn) -> bytes:
    """A valid payload of any registered kind, built by Hypothesis from the dataclass types."""
    rt = ALL.registry[draw(st.sampled_from(KINDS))]
    record = draw(st.from_type(rt.cls))
    try:
        return ALL.encode(record)
    except TypeError:  # an int beyond 64 bits: not something a writer could have sent
        assume(False)
        raise


valid_payloads = st.one_of(
    st.sampled_from(FLEET_PAYLOADS), agent_records.map(ALL.encode), any_registered_record()
)


def _containers(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every dict and list inside a decoded payload (the root included)."""
    out: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        out.append(path)
        for k, v in node.items():
            out += _containers(v, (*path, k))
    elif isinstance(node, list):
        out.append(path)
        for i, v in enumerate(node):
            out += _containers(v, (*path, i))
    return out


def _at(root: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        root = root[step]
    return root


@st.composite
def json_mutations(draw: st.DrawFn) -> bytes:
    data = orjson.loads(draw(valid_payloads))
    for _ in range(draw(st.integers(1, 4))):
        target = _at(data, draw(st.sampled_from(_containers(data))))
        op = draw(st.sampled_from(["delete", "retype", "add", "rename", "kind", "version"]))
        if op == "kind":
            data["schema"] = draw(st.one_of(st.sampled_from(KINDS), json_values))
        elif op == "version":
            data["v"] = draw(
                st.one_of(st.sampled_from([0, 2, -1, "1", 1.5, None, True]), json_values)
            )
        elif isinstance(target, dict) and target:
            key = draw(st.sampled_from(sorted(target)))
            if op == "delete":
                del target[key]
            elif op == "retype":
                target[key] = draw(json_values)
            elif op == "rename":
                target[draw(st.text(max_size=8))] = target.pop(key)
            else:
                target[draw(st.text(max_size=8))] = draw(json_values)
        elif isinstance(target, list) and target:
            i = draw(st.integers(0, len(target) - 1))
            if op == "delete":
                del target[i]
            elif op == "add":
                target.insert(i, draw(json_values))
            else:
                target[i] = draw(json_values)
    return orjson.dumps(data)


@st.composite
def byte_mutations(draw: st.DrawFn) -> bytes:
    payload = bytearray(draw(valid_payloads))
    op = draw(st.sampled_from(["truncate", "insert", "flip", "splice"]))
    i = draw(st.integers(0, len(payload)))
    if op == "truncate":
        return bytes(payload[:i])
    if op == "insert":
        return bytes(payload[:i] + draw(st.binary(min_size=1, max_size=16)) + payload[i:])
    if op == "flip" and i < len(payload):
        payload[i] ^= draw(st.integers(1, 255))
        return bytes(payload)
    other = draw(valid_payloads)
    return bytes(payload[:i] + other[draw(st.integers(0, len(other))) :])


def decode_or_reject(payload: Any) -> Any:
    """The worker's contract: a registered record, or DecodeError with a reason."""
    try:
        record = ALL.decode(payload)
    except codec.DecodeError as exc:
        assert str(exc)  # noqa: PT017  (always says why)
        return None
    assert type(record) in REGISTERED
    ALL.encode(record)  # and it can be written again (dead-letter, table state)
    return record


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=valid_payloads)
def test_every_valid_payload_decodes(payload: bytes) -> None:
    record = decode_or_reject(payload)
    assert record is not None
    assert ALL.kind_of(record).kind == orjson.loads(payload)["schema"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=json_mutations())
def test_mutated_fields_are_a_record_or_a_decode_error(payload: bytes) -> None:
    decode_or_reject(payload)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=byte_mutations())
def test_mutated_bytes_are_a_record_or_a_decode_error(payload: bytes) -> None:
    for form in (payload, bytearray(payload), memoryview(payload)):
        decode_or_reject(form)
    decode_or_reject(payload.decode("utf-8", errors="replace"))


@settings(max_examples=100, deadline=None)
@given(value=json_values)
def test_any_json_document_is_a_record_or_a_decode_error(value: Any) -> None:
    decode_or_reject(orjson.dumps(value))


VERSIONS: list[Any] = [0, 1, 2, 3, -1, "1", None, 1.5, [1], {"v": 1}]
UNREADABLE = [
    (kind, v)
    for kind in KINDS
    for v in VERSIONS
    if not (type(v) is int and v in ALL.registry[kind].reads)
]


@pytest.mark.parametrize(("kind", "version"), UNREADABLE, ids=repr)
def test_versions_this_build_does_not_read_are_refused(kind: str, version: Any) -> None:
    with pytest.raises(codec.DecodeError, match="not supported"):
        ALL.decode(orjson.dumps({"schema": kind, "v": version}))


def test_a_v1_record_whose_fields_v2_dropped_still_reads() -> None:
    """k8s.pod v2 removed fields nothing read: records of agents not yet upgraded still count."""
    v1 = {
        "schema": "k8s.pod",
        "v": 1,
        "node": "n",
        "ts_ms": 5,
        "uid": "u",
        "namespace": "ml",
        "name": "p",
        "phase": "Running",
        "created_ms": 1,
        "deletion_grace_s": 30,
        "containers": ["c"],
        "gpu_requests": [["nvidia.com/gpu", "1"]],
        "gpu_limits": [["nvidia.com/gpu", "1"]],
        "labels": [["app", "x"]],
    }
    pod = codec.decode(orjson.dumps(v1))
    assert (pod.uid, pod.name, pod.created_ms) == ("u", "p", 1)
    assert orjson.loads(codec.encode(pod))["v"] == 3  # written as this build's version
    assert "phase" not in orjson.loads(codec.encode(pod))
    assert pod.resource_health == ()  # v1 and v2 carry no kubelet health: none said


def test_a_v2_pod_reads_as_v3_without_health_and_a_v4_is_refused() -> None:
    v2 = {"schema": "k8s.pod", "v": 2, "node": "n", "ts_ms": 5, "uid": "u", "namespace": "ml",
          "name": "p", "created_ms": 1}  # fmt: skip
    pod = codec.decode(orjson.dumps(v2))
    assert pod.resource_health == ()
    with pytest.raises(codec.DecodeError):
        codec.decode(orjson.dumps({**v2, "v": 4}))


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"null",
        b'"dcgm.sample"',
        b'{"schema": null, "v": 1}',
        b'{"schema": ["dcgm.sample"], "v": 1}',
        b'{"v": 1}',
        b'{"schema": "dcgm.sample", "v": 1, "ts_ms": 1e400}',
        b'{"schema": "dcgm.sample", "v": 1, "node": "n", "ts_ms": 1' + b"0" * 30 + b"}",
        b"[" * 2000 + b"]" * 2000,
        b'{"schema": "podresources.snapshot", "v": 1, "node": "n", "ts_ms": 1, "assignments": '
        + b"[" * 600
        + b"]" * 600
        + b"}",
        '{"schema": "k8s.node", "v": 1, "node": "\ud800"}'.encode("utf-8", "surrogatepass"),
    ],
    ids=[
        "empty",
        "null",
        "string",
        "null-kind",
        "list-kind",
        "no-kind",
        "float-overflow",
        "100-bit-int",
        "deep-array",
        "deep-field",
        "lone-surrogate",
    ],
)
def test_hostile_payloads_are_decode_errors(payload: bytes) -> None:
    with pytest.raises(codec.DecodeError):
        ALL.decode(payload)
