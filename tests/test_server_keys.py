"""API keys (``ledgermem.server.keys``) on both stores: made once, stored hashed, found
by id and compared by hash, revoked for every process at once; the admin key made at
the first start or given by the environment; the local user's key file."""

from __future__ import annotations

import hashlib
import io
import stat
from pathlib import Path

import pytest

from ledgermem import InvalidInput, Memory, NotFound
from ledgermem.server.keys import ENV_ADMIN_KEY_ID, KeyRing, Principal
from ledgermem.server.serve import local_key, prepare_keys
from ledgermem.transfer import export_jsonl
from tests.support import FakeClock, rows


def test_a_key_opens_as_its_user_until_revoked(mem: Memory, clock: FakeClock) -> None:
    ring = KeyRing(mem.store, clock=clock)
    token, info = ring.create("alice", label="laptop")
    assert token.startswith(f"lm_{info.key_id}_")
    assert (info.user, info.agent, info.label, info.admin, info.active) == (
        "alice", None, "laptop", False, True)
    assert info.created_at == clock.iso()
    assert ring.verify(token) == Principal(info.key_id, "alice", None, False)
    bound, bound_info = ring.create("alice", agent="miller")
    assert ring.verify(bound) == Principal(bound_info.key_id, "alice", "miller", False)
    clock.advance(minutes=1)
    ring.revoke(info.key_id)
    assert ring.verify(token) is None
    assert ring.verify(bound) is not None
    assert sorted((k.key_id, k.revoked_at) for k in ring.list("alice")) == sorted([
        (info.key_id, clock.iso()), (bound_info.key_id, None)])
    with pytest.raises(NotFound):
        ring.revoke(info.key_id)  # already revoked
    with pytest.raises(NotFound):
        ring.revoke("0123456789abcdef")


def test_only_the_hash_of_the_secret_is_stored(mem: Memory) -> None:
    ring = KeyRing(mem.store)
    token, info = ring.create("alice")
    secret = token.split("_", 2)[2]
    stored = rows(mem, "SELECT key_id, user_id, secret_hash FROM api_keys")
    assert stored == [(info.key_id, "alice", hashlib.sha256(secret.encode()).hexdigest())]
    dump = repr(rows(mem, "SELECT * FROM api_keys"))
    assert secret not in dump and token not in dump


@pytest.mark.parametrize("forged", [
    "", "lm_", "nonsense", "Bearer x", "lm_0123456789abcdef_" + "a" * 43,
    "lm_ZZZZ_secret-secret-secret-secret", "x" * 600,
])
def test_malformed_or_unknown_keys_open_nothing(mem: Memory, forged: str) -> None:
    ring = KeyRing(mem.store)
    ring.create("alice")
    assert ring.verify(forged) is None


def test_a_key_with_a_changed_secret_or_another_id_opens_nothing(mem: Memory) -> None:
    ring = KeyRing(mem.store)
    alice, alice_info = ring.create("alice")
    bob, _ = ring.create("bob")
    secret = alice.split("_", 2)[2]
    changed = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    assert ring.verify(f"lm_{alice_info.key_id}_{changed}") is None
    # bob's id with alice's secret: the lookup is by id, the compare by hash
    assert ring.verify(f"lm_{bob.split('_')[1]}_{secret}") is None


def test_the_admin_key_is_made_once_and_shown_once(mem: Memory) -> None:
    ring = KeyRing(mem.store)
    token = ring.ensure_admin()
    assert token is not None
    found = ring.verify(token)
    assert found is not None and found.admin and found.user is None
    assert ring.ensure_admin() is None  # it exists: nothing new to show
    assert KeyRing(mem.store).ensure_admin() is None  # another process sees it too
    assert [k.admin for k in ring.list()] == [True]


def test_an_admin_key_from_the_environment_is_accepted_and_never_stored(mem: Memory) -> None:
    ring = KeyRing(mem.store)
    chosen = "operator-chosen-admin-key-0123456789"
    assert ring.ensure_admin(chosen) is None
    assert ring.verify(chosen) == Principal(ENV_ADMIN_KEY_ID, None, None, True)
    assert ring.list() == []
    assert KeyRing(mem.store).verify(chosen) is None  # a process not given it
    with pytest.raises(InvalidInput, match="24 to 512"):
        ring.ensure_admin("short")


@pytest.mark.parametrize("user", ["", " ", "a\x00b", "x" * 1001])
def test_a_key_for_a_bad_user_id_is_refused(mem: Memory, user: str) -> None:
    with pytest.raises(InvalidInput):
        KeyRing(mem.store).create(user)
    assert KeyRing(mem.store).list() == []


def test_keys_survive_a_rebuild_and_stay_out_of_exports(mem: Memory) -> None:
    ring = KeyRing(mem.store)
    token, info = ring.create("alice")
    mem.for_user("alice").remember("Likes tea")
    mem.rebuild()
    assert ring.verify(token) is not None
    out = io.StringIO()
    assert export_jsonl(mem.store, out) == 1
    assert info.key_id not in out.getvalue() and "api_keys" not in out.getvalue()


def test_the_local_key_file_is_owner_only_and_kept_while_it_opens(
        mem: Memory, tmp_path: Path) -> None:
    ring = KeyRing(mem.store)
    path = tmp_path / "keys" / "local.key"
    first = local_key(ring, "local", path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == first
    assert local_key(ring, "local", path) == first  # the same key at the next start
    found = ring.verify(first)
    assert found is not None
    ring.revoke(found.key_id)
    second = local_key(ring, "local", path)  # a revoked key is replaced
    assert second != first and ring.verify(second) is not None
    assert local_key(ring, "someone-else", path) != second  # another user: a new key


def test_start_up_keys_and_a_new_admin_key(mem: Memory, tmp_path: Path) -> None:
    first = prepare_keys(mem.store, "local", tmp_path, {})
    assert first.admin_key is not None and first.user == "local"
    again = prepare_keys(mem.store, "local", tmp_path, {})
    assert again.admin_key is None and again.user_key == first.user_key
    ring = KeyRing(mem.store)
    renewed = prepare_keys(mem.store, "local", tmp_path, {}, new_admin_key=True)
    assert renewed.admin_key is not None
    assert ring.verify(first.admin_key) is None and ring.verify(renewed.admin_key) is not None
