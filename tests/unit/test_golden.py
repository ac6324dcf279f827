"""The worker's pure core gives the golden outputs for the golden inputs.

Every demo scenario and the bench fleet, recorded with their inputs in ``tests/golden``
(:mod:`tests.golden.record` says what they hold and how they were made). Each case replays one
file's inputs through :class:`~streams.core.flow.processor.Processor` and
:class:`~streams.core.flow.demandstage.DemandStage` on in-memory tables and compares every
output line, byte for byte, with the recorded one; a mismatch names the first differing output
(its index, the input that caused it, its kind, both values as JSON).

After a deliberate change of outputs: ``python -m tests.golden.record`` regenerates the files
(``--check``: compares, writes nothing), and the change is named in the commit.
"""

from __future__ import annotations

import orjson
import pytest

from contract import codec
from tests.golden.record import names, paths, read_input, read_lines, replay


def _first_difference(expected: list[bytes], got: list[bytes]) -> str | None:
    for index, (want, have) in enumerate(zip(expected, got, strict=False)):
        if want != have:
            w, h = orjson.loads(want), orjson.loads(have)
            return (
                f"output {index} (of input {w['i']}, kind {w['kind']}) differs:\n"
                f"  golden: {want.decode()}\n"
                f"  now:    {have.decode()}"
                + (
                    f"\n  (now caused by input {h['i']}, kind {h['kind']})"
                    if (h["i"], h["kind"]) != (w["i"], w["kind"])
                    else ""
                )
            )
    if len(expected) != len(got):
        longer, which = (expected, "golden") if len(expected) > len(got) else (got, "now")
        extra = longer[min(len(expected), len(got))]
        return (
            f"{len(expected)} golden outputs, {len(got)} now; the first one only {which} has:\n"
            f"  {extra.decode()}"
        )
    return None


@pytest.mark.parametrize("name", names())
def test_outputs_equal_the_golden_ones(name: str) -> None:
    inputs, outputs = paths(name)
    expected = read_lines(outputs)
    got = list(replay(name, (read_input(line)[0] for line in read_lines(inputs))))
    assert expected, "a golden file with no outputs checks nothing"
    difference = _first_difference(expected, got)
    if difference is not None:
        pytest.fail(f"{name}: {difference}", pytrace=False)


@pytest.mark.parametrize("name", names())
def test_inputs_read_back_as_recorded(name: str) -> None:
    """Each input's value, decoded and encoded again, is the value recorded: the replay reads
    the very records the recorder wrote."""
    for line in read_lines(paths(name)[0]):
        record, value = read_input(line)
        assert codec.encode(record.record) == value
