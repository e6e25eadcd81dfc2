"""Isolation: a stateful property over many users, agents, contexts and channels.

Hypothesis drives writes of three users (items in several contexts and agents, some
sensitive or due, revisions, forgets, turns on several channels, tool calls that fail,
agent events private and global, forgetting a whole user) and, between them, reads
every Python read path as each user: search / recall / search_all (with queries
holding the other users' words), get / history / update / forget of the other users'
ids, listings, upcoming, conversations and sessions (the other users' session ids
included), tool stats and errors, timeline, entities, contexts, stats, the ledger
and its views (episodic, salient, beliefs, at a past moment too), the prompt blocks
and the profile (``ledgermem.agent.prompt``), the memory tools and the ``/memory``
command, and a per-user export. None ever shows another user's text or ids.

After ``forget_user``: no read finds that user, no event of theirs remains (the recall
bookkeeping still queued for their items included), and on SQLite their text is in no
byte of the database file or its WAL after a checkpoint. PostgreSQL's files are read
after the vacuum docs/reliability.md documents, in ``test_forget_user_on_postgres``.
"""

from __future__ import annotations

import io
import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from ledgermem import LedgermemError, Memory, NotFound, UserMemory
from ledgermem.agent.prompt import profile, system_prefix, turn_block
from ledgermem.agent.tools import MemoryTools, SlashCommands
from ledgermem.transfer import export_jsonl
from tests.support import FakeClock, is_postgres, raw, rows

EXAMPLES = itertools.count()
WORDS = st.sampled_from(["kite", "tea", "budget", "Lisbon", "doctor", "salary", "garden"])
AGENTS = st.sampled_from([None, "scribe", "planner"])
CONTEXTS = st.sampled_from(["global", "work", "home"])
CHANNELS = st.sampled_from(["telegram", "web"])


@dataclass
class Person:
    """One user of an example: the token in every text they write, and their ids."""

    user_id: str
    marker: str
    items: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    sessions: set[str] = field(default_factory=set)
    forgotten: bool = False


def shown(value: Any) -> str:
    return repr(value)


