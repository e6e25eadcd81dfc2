"""The write-heavy workload a crash trial kills, and what must hold afterwards.

A child process writes as user ``crash`` until it is sent SIGKILL: ``remember``,
``revise``, ``forget``, ``add_turns(..., infer=True)``, extraction (``flush``, the
LLM a ``ScriptedLLMServer`` in the parent that answers ADD for each batch's tag),
``log_tool_call`` (a failure also writes an ``error`` item, in the same transaction)
and ``reembed`` to the other of two hashing models, in a seeded random mix, with the
background embedding worker writing vectors meanwhile.

Each call is logged before it starts (``{"begin": op, …}``) and once it has returned
(``{"done": op, …}``, with the ids it wrote), each line with one ``write(2)`` to a
file opened ``O_APPEND``: what the kernel has is kept when the process is killed, so
a ``done`` line is a write the caller saw acknowledged, and a ``begin`` without its
``done`` is the one call the kill may have cut short.

``check_workload`` reads every trial's log and the store and lists what is wrong:
an acknowledged write missing or changed, a cut call half applied, a turn batch in
two extraction states, an extracted item without its batch marked done (or the
reverse), a failed tool call without its error item (or the reverse), a vector of
another model than the store records.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgermem import ExtractionOptions, Memory, OpenAICompatibleLLM
from ledgermem.memory import open_store
from ledgermem.retrieval.embedding import reembed
from ledgermem.store.base import Store, TurnQuery
from ledgermem.testing import HashEmbedder
from ledgermem.types import ItemQuery

__all__ = ["CRASH_USER", "MODELS", "Acknowledged", "LogFile", "check_workload",
           "extracted_text", "extraction_answer", "open_memory", "read_log", "recover",
           "workload_child"]

CRASH_USER = "crash"
MODELS = ("hash:16", "hash:24")
"""The two embedding models ``reembed`` moves the store between."""
TOOL = "crashtool"
PADDING = "while we talked about the plans for the coming week and the weather there"
"""Words that take a batch of three turns over extraction's 20-word threshold."""


def fact_text(tag: str) -> str:
    """A text sharing no word with another tag's, so dedup never merges two."""
    return f"{tag} fact " + " ".join(f"{tag}f{i}" for i in range(4))


def extracted_text(tag: str) -> str:
    """What the scripted model extracts from the batch of turns tagged ``tag``."""
    return f"{tag} extracted " + " ".join(f"{tag}x{i}" for i in range(4))


def turn_text(tag: str, n: int) -> str:
    return f"{tag} turn {n} of 3 {PADDING}"


def tool_error(tag: str) -> str:
    return " ".join(f"{tag}e{i}" for i in range(5))


def error_item_text(error: str) -> str:
    """The ``error`` item ``log_tool_call`` writes for a failed call."""
    return f"Tool {TOOL} failed: {error}"


_BATCH_TAG = re.compile(r"\b(s\d+n\d+) turn \d of 3\b")


