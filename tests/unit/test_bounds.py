"""Strings copied from a source are cut to the contract's size at the edge, counted; and the
worker's reasons built from them stay within it (dcgm-exporter labels, pod annotations, node
labels, a pending pod's scheduler message, the ClusterPolicy's conditions): a ~560 KB
``Hostname`` makes small records."""

from __future__ import annotations

import base64
import copy
import dataclasses

import pytest
from kubernetes_asyncio.client import V1Node, V1NodeStatus, V1ObjectMeta, V1Pod
from prometheus_client import REGISTRY

from agents.bounds import bounded
from agents.kube.gpuoperator import cluster_policy
from agents.kube.pending import pending_pod
from agents.kube.translate import node_record, pod_record
from contract import codec
from contract.bounds import CUT_MARK, MAX_TEXT_CHARS, cut
from contract.outputs import TelemetryRefused
from streams.worker.app import dead_letter_of
from tests.dcgm_captures import GPU, parse, row
from tests.unit.test_kube_gpuoperator import SEED_POLICY
from tests.unit.test_kube_pending import UNSCHEDULABLE
from tests.unit.test_spine import FOREIGN, NODE, T0, feed, new, scrape, setup

HUGE = "h" * 560_000  # the size of the Hostname label seen in the wild


def cut_count(what: str) -> float:
    return REGISTRY.get_sample_value("gpuattr_agent_cut_values_total", {"what": what}) or 0.0


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        pytest.param("", 10, "", id="empty"),
        pytest.param("node-1", 10, "node-1", id="short"),
        pytest.param("x" * 10, 10, "x" * 10, id="exactly-the-limit"),
        pytest.param("x" * 11, 10, "xxxx" + CUT_MARK, id="one-over"),
        pytest.param("é" * 40, 12, "éééééé" + CUT_MARK, id="characters-not-bytes"),
        pytest.param("x" * 5, 3, "xxx", id="no-room-for-the-mark"),
    ],
)
def test_cut_keeps_a_string_that_fits_and_marks_one_that_does_not(
    text: str, limit: int, expected: str
) -> None:
    assert cut(text, limit) == expected
    assert len(cut(text, limit)) <= limit


def test_the_default_size_and_a_string_that_fits_is_the_same_object() -> None:
    fits = "n" * MAX_TEXT_CHARS
    assert cut(fits) is fits
    assert len(cut(HUGE)) == MAX_TEXT_CHARS
    assert cut(HUGE).endswith(CUT_MARK)


def test_the_edge_counts_what_it_cuts_and_nothing_else() -> None:
    before = cut_count("test value")
    assert bounded("short", "test value") == "short"
    assert cut_count("test value") == before
    assert bounded(HUGE, "test value") == cut(HUGE)
    assert cut_count("test value") == before + 1


def test_a_huge_dcgm_label_is_cut_in_the_sample_and_counted() -> None:
    before = cut_count("dcgm-exporter label")
    text = row("DCGM_FI_DEV_GPU_TEMP", "40", **{**GPU, "Hostname": HUGE}) + row(
        "DCGM_FI_DEV_POWER_USAGE", "70", **{**GPU, "Hostname": HUGE}
    )
    (sample,) = parse(text).samples
    assert sample.hostname == cut(HUGE)
    assert (sample.uuid, sample.temp_c, sample.power_w) == ("GPU-1", 40, 70)  # still read
    assert cut_count("dcgm-exporter label") == before + 2  # one per row that carried it
    assert len(codec.encode(sample)) < 4 * MAX_TEXT_CHARS


def test_huge_pod_annotations_and_node_labels_are_cut_and_counted() -> None:
    annotation, label = cut_count("pod annotation"), cut_count("node label")
    pod = V1Pod(
        metadata=V1ObjectMeta(
            name="p", namespace="ml", uid="u", annotations={"gpuattr.io/team": HUGE}
        )
    )
    rec = pod_record(pod, node="n1", ts_ms=1)
    assert dict(rec.annotations) == {"gpuattr.io/team": cut(HUGE)}
    node = V1Node(
        metadata=V1ObjectMeta(name="n1", labels={"nvidia.com/gpu.product": HUGE}),
        status=V1NodeStatus(allocatable={}),
    )
    assert dict(node_record(node, ts_ms=1).labels) == {"nvidia.com/gpu.product": cut(HUGE)}
    assert (cut_count("pod annotation"), cut_count("node label")) == (annotation + 1, label + 1)


def test_a_refusal_of_a_huge_hostname_is_small_in_its_record_and_in_the_node_state() -> None:
    """An older agent sends the label whole: the refusal's hostname and reason (which the node
    state keeps, and its status says) are cut all the same."""
    proc = new()
    feed(proc, setup())
    out = feed(proc, [scrape(T0 + 10_000, FOREIGN, hostname=HUGE)])
    (refused,) = [o for o in out if isinstance(o, TelemetryRefused)]
    assert refused.cause == "hostname"
    assert refused.hostname == cut(HUGE)
    assert len(refused.reason) <= MAX_TEXT_CHARS
    assert len(codec.encode(refused)) < 4 * MAX_TEXT_CHARS
    state = proc.tables.node_state[NODE]
    assert state.refused is not None
    assert len(state.refused.reason) <= MAX_TEXT_CHARS


def test_a_huge_scheduler_message_and_condition_message_are_cut_and_counted() -> None:
    pending, operator = cut_count("pending pod field"), cut_count("gpu-operator field")
    waiting = copy.deepcopy(UNSCHEDULABLE)
    waiting["status"]["conditions"][0]["message"] = HUGE
    record = pending_pod(waiting, ts_ms=1_775_200_000_000)
    assert record is not None
    assert record.scheduled_message == cut(HUGE)
    policy = copy.deepcopy(SEED_POLICY)
    policy["status"]["conditions"][1]["message"] = HUGE
    got = cluster_policy(policy, ts_ms=5)
    assert got is not None
    assert got.conditions[1].message == cut(HUGE)
    assert cut_count("pending pod field") == pending + 1
    assert cut_count("gpu-operator field") == operator + 1


@dataclasses.dataclass
class Msg:
    topic: str = "gpuattr.node-events"
    partition: int = 2
    offset: int = 41
    key: bytes | None = b"gpu-a"
    value: bytes | None = b""


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        pytest.param(b"\xff{not json", True, id="small-kept"),
        pytest.param(b"x" * 700_000, True, id="fits-in-base64"),
        pytest.param(b"x" * 900_000, False, id="base64-over-the-limit"),
    ],
)
def test_a_dead_letter_keeps_the_payload_only_while_the_record_fits(
    value: bytes, kept: bool
) -> None:
    letter = dead_letter_of(Msg(value=value), "undecodable: " + HUGE, 1_000_000, 7)
    assert (letter.source_topic, letter.partition, letter.offset, letter.key) == (
        "gpuattr.node-events",
        2,
        41,
        "gpu-a",
    )
    assert (base64.b64decode(letter.payload_b64) == value) is kept
    assert letter.error.startswith("undecodable: hhh")
    assert len(letter.error) <= MAX_TEXT_CHARS
    assert kept or f"its {len(value)} bytes are not kept" in letter.error
    assert len(codec.encode(letter)) <= 1_000_000
