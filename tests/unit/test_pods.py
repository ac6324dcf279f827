"""UID resolution through grace periods, replacements and name reuse (event time, no clock)."""

from __future__ import annotations

import pytest

from contract.inputs import OwnerRef, PodListSnapshot, PodRecord
from streams.core.node.pods import PodNames, apply_pod, apply_pod_list, resolve


def pod(
    uid: str,
    ts: int,
    created: int | None = None,
    *,
    deleted: bool = False,
    deletion: int | None = None,
) -> PodRecord:
    return PodRecord(
        node="n",
        ts_ms=ts,
        uid=uid,
        namespace="db",
        name="pg-0",
        created_ms=ts if created is None else created,
        deletion_ts_ms=deletion,
        deleted=deleted,
        owner=OwnerRef("StatefulSet", "pg"),
        workload=OwnerRef("StatefulSet", "pg"),
    )


def fold(*records: PodRecord) -> PodNames:
    names: PodNames | None = None
    for rec in records:
        names = apply_pod(names, rec)
    assert names is not None
    return names


# StatefulSet pod pg-0: old life uid-1 from 0, deletion requested at 100 with a 30 s grace,
# gone at 130; the replacement with the same name (uid-2) created at 131.
REUSE = fold(
    pod("uid-1", 0),
    pod("uid-1", 100, 0, deletion=100),
    pod("uid-1", 130, 0, deleted=True, deletion=100),
    pod("uid-2", 131),
)


@pytest.mark.parametrize(
    ("ts", "uid"),
    [
        pytest.param(50, "uid-1", id="before-deletion"),
        pytest.param(115, "uid-1", id="in-grace-period-old-pod-keeps-slot"),
        pytest.param(129, "uid-1", id="last-moment-of-grace"),
        pytest.param(131, "uid-2", id="replacement-after-handover"),
        pytest.param(500, "uid-2", id="long-after"),
    ],
)
def test_same_name_resolves_to_the_life_alive_at_the_time(ts: int, uid: str) -> None:
    who = resolve(REUSE, ts, watched=True)
    assert (who.uid, who.status) == (uid, "resolved")
    assert who.workload is not None
    assert (who.workload.kind, who.workload.name) == ("StatefulSet", "pg")


def test_two_lives_are_never_merged() -> None:
    assert [life.uid for life in REUSE.lives] == ["uid-1", "uid-2"]
    assert REUSE.lives[0].gone_ms == 130
    assert REUSE.lives[1].gone_ms is None


def test_missing_record_is_pending_not_guessed() -> None:
    assert resolve(None, 10, watched=True).uid is None
    assert resolve(None, 10, watched=True).status == "pending"
    assert resolve(None, 10, watched=False).status == "no-pod-watch"


def test_replacement_created_within_the_deletion_second_does_not_take_earlier_samples() -> None:
    """Found against the real API server: creationTimestamp has whole seconds. The replacement
    made at 5.8 s says it was created at 5.0 s, before its predecessor was deleted (5.7 s); a
    sample at 5.3 s still belongs to the predecessor, which held the name then."""
    names = fold(
        pod("uid-1", 1_000, created=1_000),
        pod("uid-1", 5_700, created=1_000, deleted=True),
        pod("uid-2", 5_800, created=5_000),
    )
    assert resolve(names, 5_300, watched=True).uid == "uid-1"
    assert resolve(names, 5_700, watched=True).uid == "uid-2"
    assert resolve(names, 5_800, watched=True).uid == "uid-2"


def test_api_clock_slightly_ahead_still_resolves() -> None:
    names = fold(pod("uid-9", 1_000, created=1_400))  # creationTimestamp ahead of agent clock
    assert resolve(names, 1_200, watched=True).uid == "uid-9"


def test_new_life_without_seen_delete_closes_the_old_one() -> None:
    names = fold(pod("uid-1", 0), pod("uid-2", 200))
    assert names.lives[0].gone_ms == 200
    assert resolve(names, 100, watched=True).uid == "uid-1"
    assert resolve(names, 250, watched=True).uid == "uid-2"


def test_relist_marks_vanished_pods_gone() -> None:
    names = fold(pod("uid-1", 0))
    updated = apply_pod_list(names, PodListSnapshot("n", 300, uids=("other",)))
    assert updated is not None
    assert updated.lives[0].gone_ms == 300
    assert apply_pod_list(names, PodListSnapshot("n", 300, uids=("uid-1",))) is None


def test_gone_pod_still_listed_by_kubelet_resolves_to_its_last_life() -> None:
    names = fold(pod("uid-1", 0), pod("uid-1", 50, 0, deleted=True))
    assert resolve(names, 60, watched=True).uid == "uid-1"
