"""``bench.where``: py-spy's raw stacks read into rooms, and the bounds they set."""

from __future__ import annotations

import pytest

from bench.where import CORE, OURS, ROOMS, WAITING, bound, frames, report, room_of, shares

ROOT = (
    'process 12:"python -m gpuattr.cli worker";_run_module_as_main (<frozen runpy>:198);'
    "BaseEventLoop._run_once (asyncio/base_events.py:1922);Handle._run (asyncio/events.py:80)"
)
CORE_STACK = (
    f"{ROOT};Agent._execute_actor (faust/agents/agent.py:674);"
    "RecordLoop.handle_event (streams/worker/loop.py:150);"
    "Processor.handle (streams/core/flow/processor.py:168);"
    "attribute (streams/core/devices/attribution.py:449)"
)
WRITE_STACK = (
    f"{ROOT};RecordLoop.handle_event (streams/worker/loop.py:150);"
    "Processor.handle (streams/core/flow/processor.py:168);"
    "RecordTable.__setitem__ (streams/worker/faust_codecs.py:103);"
    "RecordTable.on_key_set (streams/worker/faust_codecs.py:57);"
    "Codec.encode (contract/codec.py:130)"
)
FAUST_STACK = (
    f"{ROOT};Agent._execute_actor (faust/agents/agent.py:674);"
    "Stream._c_aiter (faust/streams.py:800)"
)
PRODUCER_STACK = f"{ROOT};Sender._send_produce_req (aiokafka/producer/sender.py:250)"
WAITING_STACK = (
    "thread (0x7f);Thread._bootstrap (threading.py:995);WorkerThread.run (mode/threads.py:66);"
    "EpollSelector.select (selectors.py:468)"
)
CONSUMER_STACK = (
    "Thread._bootstrap (threading.py:995);WorkerThread.run (mode/threads.py:66);"
    "Fetcher._proc_fetch_request (aiokafka/consumer/fetcher.py:800)"
)


def test_frames_are_read_root_first_and_the_entries_that_are_not_frames_are_left_out() -> None:
    got = frames(CORE_STACK)
    assert got[0] == ("_run_module_as_main", "<frozen runpy>")
    assert got[-1] == ("attribute", "streams/core/devices/attribution.py")
    assert all(not fn.startswith("process") for fn, _ in got)


@pytest.mark.parametrize(
    ("stack", "room"),
    [
        (CORE_STACK, CORE),
        (WRITE_STACK, "changelog writes (table codec, outbox add)"),  # before the core claims it
        (FAUST_STACK, "Faust stream, agents, commits"),
        (PRODUCER_STACK, "aiokafka producer"),
        (CONSUMER_STACK, "consumer thread (aiokafka fetch)"),
        (WAITING_STACK, WAITING),
        (ROOT, "event loop, sockets, other"),
    ],
)
def test_each_sample_goes_to_the_first_room_that_claims_it(stack: str, room: str) -> None:
    assert room_of(frames(stack)) == room


def test_shares_are_of_the_samples_not_waiting() -> None:
    lines = [f"{CORE_STACK} 6\n", f"{FAUST_STACK} 3\n", f"{PRODUCER_STACK} 1\n"]
    got, busy = shares([*lines, f"{WAITING_STACK} 90\n", "garbled line\n"])
    assert busy == 10
    assert got[CORE] == pytest.approx(0.6)
    assert got["Faust stream, agents, commits"] == pytest.approx(0.3)
    assert sum(got.values()) == pytest.approx(1.0)
    assert set(got) == {room for room, _, _ in ROOMS}


def test_a_record_of_nothing_but_waiting_is_an_error_not_a_figure() -> None:
    with pytest.raises(RuntimeError, match="no sample of a busy thread"):
        shares([f"{WAITING_STACK} 5\n"])


def test_the_bound_is_amdahls_and_the_report_names_both() -> None:
    assert bound(0.5) == pytest.approx(2.0)
    assert bound(0.0) == pytest.approx(1.0)
    assert CORE in OURS
    assert "Faust stream, agents, commits" not in OURS
    run, _ = shares([f"{CORE_STACK} 1\n", f"{FAUST_STACK} 1\n"])
    text = report([(run, 2), (run, 2), (run, 2)])
    assert " 50.0% [50.0, 50.0]" in text
    assert "2.0x" in text