class IsolationMachine(RuleBasedStateMachine):
    """Three users writing and reading one store (``memory``, set by the test)."""

    memory: Memory
    clock: FakeClock

    def __init__(self) -> None:
        super().__init__()
        n = next(EXAMPLES)
        self.people = [Person(f"iso{n}u{i}", f"zq{n:04d}u{i}qz") for i in range(3)]
        self.step = 0

    def _handle(self, person: Person, agent: str | None = None, context: str = "global"
                ) -> UserMemory:
        return self.memory.for_user(person.user_id, agent_id=agent, context=context)

    def _text(self, person: Person, word: str) -> str:
        self.step += 1
        self.clock.advance(minutes=7)
        return f"{person.marker} {word} note {self.step}"

    # writes ----------------------------------------------------------------------
    @rule(who=st.integers(0, 2), agent=AGENTS, context=CONTEXTS, word=WORDS,
          sensitive=st.booleans(), due=st.booleans(), entity=st.booleans())
    def remember(self, who: int, agent: str | None, context: str, word: str,
                 sensitive: bool, due: bool, entity: bool) -> None:
        person = self.people[who]
        if person.forgotten:
            return
        item = self._handle(person, agent, context).remember(
            self._text(person, word), "preference" if due else "fact", sensitive=sensitive,
            due_at="in 2 days" if due else None,
            entity=f"person:pal_{person.marker}" if entity else None, dedup=False)
        person.items.append(item.id)
        person.ids.add(item.id)

    @rule(who=st.integers(0, 2), word=WORDS, forget=st.booleans())
    def change(self, who: int, word: str, forget: bool) -> None:
        person = self.people[who]
        if person.forgotten or not person.items:
            return
        handle = self._handle(person)
        target = person.items.pop(0)
        if forget:
            handle.forget(target)
        else:
            new = handle.revise(target, self._text(person, word))
            person.items.append(new.id)
            person.ids.add(new.id)

    @rule(who=st.integers(0, 2), channel=CHANNELS, agent=AGENTS, word=WORDS)
    def talk(self, who: int, channel: str, agent: str | None, word: str) -> None:
        person = self.people[who]
        if person.forgotten:
            return
        session = f"{person.user_id}:{channel}"
        turns = self._handle(person, agent).add_turns(
            [{"role": "user", "content": self._text(person, word)},
             {"role": "assistant", "content": f"noted, {person.marker}"}],
            session_id=session, infer=True)  # no LLM: queued, never extracted
        person.ids.update(t.id for t in turns)
        person.sessions.add(session)

    @rule(who=st.integers(0, 2), ok=st.booleans(), word=WORDS)
    def tool(self, who: int, ok: bool, word: str) -> None:
        person = self.people[who]
        if person.forgotten:
            return
        call = self._handle(person).log_tool_call(
            "lookup", {"q": self._text(person, word)}, success=ok,
            error=None if ok else f"{person.marker} timed out")
        person.ids.add(call.id)

    @rule(who=st.integers(0, 2), agent=st.sampled_from(["scribe", "planner"]),
          visible=st.booleans(), word=WORDS)
    def record(self, who: int, agent: str, visible: bool, word: str) -> None:
        person = self.people[who]
        if person.forgotten:
            return
        event = self._handle(person).record(
            "world.observed" if visible else "agent.spoke",
            {"text": self._text(person, word)}, agent_id=agent,
            visibility="global" if visible else "private")
        person.ids.add(event.id)

    @rule(who=st.integers(0, 2), word=WORDS)
    def search(self, who: int, word: str) -> None:
        """A search that touches (recall bookkeeping queued), as callers do."""
        person = self.people[who]
        self._handle(person).search(f"{word} {person.marker}")

    @rule(who=st.integers(0, 2))
    def forget_user(self, who: int) -> None:
        person = self.people[who]
        if person.forgotten:
            return
        self._handle(person).forget_user()
        person.forgotten = True
        self.memory.flush()  # queued recall bookkeeping must not bring the user back
        assert person.user_id not in self.memory.store.user_ids()
        if not is_postgres(self.memory):
            assert trace_in_sqlite_file(self.memory, person.marker) == 0
            assert trace_in_sqlite_file(self.memory, person.user_id) == 0

    # reads -------------------------------------------------------------------------
    @rule(who=st.integers(0, 2), agent=AGENTS, context=CONTEXTS)
    def read_everything(self, who: int, agent: str | None, context: str) -> None:
        self._check(self.people[who], agent, context)

    def teardown(self) -> None:
        for person in self.people:
            self._check(person, "scribe", "work")

    def _check(self, person: Person, agent: str | None, context: str) -> None:
        others = [p for p in self.people if p is not person]
        handle = self._handle(person, agent, context)
        seen = shown(reads(handle, others, self.memory))
        for other in others:
            assert other.marker not in seen, f"{person.user_id} saw {other.user_id}'s text"
            leaked = [i for i in other.ids if i in seen]
            assert not leaked, f"{person.user_id} saw {other.user_id}'s ids {leaked[:3]}"
            for other_id in sorted(other.ids)[:3]:
                for call in (handle.get, handle.history, handle.forget,
                             lambda i: handle.update(i, confidence=0.1)):
                    with pytest.raises(NotFound):
                        call(other_id)
        if person.forgotten:
            assert person.marker not in seen
            assert handle.stats()["events"] == 0


def reads(handle: UserMemory, others: list[Person], memory: Memory) -> list[Any]:
    """What every Python read path returns to ``handle``'s user, queries luring the
    other users' data (their words, entities and session ids)."""
    lure = " ".join(o.marker for o in others) + " kite tea budget note"
    got: list[Any] = [
        handle.search(lure, top_k=50), handle.recall(lure, include_superseded=True),
        handle.search_all(lure, top_k=50), handle.search(lure, as_of="in 1 day"),
        handle.search_conversations(lure, limit=50), handle.search_conversations(None),
        handle.all_knowledge(limit=None, include_superseded=True),
        handle.by_category("fact"), handle.by_category("preference"), handle.upcoming(30),
        handle.recent_conversations(100), handle.sessions(), handle.session_history(),
        handle.tool_stats(), handle.tool_errors(), handle.recent_errors(),
        handle.activity_timeline(3650), handle.entities(), handle.contexts(),
        handle.stats(), handle.status(), handle.ledger_events(limit=1000),
        handle.episodic("scribe", n=100), handle.salient("planner", lure, k=50),
        handle.beliefs("scribe"), handle.reflection_due("scribe"),
        system_prefix(handle), profile(handle), turn_block(handle),
        MemoryTools(handle).call("recall", {"query": lure, "limit": 50}),
        MemoryTools(handle).call("search_past_conversations", {"query": lure, "limit": 50}),
        SlashCommands(handle).handle("/memory"),
    ]
    for other in others:
        got.append(handle.by_entity(f"person:pal_{other.marker}"))
        for session in sorted(other.sessions):
            got += [handle.session_history(session),
                    handle.search_conversations(lure, session_id=session)]
    if handle.user_id in memory.store.user_ids():
        out = io.StringIO()
        export_jsonl(memory.store, out, users=[handle.user_id])
        got.append(out.getvalue())
    return got


