"""Topic descriptions have one source, contract/topics.py: docs/CONSUMERS.md carries the table
made from it, and README.md and docs/ARCHITECTURE.md keep no copy of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.topics import DAY_MS, HOUR_MS, TOPICS, TopicDoc

ROOT = Path(__file__).resolve().parents[2]
BEGIN = "<!-- topics: made from contract/topics.py (tests/unit/test_topic_docs.py) -->"
END = "<!-- /topics -->"


def kept(doc: TopicDoc) -> str:
    if doc.compacted:
        return "compacted"
    if doc.retention_ms < DAY_MS:
        return f"{doc.retention_ms // HOUR_MS} h"
    return f"{doc.retention_ms // DAY_MS} d"


def table() -> str:
    rows = [f"| `gpuattr.{doc.role}` | {doc.key} | {doc.carries} | {kept(doc)} |" for doc in TOPICS]
    return "\n".join(["| topic | key | carries | kept |", "|---|---|---|---|", *rows])


def between_markers(text: str) -> str:
    assert BEGIN in text, f"docs/CONSUMERS.md needs {BEGIN}"
    assert END in text, f"docs/CONSUMERS.md needs {END}"
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def test_the_consumers_topic_table_is_made_from_contract_topics() -> None:
    committed = between_markers((ROOT / "docs" / "CONSUMERS.md").read_text())
    assert committed == table(), f"paste between the markers of docs/CONSUMERS.md:\n{table()}"


@pytest.mark.parametrize("doc", ["README.md", "docs/ARCHITECTURE.md"])
def test_no_other_doc_keeps_its_own_topic_table(doc: str) -> None:
    lines = (ROOT / doc).read_text().splitlines()
    rows = [line for line in lines if line.startswith("| `gpuattr.")]
    assert rows == [], f"{doc} links to docs/CONSUMERS.md for the topics instead"


def test_a_changed_description_makes_a_different_table() -> None:
    """The check above can fail: the table follows every field it is made from."""
    assert all(doc.carries in table() and doc.key in table() for doc in TOPICS)
    assert all(f"`gpuattr.{doc.role}`" in table() for doc in TOPICS)
