"""``TEXT_KEPT_KINDS``: the kinds a store may apply without counting its words again.

Each kind in the set is projected from a real payload, and none of its changes may add
or remove a knowledge item or a turn, or write a column a full-text index holds: a
kind added to the set without a sample here fails the last test.
"""

from __future__ import annotations

from typing import Any

import pytest

from ledgermem.domain.events import Kind, new_event
from ledgermem.domain.projection import TEXT_KEPT_KINDS, Delete, Insert, project
from ledgermem.store.migrations import FTS_COLUMNS
from ledgermem.types import Scope

SAMPLES: dict[str, dict[str, Any]] = {
    Kind.MEMORY_RECALLED: {"ids": ["i1", "i2"], "boost": 0.02},
    Kind.MEMORY_DECAYED: {"ids": ["i1"], "factor": 0.9},
    Kind.MEMORY_COMPARED: {"a": "i2", "b": "i1", "outcome": "distinct", "similarity": 0.4},
    Kind.TURN_CONSOLIDATED: {"ids": ["t1"]},
    Kind.TURNS_QUEUED: {"ids": ["t1"]},
    Kind.TURNS_EXTRACTED: {"ids": ["t1"], "outcome": "done"},
    Kind.LLM_CALLED: {"purpose": "extract", "model": "m", "outcome": "ok"},
    Kind.TOOL_CALLED: {"name": "recall", "success": True},
    Kind.PROPOSAL_MADE: {"item": {"content": "x"}},
    Kind.PROPOSAL_DECIDED: {"proposal": "p1", "decision": "approved"},
}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_a_text_kept_kind_touches_no_indexed_text(kind: str) -> None:
    assert kind in TEXT_KEPT_KINDS
    event = new_event(Scope("alice"), "2026-11-29T10:00:00+00:00", Kind(kind),
                      SAMPLES[kind], subject_id="i1")
    for change in project(event):
        indexed = FTS_COLUMNS.get(change.table)
        if indexed is None:
            continue
        assert not isinstance(change, Insert | Delete), change
        assert not set(change.values) & {*indexed, "user_id"}, change


@pytest.mark.parametrize("kind", [Kind.MEMORY_ADDED, Kind.MEMORY_UPDATED, Kind.MEMORY_DELETED,
                                  Kind.MEMORY_PRUNED, Kind.TURN_USER])
def test_kinds_that_add_remove_or_reword_rows_are_not_in_the_set(kind: Kind) -> None:
    assert kind not in TEXT_KEPT_KINDS


def test_every_kind_in_the_set_has_a_sample() -> None:
    assert set(SAMPLES) == set(TEXT_KEPT_KINDS)
