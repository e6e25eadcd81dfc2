"""Process entry points for the multi-process tests (spawned children import this)."""

from __future__ import annotations

import itertools
import json
import os
import random
from typing import Any

from ledgermem import Memory


def write_items_and_turns(path: str, worker: int, count: int, start: Any) -> None:
    """Open the shared file and write ``count`` unique items and ``count`` turns.

    ``start`` is a multiprocessing barrier: every child begins writing at once.
    """
    memory = Memory.open(path, embedder=None)
    try:
        user = memory.for_user("shared")
        start.wait(timeout=60)
        for n in range(count):
            user.remember(f"worker{worker} item{n} " + " ".join(
                f"p{worker}w{n}t{i}" for i in range(4)), metadata={"worker": worker})
            user.add_turn("user" if n % 2 else "assistant", f"worker {worker} turn {n}",
                          session_id=f"worker-{worker}")
    finally:
        memory.close()


def crash_words(tag: str) -> str:
    """A text sharing no word with any other tag's, so dedup never merges two."""
    return f"{tag} fact " + " ".join(f"{tag}w{i}" for i in range(4))


def write_until_killed(url: str, log: str, seed: int) -> None:
    """A write-heavy workload that runs until the parent kills it: remember, revise,
    forget and add_turns (three turns) in a random mix, as user ``crash``.

    Each call is logged to ``log`` as one JSON line before it starts (``{"begin": op,
    ...}``) and one once it has returned (``{"done": op, ...}``, with the ids it
    wrote), each with a single ``write(2)``: what the kernel has is kept when the
    process is killed, so a ``done`` line is a write the caller saw acknowledged, and a
    ``begin`` with no ``done`` is the one call the kill may have cut short.
    """
    rng = random.Random(seed)
    memory = Memory.open(url, embedder=None)
    user = memory.for_user("crash")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def note(**line: Any) -> None:
        os.write(fd, (json.dumps(line) + "\n").encode())

    live: list[str] = []
    for n in itertools.count(1):
        tag, pick = f"s{seed}n{n}", rng.random()
        if live and pick < 0.2:
            old = rng.choice(live)
            note(begin="revise", tag=tag, id=old)
            new = user.revise(old, crash_words(tag))
            live[live.index(old)] = new.id
            note(done="revise", tag=tag, id=old, new=new.id)
        elif live and pick < 0.3:
            gone = live.pop(rng.randrange(len(live)))
            note(begin="forget", id=gone)
            user.forget(gone)
            note(done="forget", id=gone)
        elif pick < 0.6:
            note(begin="turns", tag=tag)
            turns = user.add_turns([{"role": "user", "content": f"{tag} turn {i} of 3"}
                                    for i in range(3)], session_id=f"crash-{seed}")
            note(done="turns", tag=tag, ids=[t.id for t in turns])
        else:
            note(begin="remember", tag=tag)
            item = user.remember(crash_words(tag))
            live.append(item.id)
            note(done="remember", tag=tag, id=item.id)
