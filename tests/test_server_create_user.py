"""Creating a user (``POST /v1/admin/users``, ``KeyRing.create_user``) is one atomic
step: of many requests for the same new user, made at once, exactly one gets its first
key and the others a 409, on one server process or several sharing one store."""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ledgermem import InvalidInput, Memory
from ledgermem.server.keys import KeyInfo, KeyRing, UserExists
from tests.server_support import free_port, serve_env, start_server

RACERS = 8
USERS = ("carol", "dave", "erin", "frank")
T = TypeVar("T")


def _race(attempt: Callable[[], T], racers: int = RACERS) -> list[T | Exception]:
    """``attempt()`` in ``racers`` threads released together; what each returned or
    raised."""
    start = threading.Barrier(racers)

    def one() -> T | Exception:
        start.wait(timeout=30)
        try:
            return attempt()
        except Exception as exc:  # the outcome under test
            return exc

    with ThreadPoolExecutor(racers) as pool:
        return list(pool.map(lambda _: one(), range(racers)))


def _create_user(memory: Memory, user: str) -> tuple[str, KeyInfo]:
    return KeyRing(memory.store).create_user(user)


def test_racing_creates_of_one_user_let_exactly_one_win(db_url: str) -> None:
    # Every thread its own KeyRing and connection, as several server processes have.
    with Memory.open(db_url, embedder=None) as memory:
        for user in USERS:
            outcomes = _race(functools.partial(_create_user, memory, user))
            made = [o for o in outcomes if isinstance(o, tuple)]
            refused = [o for o in outcomes if isinstance(o, UserExists)]
            assert (len(made), len(refused)) == (1, RACERS - 1), outcomes
            keys = KeyRing(memory.store)
            assert [k.key_id for k in keys.list(user) if k.active] == [made[0][1].key_id]
            assert keys.verify(made[0][0]) is not None


def test_a_user_with_memory_or_a_live_key_exists_and_an_erased_one_does_not(
        mem: Memory) -> None:
    keys = KeyRing(mem.store)
    mem.for_user("carol").remember("Carol keeps bees")
    with pytest.raises(UserExists):
        keys.create_user("carol")
    assert keys.list("carol") == []
    token, info = keys.create_user("dave", label="laptop")
    assert (info.user, info.label, info.agent) == ("dave", "laptop", None)
    assert keys.verify(token) is not None
    with pytest.raises(UserExists):
        keys.create_user("dave")
    keys.revoke(info.key_id)
    _, again = keys.create_user("dave")       # erased: keys revoked, no memory
    assert again.key_id != info.key_id
    with pytest.raises(InvalidInput):
        keys.create_user("")
    with pytest.raises(InvalidInput):
        keys.create_user("erin", label="x" * 1_000)
    assert keys.list("erin") == []


@pytest.mark.sqlite_only
def test_racing_creates_over_http_on_two_server_processes(tmp_path: Path) -> None:
    """SQLite only: two uvicorn workers on one file are the two processes here; the
    store test above races the same check on PostgreSQL."""
    admin = "operator-chosen-admin-key-for-the-race"
    env = serve_env(tmp_path / "data", {"LEDGERMEM_ADMIN_KEY": admin})
    served = start_server(["--db", str(tmp_path / "m.db"), "--embedder", "none", "serve",
                           "--no-rate-limit", "--workers", "2", "--port", str(free_port())],
                          env)
    try:
        for user in USERS:
            def create(user: str = user) -> tuple[int, Any]:
                # A connection of its own: uvicorn's workers share connections out.
                with served.client(admin) as client:
                    response = client.post("/v1/admin/users", json={"user": user})
                    return response.status_code, response.json()

            outcomes = _race(create)
            answers = [o for o in outcomes if isinstance(o, tuple)]
            assert len(answers) == RACERS, outcomes
            assert Counter(status for status, _ in answers) == {201: 1, 409: RACERS - 1}, (
                outcomes)
            made = next(body for status, body in answers if status == 201)
            assert all(body["error"]["code"] == "conflict"
                       for status, body in answers if status == 409)
            with served.client(admin) as client:
                keys = client.get("/v1/admin/keys", params={"user": user}).json()
            assert [(k["key_id"], k["revoked_at"]) for k in keys] == [
                (made["info"]["key_id"], None)]
            with served.client(made["key"]) as client:
                assert client.get("/v1/me").json()["user"] == user
    finally:
        code, out = served.stop()
    assert code == 0 and "Traceback" not in out, out