def trace_in_sqlite_file(memory: Memory, text: str) -> int:
    """How often ``text`` is in the database file and its WAL, after a checkpoint (one
    of the store's own may be under way: another waits for it)."""
    path: Path = memory.store.path  # type: ignore[attr-defined]
    with raw(path) as conn:
        for _ in range(500):
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                break
            time.sleep(0.01)
    assert busy == 0, "the checkpoint could not finish: the WAL was not emptied"
    return sum(p.read_bytes().count(text.encode())
               for p in path.parent.glob(path.name + "*") if p.is_file())


ISOLATION = settings(max_examples=int(os.environ.get("ISOLATION_EXAMPLES", "6")),
                     stateful_step_count=14, deadline=None, database=None,
                     suppress_health_check=list(HealthCheck))
"""``ISOLATION_EXAMPLES=50`` for a longer hunt."""


def test_no_read_path_returns_another_users_data(db_url: str) -> None:
    clock = FakeClock()
    with Memory.open(db_url, embedder=None, clock=clock) as memory:
        IsolationMachine.memory, IsolationMachine.clock = memory, clock
        run_state_machine_as_test(IsolationMachine, settings=ISOLATION)


# PostgreSQL's files after forget_user --------------------------------------------------
def test_forget_user_on_postgres_leaves_no_trace_after_vacuum_full(
        pg_url: str, pg_admin_url: str) -> None:
    """docs/reliability.md: after ``forget_user``, ``ledgermem vacuum`` (``VACUUM FULL``
    of the store's tables) rewrites them, their indexes and TOAST into new files; the
    forgotten text is then in none of the schema's files. (WAL segments, replicas and
    backups keep it until they are recycled, as the docs say.)"""
    secret = "zanzibarquuxsecret"
    with Memory.open(pg_url, embedder=None) as memory:
        alice, bob = memory.for_user("alice"), memory.for_user("bob")
        for n in range(30):
            bob.remember(f"bob filler {n} " + "padding " * 20, dedup=False)
        alice.remember(f"my code is {secret}", sensitive=True)
        alice.add_turn("user", f"remember {secret}")
        alice.log_tool_call("vault", {"key": secret}, success=False, error=f"{secret} locked")
        alice.forget_user()
        assert rows(pg_url, "SELECT count(*) FROM events WHERE payload::text LIKE ?",
                    [f"%{secret}%"]) == [(0,)]
    schema = rows(pg_url, "SELECT current_schema()")[0][0]
    files = _schema_files(pg_admin_url, pg_url, schema)
    if not files or not all(f.exists() for f in files):
        pytest.skip("the server's data directory is not on this machine")
    before = sum(f.read_bytes().count(secret.encode()) for f in files)
    with Memory.open(pg_url, embedder=None) as memory:
        memory.store.vacuum()  # what `ledgermem vacuum` runs
    files = _schema_files(pg_admin_url, pg_url, schema)
    assert sum(f.read_bytes().count(secret.encode()) for f in files) == 0
    # (before the vacuum the deleted rows' bytes were still in the files: why it is needed)
    assert before > 0