def extraction_answer(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted model: one ADD per batch tag among the prompt's new turns."""
    prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    section = prompt.split("New conversation turns:", 1)[-1]
    tags = sorted(set(_BATCH_TAG.findall(section)))
    return {"operations": [{"op": "ADD", "content": extracted_text(tag), "category": "fact"}
                           for tag in tags]}


def open_memory(url: str, llm_url: str | None) -> Memory:
    """The store at ``url`` with the hashing model it records (the first of ``MODELS``
    for a new one) and, given ``llm_url``, the scripted LLM (extraction on ``flush``)."""
    store = open_store(url)
    model = store.get_meta("embedding_model") or MODELS[0]
    embedder = HashEmbedder(dimensions=int(model.split(":")[1]))
    llm = (OpenAICompatibleLLM("scripted-model", llm_url, timeout=30, retries=0)
           if llm_url else None)
    return Memory(store, embedder=embedder, llm=llm,
                  extraction=ExtractionOptions(background=False, claim_seconds=1.0))


def recover(url: str, llm_url: str) -> None:
    """What a restart does: open the store with the LLM and finish the queue (the dead
    writer's claims lapse after a second)."""
    memory = open_memory(url, llm_url)
    try:
        memory.flush()
    finally:
        memory.close()


class LogFile:
    """One JSON line per ``note``, each a single ``write(2)`` to an append-only file."""

    def __init__(self, path: str | Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def note(self, **line: Any) -> None:
        os.write(self.fd, (json.dumps(line) + "\n").encode())


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The lines a ``LogFile`` holds (none if it was never written)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def workload_child(url: str, log: str, seed: int, llm_url: str) -> None:
    """Write until killed (see the module's docstring). Runs in a spawned process."""
    rng = random.Random(seed)
    out = LogFile(log)
    memory = open_memory(url, llm_url)
    user = memory.for_user(CRASH_USER)
    session = f"crash-{seed}"
    live: list[str] = []
    out.note(start=time.time())
    for n in itertools.count(1):
        tag, pick = f"s{seed}n{n}", rng.random()
        if live and pick < 0.15:
            old = rng.choice(live)
            out.note(begin="revise", tag=tag, id=old)
            new = user.revise(old, fact_text(tag))
            live[live.index(old)] = new.id
            out.note(done="revise", tag=tag, id=old, new=new.id)
        elif live and pick < 0.25:
            gone = live.pop(rng.randrange(len(live)))
            out.note(begin="forget", id=gone)
            user.forget(gone)
            out.note(done="forget", id=gone)
        elif pick < 0.45:
            out.note(begin="turns", tag=tag)
            turns = user.add_turns([{"role": "user" if i != 1 else "assistant",
                                     "content": turn_text(tag, i)} for i in range(3)],
                                   session_id=session, infer=True)
            out.note(done="turns", tag=tag, ids=[t.id for t in turns])
        elif pick < 0.53:
            out.note(begin="extract")
            memory.flush()
            out.note(done="extract")
        elif pick < 0.61:
            ok = rng.random() < 0.5
            error = None if ok else tool_error(tag)
            out.note(begin="tool", tag=tag, error=error)
            call = user.log_tool_call(TOOL, {"tag": tag}, success=ok, error=error,
                                      duration_ms=1.5)
            out.note(done="tool", tag=tag, id=call.id, error=error)
        elif pick < 0.64:
            old_model = memory.embedder.model_id
            target = MODELS[1] if old_model == MODELS[0] else MODELS[0]
            out.note(begin="reembed", old=old_model, new=target)
            memory.close()
            store = open_store(url)
            try:
                reembed(store, HashEmbedder(dimensions=int(target.split(":")[1])))
            finally:
                store.close()
            out.note(done="reembed", old=old_model, new=target)
            memory = open_memory(url, llm_url)
            user = memory.for_user(CRASH_USER)
        else:
            out.note(begin="remember", tag=tag)
            item = user.remember(fact_text(tag))
            live.append(item.id)
            out.note(done="remember", tag=tag, id=item.id)


# what must hold ------------------------------------------------------------------------
@dataclass
class Acknowledged:
    """What the logs of all trials so far say the writers saw acknowledged."""

    active: dict[str, str] = field(default_factory=dict)
    superseded: dict[str, str] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    turns: dict[str, list[str]] = field(default_factory=dict)
    extracted: set[str] = field(default_factory=set)
    tools: dict[str, str | None] = field(default_factory=dict)
    model: str | None = None
    models: set[str] = field(default_factory=set)
    """Every model the store may record now (one, unless a reembed was cut)."""
    unsure: set[str] = field(default_factory=set)
    """Items a cut call may or may not have changed."""
    cuts: list[dict[str, Any]] = field(default_factory=list)
    writes: Counter[str] = field(default_factory=Counter)

    def read(self, lines: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Take one trial's log; returns the call the kill cut short, if any."""
        cut: dict[str, Any] | None = None
        for line in lines:
            if "begin" in line:
                cut = line
            elif "done" in line:
                cut = None
                self._done(line)
        if cut is not None:
            self.cuts.append(cut)
            if "id" in cut:
                self.unsure.add(cut["id"])
            if cut["begin"] == "reembed":
                self.models = {cut["old"], cut["new"]}
        return cut

    def _done(self, line: dict[str, Any]) -> None:
        op = line["done"]
        self.writes[op] += 1
        if op == "remember":
            self.active[line["id"]] = fact_text(line["tag"])
        elif op == "revise":
            self.superseded[line["id"]] = line["new"]
            self.active.pop(line["id"], None)
            self.active[line["new"]] = fact_text(line["tag"])
        elif op == "forget":
            self.active.pop(line["id"], None)
            self.gone.add(line["id"])
        elif op == "turns":
            self.turns[line["tag"]] = line["ids"]
        elif op == "extract":
            self.extracted.update(self.turns)
        elif op == "tool":
            self.tools[line["id"]] = line["error"]
        elif op == "reembed":
            self.model = line["new"]
            self.models = {line["new"]}


def check_workload(store: Store, seen: Acknowledged, cut: dict[str, Any] | None
                   ) -> list[str]:
    """Problems of ``store`` after a kill, against what was acknowledged."""
    problems = _acknowledged_problems(store, seen)
    if cut is not None:
        problems += [f"cut {cut['begin']}: {p}" for p in _cut_problems(store, seen, cut)]
    problems += _batch_problems(store)
    problems += _tool_problems(store)
    problems += _vector_problems(store, seen)
    return problems


def _items_with(store: Store, text: str) -> list[Any]:
    return store.query_items(CRASH_USER, ItemQuery(content=text, include_superseded=True))[0]


def _acknowledged_problems(store: Store, seen: Acknowledged) -> list[str]:
    problems = []
    for item_id, text in seen.active.items():
        if item_id in seen.unsure:
            continue
        item = store.get_item(CRASH_USER, item_id)
        if item is None or item.content != text or not item.active:
            problems.append(f"acknowledged item {item_id} ({text!r}) is {item}")
    for old, new in seen.superseded.items():
        item = store.get_item(CRASH_USER, old)
        if item is None or item.superseded_by != new or item.active:
            problems.append(f"acknowledged revision {old} -> {new}: the old version is {item}")
    problems += [f"forgotten item {item_id} is back" for item_id in sorted(seen.gone)
                 if store.get_item(CRASH_USER, item_id) is not None]
    for tag, ids in seen.turns.items():
        found = store.query_turns(CRASH_USER, TurnQuery(ids=tuple(ids)))
        if [t.content for t in found] != [turn_text(tag, i) for i in range(3)]:
            problems.append(f"acknowledged turns of {tag}: found {len(found)} of 3")
    done = set(store.extraction_ids(CRASH_USER, "done"))
    for tag in sorted(seen.extracted):
        if len(_items_with(store, extracted_text(tag))) != 1 or not set(seen.turns[tag]) <= done:
            problems.append(f"acknowledged extraction of {tag} is not there")
    calls = {call.id: call for call in store.query_tool_calls(CRASH_USER)}
    for call_id, error in seen.tools.items():
        call = calls.get(call_id)
        if call is None or call.error != error or call.success != (error is None):
            problems.append(f"acknowledged tool call {call_id} is {call}")
    model = store.get_meta("embedding_model")
    if seen.models and model not in seen.models:
        problems.append(f"the store records {model}, the acknowledged reembeds say "
                        f"{sorted(seen.models)}")
    return problems


def _cut_problems(store: Store, seen: Acknowledged, cut: dict[str, Any]) -> list[str]:
    """The call the kill cut short is all there or not at all."""
    op = cut["begin"]
    if op == "turns":
        found = [t for t in store.query_turns(CRASH_USER, TurnQuery())
                 if t.content.startswith(f"{cut['tag']} turn ")]
        return [] if len(found) in (0, 3) else [f"{len(found)} of 3 turns"]
    if op == "forget":
        item = store.get_item(CRASH_USER, cut["id"])
        ok = item is None or (item.active and item.content == seen.active.get(cut["id"]))
        return [] if ok else [f"item is {item}"]
    if op == "tool":
        calls = [c for c in store.query_tool_calls(CRASH_USER, name=TOOL)
                 if c.arguments == {"tag": cut["tag"]}]
        return [] if len(calls) <= 1 else [f"{len(calls)} tool calls"]
    if op not in ("remember", "revise"):
        return []  # extract, reembed: the invariants below say it all
    made = _items_with(store, fact_text(cut["tag"]))
    problems = [f"{len(made)} items"] if len(made) > 1 else []
    if op == "revise":
        old = store.get_item(CRASH_USER, cut["id"])
        if old is None or old.superseded_by != (made[0].id if made else None):
            problems.append(f"the old version is {old}, the new one {made}")
    return problems


def _states(store: Store) -> dict[str, str | None]:
    states: dict[str, str | None] = {}
    for state in ("pending", "done", "skipped", "failed"):
        states.update(dict.fromkeys(store.extraction_ids(CRASH_USER, state), state))
    return states


def _batch_problems(store: Store) -> list[str]:
    """Each batch of turns is in one extraction state, and its extracted item exists
    once if the batch is done, never otherwise."""
    states = _states(store)
    batches: dict[str, set[str | None]] = {}
    for turn in store.query_turns(CRASH_USER, TurnQuery()):
        found = _BATCH_TAG.match(turn.content)
        if found:
            batches.setdefault(found.group(1), set()).add(states.get(turn.id))
    problems = [f"turns of {tag} are in states {sorted(map(str, s))}"
                for tag, s in sorted(batches.items()) if len(s) != 1]
    for tag, state in sorted(batches.items()):
        count = len(_items_with(store, extracted_text(tag)))
        if count != (1 if state == {"done"} else 0):
            problems.append(f"batch {tag} is {sorted(map(str, state))} with {count} items "
                            "extracted from it")
    return problems


def _tool_problems(store: Store) -> list[str]:
    """A failed tool call and its error item are written together, or not at all."""
    failed = Counter(call.error for call in store.query_tool_calls(CRASH_USER, name=TOOL)
                     if not call.success)
    items = Counter(item.content for item in store.query_items(
        CRASH_USER, ItemQuery(category="error", include_superseded=True))[0])
    wanted = Counter({error_item_text(str(error)): count for error, count in failed.items()})
    return [] if items == wanted else [f"error items {dict(items)} for failed calls "
                                       f"{dict(wanted)}"]


def _vector_problems(store: Store, seen: Acknowledged) -> list[str]:
    model = store.get_meta("embedding_model")
    dims = store.get_meta("embedding_dimensions")
    problems = []
    for table in ("knowledge", "conversations"):
        last = ""
        while rows := store.stored_embeddings(table, last, 1000):
            for row_id, _, vector, row_model in rows:
                if row_model != model or (dims and len(vector) != int(dims)):
                    problems.append(f"{table} {row_id}: a {len(vector)}-dimension vector of "
                                    f"{row_model}, the store records {model} ({dims})")
            last = rows[-1][0]
    return problems[:5]
