"""Visibility, the episodic window, ``until`` and the configuration's checks."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from ledgermem.errors import InvalidInput, NotFound
from ledgermem.views import (
    DEFAULT_GLOBAL_KINDS,
    DEFAULT_IMPORTANCE,
    ViewConfig,
    episodic,
    is_visible,
    until,
    visible,
)
from tests.views.ledger import T0, at, ev, ids

LEDGER = [
    ev(1, "run.started", "the village wakes"),
    ev(2, "agent.thought", "I hid the key", agent="baker"),
    ev(3, "agent.spoke", "good morning", agent="miller"),
    ev(4, "world.observed", "the well is dry"),
    ev(5, "agent.thought", "the baker looks nervous", agent="miller"),
    ev(6, "agent.spoke", "has anyone seen the key?", agent="baker", visibility="global"),
    ev(7, "user.injected", "a stranger arrives"),
    ev(8, "judge.verdict", "nobody is guilty yet", agent="judge"),
    ev(9, "agent.reflected", "the baker hides something", agent="miller"),
    ev(10, "clue.found", "a key under the mill", agent="judge"),
    ev(11, "turn.user", "what happened?"),
]


def test_an_agent_sees_its_own_events_and_the_global_ones() -> None:
    assert ids(visible(LEDGER, "miller")) == ["e1", "e3", "e4", "e5", "e6", "e7", "e8", "e9"]
    assert ids(visible(LEDGER, "baker")) == ["e1", "e2", "e4", "e6", "e7", "e8", "e9"]
    # the judge's own clue is private to it, though it sees every global kind
    assert ids(visible(LEDGER, "judge")) == ["e1", "e4", "e6", "e7", "e8", "e9", "e10"]


def test_an_agent_nobody_wrote_for_sees_only_what_is_global() -> None:
    assert ids(visible(LEDGER, "stranger")) == ["e1", "e4", "e6", "e7", "e8", "e9"]
    assert not is_visible(LEDGER[-1], "stranger")  # a turn without agent is nobody's own


def test_which_kinds_are_global_is_configurable() -> None:
    config = ViewConfig(global_kinds=frozenset({"clue.found"}))
    # a global visibility flag still counts; the default kinds no longer do
    assert ids(visible(LEDGER, "baker", config)) == ["e2", "e6", "e10"]
    assert ids(visible(LEDGER, "baker", ViewConfig(global_kinds=frozenset()))) == ["e2", "e6"]


def test_events_of_two_users_are_refused_not_filtered() -> None:
    mixed = [*LEDGER, ev(12, "world.observed", "elsewhere", user="u2")]
    for view in (visible, episodic):
        with pytest.raises(InvalidInput, match="2 users"):
            view(mixed, "miller")


def test_an_agent_id_is_required() -> None:
    for agent in ("", "  "):
        with pytest.raises(InvalidInput, match="agent_id"):
            visible(LEDGER, agent)


def test_no_events_no_view() -> None:
    assert visible([], "miller") == []
    assert episodic([], "miller") == []


def test_episodic_is_the_last_n_visible_events_oldest_first() -> None:
    assert ids(episodic(LEDGER, "miller", n=3)) == ["e7", "e8", "e9"]
    assert ids(episodic(LEDGER, "miller", ViewConfig(episodic_n=2))) == ["e8", "e9"]
    assert ids(episodic(LEDGER, "miller", n=100)) == ids(visible(LEDGER, "miller"))
    assert ids(episodic(LEDGER, "miller", n=12)) == ids(visible(LEDGER, "miller"))  # 8 seen
    assert episodic(LEDGER, "miller", n=0) == []


def test_the_default_window_is_eight() -> None:
    ledger = [ev(i, "agent.spoke", f"line {i}", agent="a") for i in range(1, 13)]
    assert ids(episodic(ledger, "a")) == [f"e{i}" for i in range(5, 13)]


@pytest.mark.parametrize("n", [-1, True, 2.0, "3"])
def test_a_window_size_must_be_a_whole_number(n: object) -> None:
    with pytest.raises(InvalidInput, match="n must be"):
        episodic(LEDGER, "miller", n=n)  # type: ignore[arg-type]


def test_until_an_event_keeps_the_prefix_up_to_it() -> None:
    assert ids(until(LEDGER, event_id="e5")) == ["e1", "e2", "e3", "e4", "e5"]
    # any view at a past position: what the miller remembered then
    assert ids(episodic(until(LEDGER, event_id="e5"), "miller", n=2)) == ["e4", "e5"]
    with pytest.raises(NotFound):
        until(LEDGER, event_id="e99")


def test_until_a_time_keeps_what_was_written_by_then() -> None:
    assert ids(until(LEDGER, time=at(3))) == ["e1", "e2", "e3"]
    assert ids(until(LEDGER, time=T0 + timedelta(minutes=3, seconds=30))) == ["e1", "e2", "e3"]
    # another offset, same moment
    berlin = (T0 + timedelta(minutes=2)).astimezone(timezone(timedelta(hours=2)))
    assert berlin.isoformat() == "2026-06-01T14:02:00+02:00"
    assert ids(until(LEDGER, time=berlin.isoformat())) == ["e1", "e2"]
    assert until(LEDGER, time=T0) == []
    assert ids(until(LEDGER, event_id="e5", time=at(3))) == ["e1", "e2", "e3"]


def test_until_refuses_what_it_cannot_read() -> None:
    with pytest.raises(InvalidInput, match="event_id or a time"):
        until(LEDGER)
    with pytest.raises(InvalidInput, match="timezone"):
        until(LEDGER, time=datetime(2026, 6, 1, 12, 5))
    with pytest.raises(InvalidInput, match="ISO 8601"):
        until(LEDGER, time="yesterday")
    with pytest.raises(InvalidInput, match="event e1"):
        until([replace(ev(1, "x"), ts="soon")], time=at(1))


def test_the_default_config_is_the_documented_one() -> None:
    config = ViewConfig()
    assert config.global_kinds == DEFAULT_GLOBAL_KINDS == {
        "world.observed", "judge.verdict", "user.injected", "run.started", "agent.reflected"}
    assert dict(config.importance) == dict(DEFAULT_IMPORTANCE) == {
        "verdict.final": 1.00, "user.injected": 0.95, "judge.verdict": 0.90,
        "agent.reflected": 0.85, "clue.found": 0.80, "world.observed": 0.70,
        "agent.spoke": 0.50, "agent.thought": 0.40, "run.started": 0.30}
    assert (config.episodic_n, config.salience_k, config.reflect_every) == (8, 8, 10)
    assert (config.w_rel, config.w_rec, config.w_imp, config.decay) == (0.30, 0.40, 0.30, 0.1)
    assert config.importance_of("agent.spoke") == 0.5
    assert config.importance_of("something.else") == config.default_importance == 0.5
    assert hash(config) == hash(ViewConfig())


def test_the_config_copies_what_it_is_given() -> None:
    kinds = {"a.b"}
    table = {"a.b": 0.2}
    config = ViewConfig(global_kinds=kinds, importance=table)  # type: ignore[arg-type]
    kinds.add("c.d")
    table["a.b"] = 0.9
    assert config.global_kinds == frozenset({"a.b"})
    assert config.importance_of("a.b") == 0.2
    with pytest.raises(TypeError):
        config.importance["a.b"] = 1.0  # type: ignore[index]


@pytest.mark.parametrize("options", [
    {"global_kinds": "world.observed"},
    {"global_kinds": frozenset({""})},
    {"global_kinds": 3},
    {"importance": {"a": 1.5}},
    {"importance": 0.5},
    {"importance": {"a": float("nan")}},
    {"default_importance": -0.1},
    {"episodic_n": -1},
    {"salience_k": 1.5},
    {"reflect_every": 0},
    {"reflect_window": 0},
    {"episodic_n": True},
    {"w_rel": -0.1},
    {"w_rec": float("inf")},
    {"decay": -1},
    {"w_imp": "0.3"},
    {"w_rel": 0, "w_rec": 0, "w_imp": 0},
])
def test_bad_settings_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        ViewConfig(**options)  # type: ignore[arg-type]