def _schema_files(admin_url: str, url: str, schema: str) -> list[Path]:
    """The files of every table, index and TOAST table of ``schema``, after a
    ``CHECKPOINT`` wrote what the server held in memory to them (as a superuser: the
    data directory is the server's)."""
    import psycopg

    from tests.support import with_login

    database = rows(url, "SELECT current_database()")[0][0]
    with psycopg.connect(with_login(admin_url, dbname=database), autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        directory = conn.execute("SHOW data_directory").fetchone()
        found = conn.execute(
            "SELECT pg_relation_filepath(c.oid) FROM pg_class AS c JOIN pg_namespace AS n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'i') "
            "UNION SELECT pg_relation_filepath(t.oid) FROM pg_class AS c JOIN pg_namespace "
            "AS n ON n.oid = c.relnamespace JOIN pg_class AS t ON t.oid = c.reltoastrelid "
            "WHERE n.nspname = %s UNION SELECT pg_relation_filepath(i.indexrelid) FROM "
            "pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace JOIN pg_index "
            "AS i ON i.indrelid = c.reltoastrelid WHERE n.nspname = %s",
            [schema, schema, schema]).fetchall()
    assert directory is not None
    base = Path(directory[0])
    paths = [base / row[0] for row in found if row[0]]
    # a relation past 1 GB continues in PATH.1, PATH.2…
    return [p for path in paths for p in [path, *path.parent.glob(path.name + ".*")]]


def test_a_forgotten_user_is_refused_everywhere_after(mem: Memory) -> None:
    """A plain example beside the machine: bob's reads after alice is forgotten, and
    alice's handle, find nothing of hers and raise no error."""
    alice, bob = mem.for_user("alice"), mem.for_user("bob")
    item = alice.remember("alice secret zzq")
    bob.remember("bob's own note")
    alice.search("alice secret")
    alice.forget_user()
    mem.flush()
    assert mem.store.user_ids() == ["bob"]
    with pytest.raises(NotFound):
        alice.get(item.id)
    try:
        seen = shown(reads(alice, [], mem)) + shown(reads(bob, [], mem))
    except LedgermemError as exc:  # pragma: no cover - the failure is the finding
        pytest.fail(f"a read after forget_user failed: {exc!r}")
    assert "zzq" not in seen and item.id not in seen


@pytest.mark.sqlite_only  # reason: reads the database file's bytes
def test_forgetting_during_an_unfinished_reembed_leaves_no_text(mem: Memory) -> None:
    import numpy as np

    alice = mem.for_user("alice")
    kept = mem.for_user("bob").remember("bob's note")
    item = alice.remember("my code is zanzibarquux")
    turn = alice.add_turn("user", "say zanzibarquux")
    # what an interrupted `reembed` leaves: vectors of the new model staged beside the rows
    vector = np.ones(8, dtype=np.float32)
    mem.store.stage_embeddings("knowledge", [(item.id, item.content, vector),
                                             (kept.id, kept.content, vector)], "hash:8")
    mem.store.stage_embeddings("conversations", [(turn.id, f"user: {turn.content}",
                                                  vector)], "hash:8")
    alice.forget(item.id)
    alice.forget_user()
    assert trace_in_sqlite_file(mem, "zanzibarquux") == 0


@pytest.mark.sqlite_only  # reason: reads the database file's bytes
def test_forget_user_leaves_no_stale_copy_in_the_sqlite_pages(tmp_path: Path) -> None:
    """``secure_delete`` zeroes deleted cells and freed pages, not the stale copies an
    earlier page split left in a b-tree page's unallocated gap (16 and 35 copies were
    left here before): ``forget_user`` rewrites the file (``SQLiteStore.vacuum``)."""
    import random

    leaks = []
    for seed in (0, 1):  # two interleavings of three users' writes, both leaking today
        rng = random.Random(seed)
        with Memory.open(tmp_path / f"stale-{seed}.db", embedder=None) as memory:
            users = [memory.for_user(u) for u in ("userqqx", "usermmx", "userzzx")]
            for n in range(1_500):
                k = rng.randrange(3)
                text = ("zqsecretword" if k == 0 else "plainword") + f" n{n} more text"
                if rng.random() < 0.5:
                    users[k].remember(text, dedup=False)
                else:
                    users[k].add_turn("user", text)
            users[0].forget_user()
            for n in range(500):
                users[rng.randrange(1, 3)].remember(f"after {n} text", dedup=False)
            leaks.append(trace_in_sqlite_file(memory, "zqsecretword")
                         + trace_in_sqlite_file(memory, "userqqx"))
    assert leaks == [0, 0]
