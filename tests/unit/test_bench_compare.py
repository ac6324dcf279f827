"""``bench.run --compare``: its arguments, the order of the runs, the medians and ratios, the
temporary worktree's lifecycle (a fake git), and what it records — no broker, no worker."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import compare
from bench.run import cpu_growth, node_changelogs, parser

COMMIT = "01b08801f0000000000000000000000000000000"


def figures(scale: float) -> dict[str, float]:
    return {key: scale * (i + 1) for i, (key, _, _) in enumerate(compare.FIGURES)}


def run(side: str, scale: float) -> dict[str, Any]:
    return {"side": side, "figures": figures(scale)}


def test_compare_takes_a_rev_and_the_repeat_count() -> None:
    args = parser().parse_args(["--compare", "01b0880", "--repeat", "3"])
    assert (args.compare, args.repeat) == ("01b0880", 3)
    plain = parser().parse_args([])
    assert (plain.compare, plain.repeat, plain.nodes) == (None, 1, 250)


def test_the_sides_alternate_the_old_first() -> None:
    assert compare.order(3) == [
        (0, "old"),
        (0, "new"),
        (1, "old"),
        (1, "new"),
        (2, "old"),
        (2, "new"),
    ]
    with pytest.raises(ValueError, match="at least 1"):
        compare.order(0)


@pytest.mark.parametrize(
    ("new", "old", "want"),
    [
        pytest.param(2.0, 4.0, 0.5, id="half"),
        pytest.param(3.0, 1.0, 3.0, id="three-times"),
        pytest.param(1.0, 3.0, 0.333, id="rounded"),
        pytest.param(5.0, 0.0, None, id="old-zero-no-ratio"),
        pytest.param(0.0, 2.0, 0.0, id="new-zero"),
    ],
)
def test_ratio_is_new_over_old(new: float, old: float, want: float | None) -> None:
    assert compare.ratio(new, old) == want


def test_summary_gives_each_sides_medians_their_ratio_and_each_pairs() -> None:
    runs = [run("old", 1.0), run("new", 0.5), run("old", 3.0), run("new", 1.0)]
    runs += [run("old", 2.0), run("new", 4.0)]
    got = compare.summary(runs)
    first, _, _ = compare.FIGURES[0]
    assert got["median"]["old"][first] == 2.0
    assert got["median"]["new"][first] == 1.0
    assert set(got["ratio"]) == {key for key, _, _ in compare.FIGURES}
    assert set(got["ratio"].values()) == {0.5}  # every figure scales alike here
    assert got["pair_ratios"][first] == [0.5, 0.333, 2.0]  # repeat by repeat


def test_summary_needs_both_sides() -> None:
    with pytest.raises(ValueError, match="each side"):
        compare.summary([run("old", 1.0)])


def test_the_table_has_a_line_per_figure_with_both_medians_and_the_ratio() -> None:
    summed = compare.summary([run("old", 2.0), run("new", 1.0)])
    text = compare.table(summed, COMMIT, "77bacb9b3" + "0" * 31, (2744, 10004))
    lines = text.splitlines()
    assert lines[0] == "bench fleet 2,744 devices, at scale 10,004 devices"
    assert "old 01b08801f" in lines[1]
    assert "new 77bacb9b3" in lines[1]
    assert len(lines) == 2 + len(compare.FIGURES)
    for line, (_, label, _) in zip(lines[2:], compare.FIGURES, strict=True):
        assert line.startswith(label)
        assert "0.500  [0.500]" in line


class FakeGit:
    """Records every git command; ``fail`` names the subcommands that fail."""

    def __init__(self, fail: Sequence[str] = ()) -> None:
        self.calls: list[list[str]] = []
        self.fail = set(fail)

    def __call__(self, args: Sequence[str]) -> str:
        self.calls.append(list(args))
        if args[0] in self.fail or " ".join(args[:2]) in self.fail:
            raise subprocess.CalledProcessError(128, ["git", *args])
        if args[:2] == ["worktree", "add"]:
            Path(args[-2]).mkdir(parents=True)  # what git makes
        return COMMIT + "\n" if args[0] == "rev-parse" else ""


def test_the_worktree_is_made_detached_at_the_full_commit_and_removed(tmp_path: Path) -> None:
    git = FakeGit()
    with compare.worktree("01b0880", git, tmp_path) as (path, commit):
        assert commit == COMMIT
        assert path == tmp_path / "rev-01b08801f000"
        assert path.is_dir()
    assert git.calls == [
        ["rev-parse", "--verify", "01b0880^{commit}"],
        ["worktree", "add", "--detach", str(path), COMMIT],
        ["worktree", "remove", "--force", str(path)],
        ["worktree", "prune"],
    ]
    assert not path.exists()


def test_the_worktree_is_removed_when_the_run_fails(tmp_path: Path) -> None:
    git = FakeGit()
    failing = pytest.raises(RuntimeError, match="broker down")
    with failing, compare.worktree("01b0880", git, tmp_path) as (path, _):
        raise RuntimeError("broker down")
    assert ["worktree", "remove", "--force", str(path)] in git.calls
    assert not path.exists()


def test_a_half_made_worktree_is_cleared_and_the_failure_raised(tmp_path: Path) -> None:
    git = FakeGit(fail=["worktree add", "worktree remove"])
    left = tmp_path / "rev-01b08801f000"
    left.mkdir()  # git stopped after making the folder
    failing = pytest.raises(subprocess.CalledProcessError)
    with failing, compare.worktree("01b0880", git, tmp_path):
        pytest.fail("the body runs only once the worktree is made")
    assert not left.exists()
    assert git.calls[-1] == ["worktree", "prune"]


def test_an_unknown_rev_fails_before_any_worktree(tmp_path: Path) -> None:
    git = FakeGit(fail=["rev-parse"])
    failing = pytest.raises(subprocess.CalledProcessError)
    with failing, compare.worktree("nope", git, tmp_path):
        pytest.fail("no worktree for an unknown rev")
    assert git.calls == [["rev-parse", "--verify", "nope^{commit}"]]


@pytest.mark.parametrize(
    ("previous", "kept"),
    [
        pytest.param(b'{"runs": [1], "compare": {"old": 1}}', {"runs": [1]}, id="ordinary-kept"),
        pytest.param(None, {}, id="no-file"),
        pytest.param(b"{not json", {}, id="unreadable"),
        pytest.param(b"[1, 2]", {}, id="not-an-object"),
    ],
)
def test_the_compare_section_replaces_only_itself(
    previous: bytes | None, kept: dict[str, Any]
) -> None:
    got = compare.recorded(previous, {"old": {"commit": COMMIT}})
    assert got == {**kept, "compare": {"old": {"commit": COMMIT}}}
    orjson.dumps(got)  # what is written


def test_an_ordinary_run_keeps_the_compare_section() -> None:
    previous = b'{"runs": [1], "compare": {"old": 1}}'
    assert compare.ordinary(previous, {"runs": [2]}) == {"runs": [2], "compare": {"old": 1}}
    assert compare.ordinary(b'{"runs": [1]}', {"runs": [2]}) == {"runs": [2]}
    assert compare.ordinary(None, {"runs": [2]}) == {"runs": [2]}


def test_the_node_stages_changelogs_are_the_apps_but_the_demand_stages() -> None:
    app = "bs1a2b3c.worker"
    names = [
        f"{app}-slot-holders-changelog",
        f"{app}-node-state-changelog",
        f"{app}-demand-pods-changelog",  # the demand stage's
        f"{app}-node-state",  # not a changelog
        "bsffffff.worker-node-state-changelog",  # another run's
        "bs1a2b3c.attribution",
    ]
    assert node_changelogs(names, app) == [
        f"{app}-node-state-changelog",
        f"{app}-slot-holders-changelog",
    ]


@pytest.mark.parametrize(
    ("at_scale", "at_fleet", "want"),
    [(550.0, 500.0, 1.1), (429.0, 429.0, 1.0), (547.0, 429.0, 1.275)],
    ids=["grows-10pct", "flat", "grows-27pct"],
)
def test_cpu_growth_is_at_scale_over_the_fleet(
    at_scale: float, at_fleet: float, want: float
) -> None:
    assert cpu_growth(at_scale, at_fleet) == pytest.approx(want)
