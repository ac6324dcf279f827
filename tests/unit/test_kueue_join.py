"""The cluster role's Kueue join (:class:`agents.kube.kueuewatch.KueueJoin`): what it publishes
as Workloads and their queues change — on change only, the wait's last record once, a list after
each list of Workloads, a queue change re-judging the queued ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.kube.kueue import cluster_queue, local_queue, resource_flavor
from agents.kube.kueuewatch import KueueJoin
from contract.inputs import QueuedWorkload, QueuedWorkloadList
from tests.kueue_objects import (
    A100,
    GPU,
    H100,
    admitted,
    evicted,
    finished,
    flavor,
    pending,
    pending_message,
    podset,
    workload,
)
from tests.kueue_objects import cluster_queue as cq
from tests.kueue_objects import local_queue as lq


@dataclass
class Sink:
    records: list[tuple[str, QueuedWorkload]] = field(default_factory=list)
    lists: list[QueuedWorkloadList] = field(default_factory=list)

    async def publish_workload(self, resource: str, record: QueuedWorkload) -> None:
        self.records.append((resource, record))

    async def publish_workload_list(self, record: QueuedWorkloadList) -> None:
        self.lists.append(record)

    def states(self) -> list[tuple[str, str, str]]:
        return [(r.name, r.state, r.reason) for _, r in self.records]


def joined() -> tuple[KueueJoin, Sink]:
    sink = Sink()
    join = KueueJoin(sink, now_ms=lambda: 1_000)
    local = local_queue(lq("research", "user-queue", "gpu-cq"))
    cluster = cluster_queue(cq("gpu-cq", {"a100": 8}))
    found = resource_flavor(flavor("a100", A100))
    assert local is not None
    assert cluster is not None
    assert found is not None
    join.local.update([local])
    join.cluster.update([cluster])
    join.flavors.update([found])
    return join, sink


def job(status: dict[str, Any] | None, name: str = "job-a", uid: str = "u-a") -> dict[str, Any]:
    return workload(name, [podset("main", 2, 4)], status=status, uid=uid)


async def test_a_workloads_wait_from_queued_to_admitted_to_its_end() -> None:
    join, sink = joined()
    message = pending_message("main", "a100", 4)
    await join.workload(job(None), deleted=False)
    await join.workload(job(pending(message)), deleted=False)
    await join.workload(job(pending(message)), deleted=False)  # nothing changed: not again
    await join.workload(job(admitted("gpu-cq", {"main": (2, "a100")})), deleted=False)
    await join.workload(job(admitted("gpu-cq", {"main": (2, "a100")})), deleted=False)
    at, again = "2026-12-07T10:20:00Z", "2026-12-07T10:21:00Z"
    await join.workload(job(evicted("Preempted", at, again)), deleted=False)
    await join.workload(job({**admitted("gpu-cq", {"main": (2, "a100")})}), deleted=False)
    await join.workload(job(finished("Succeeded", "done", again)), deleted=False)  # no more
    await join.workload(job(finished("Succeeded", "done", again)), deleted=True)
    assert sink.states() == [
        ("job-a", "queued", ""),
        ("job-a", "queued", "Pending"),
        ("job-a", "admitted", ""),
        ("job-a", "queued", "Preempted"),
        ("job-a", "admitted", ""),
    ]
    assert {k for k, _ in sink.records} == {GPU}
    assert not join.waiting
    assert not join.settled


async def test_deleted_while_queued_and_listed_again() -> None:
    join, sink = joined()
    join.listing_workloads()
    await join.workload(job(pending("m")), deleted=False)
    await join.workload(job(pending("m"), name="job-b", uid="u-b"), deleted=False)
    await join.workloads_listed("10")
    assert [w.name for w in sink.lists[-1].workloads] == ["job-a", "job-b"]
    await join.workload(job(pending("m"), name="job-b", uid="u-b"), deleted=True)
    join.listing_workloads()  # job-a went while the watch was down
    await join.workloads_listed("12")
    assert sink.states()[-2:] == [("job-b", "deleted", "Pending"), ("job-a", "deleted", "Pending")]
    assert sink.lists[-1].workloads == ()
    assert sink.lists[-1].resource_version == "12"


async def test_a_queue_change_rejudges_the_queued_ones() -> None:
    join, sink = joined()
    await join.workload(job(pending("m")), deleted=False)
    assert sink.records[-1][1].requests[0].product == A100
    join.flavors["a100"] = H100  # relabelled
    await join.rejudge()
    assert sink.records[-1][1].requests[0].product == H100
    join.local.clear()
    await join.rejudge()
    assert sink.records[-1][1].cluster_queue == ""
    count = len(sink.records)
    await join.rejudge()  # nothing moved
    assert len(sink.records) == count


async def test_kueue_gone_ends_every_wait() -> None:
    join, sink = joined()
    await join.workload(job(pending("m")), deleted=False)
    await join.workload(job(admitted("gpu-cq", {"main": (2, "a100")}), "job-b", "u-b"), False)
    await join.workloads_gone()
    assert sink.states()[-1] == ("job-a", "deleted", "Pending")
    assert not join.waiting
    assert not join.settled


async def test_an_admitted_workload_never_seen_queued_is_not_published() -> None:
    join, sink = joined()
    await join.workload(job(admitted("gpu-cq", {"main": (2, "a100")})), deleted=False)
    cpu_only = workload("cpu", [podset("main", 1, None)], uid="u-c")
    await join.workload(cpu_only, deleted=False)
    assert sink.records == []
