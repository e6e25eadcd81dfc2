"""Vector files beside a SQLite store: used only when they match the store exactly.

Each test writes through one store object and searches through another opened on the
same file, as a second process would (each store object has its own in-process index
and connections); a third store with vector files off is the fresh exact load every
answer is compared with.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from ledgermem.clock import iso, new_id, system_clock
from ledgermem.domain.planners import plan_add, plan_change, plan_forget
from ledgermem.store import vector_file
from ledgermem.store.sqlite import SQLiteStore
from ledgermem.types import START_CONFIDENCE, Item, ItemQuery, Scope

DIMS = 16
MODEL = "test-model"
USER = "alice"


def _store(path: Path, rows: int | None = 50) -> SQLiteStore:
    store = SQLiteStore(path)
    store.vector_file_rows = rows
    return store


def _add(store: SQLiteStore, rng: np.random.Generator, count: int, user: str = USER
         ) -> list[str]:
    """``count`` items of ``user`` with random unit vectors, through the store's
    ``set_embeddings`` path (as the embedding worker writes them)."""
    if store.get_meta("embedding_model") is None:
        store.set_meta("embedding_model", MODEL)
    now = iso(system_clock())
    items = [Item(id=new_id(), user_id=user, category="fact", content=f"note {n} {new_id()}",
                  source="user", confidence=START_CONFIDENCE["user"], created_at=now,
                  updated_at=now, valid_from=now) for n in range(count)]
    vectors = rng.standard_normal((count, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with store.transaction():
        for item in items:
            store.append(plan_add(Scope(user), item, reason=None, now=now))
        store.set_embeddings("knowledge", [(item.id, item.content, vectors[n])
                                           for n, item in enumerate(items)], MODEL)
    return [item.id for item in items]


def _search(store: SQLiteStore, query: npt.NDArray[np.float32], user: str = USER,
            limit: int = 20) -> list[tuple[str, float]]:
    return store.vector_search_items(user, query, ItemQuery(), limit)


def _queries(rng: np.random.Generator, count: int = 5) -> list[npt.NDArray[np.float32]]:
    return [rng.standard_normal(DIMS).astype(np.float32) for _ in range(count)]


def _same_as_fresh(path: Path, store: SQLiteStore, queries: list[npt.NDArray[np.float32]],
                   user: str = USER) -> None:
    fresh = _store(path, rows=None)
    try:
        for query in queries:
            got, want = _search(store, query, user), _search(fresh, query, user)
            assert [i for i, _ in got] == [i for i, _ in want]
            np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-5)
    finally:
        fresh.close()


def _mapped(store: SQLiteStore, user: str = USER) -> bool:
    """Whether the store's block for ``user`` is the file mapped (not loaded from BLOBs)."""
    return isinstance(store._indexes["knowledge"].users[user].matrix, np.memmap)


def _file(path: Path, user: str = USER) -> Path:
    return vector_file.file_for(vector_file.vectors_dir(path), "knowledge", user)


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, SQLiteStore, np.random.Generator]:
    """A store of 200 vectors whose file the first search wrote."""
    path = tmp_path / "m.db"
    rng = np.random.default_rng(11)
    writer = _store(path)
    _add(writer, rng, 200)
    _search(writer, _queries(rng, 1)[0])
    assert _file(path).is_file()
    return path, writer, rng


def test_a_second_store_maps_the_file_and_reads_no_blob(
        built: tuple[Path, SQLiteStore, np.random.Generator]) -> None:
    path, _, rng = built
    reader = _store(path)
    statements: list[str] = []
    reader.trace(statements.append)
    queries = _queries(rng)
    _search(reader, queries[0])
    reader.trace(None)
    assert _mapped(reader)
    cursor = reader._indexes["knowledge"].users[USER].cursor
    assert cursor > 0
    reads = [s for s in statements if "embedding FROM knowledge" in s]
    # One read of vectors, for rows after the file's cursor only: none here.
    assert reads == [s for s in reads if f"emb_seq > {cursor}" in s] and len(reads) == 1
    assert reader._read(f"SELECT count(*) FROM knowledge WHERE user_id = '{USER}' AND "
                        f"emb_seq > {cursor}")[0][0] == 0
    _same_as_fresh(path, reader, queries)


def test_a_second_store_without_files_reads_every_blob(tmp_path: Path) -> None:
    """The contrast of the test above: with files off, the first search reads all rows."""
    path = tmp_path / "m.db"
    rng = np.random.default_rng(3)
    _add(_store(path), rng, 80)
    reader = _store(path, rows=None)
    statements: list[str] = []
    reader.trace(statements.append)
    _search(reader, _queries(rng, 1)[0])
    assert any("embedding FROM knowledge" in s and "emb_seq > 0" in s for s in statements)
    assert not vector_file.vectors_dir(path).exists()


def test_rows_written_after_the_file_are_topped_up(
        built: tuple[Path, SQLiteStore, np.random.Generator]) -> None:
    path, writer, rng = built
    _add(writer, rng, 30)
    reader = _store(path)
    queries = _queries(rng)
    _search(reader, queries[0])
    block = reader._indexes["knowledge"].users[USER]
    assert (block.file_rows, block.count) == (200, 230)  # read from the file, then grown
    _same_as_fresh(path, reader, queries)


def test_a_row_forgotten_elsewhere_is_never_served(
        built: tuple[Path, SQLiteStore, np.random.Generator]) -> None:
    path, writer, rng = built
    queries = _queries(rng)
    reader = _store(path)
    target = _search(reader, queries[0])[0][0]
    item = writer.get_item(USER, target)
    assert item is not None
    file_before = _file(path).read_bytes()
    with writer.writing_for(USER):  # what Memory.forget does
        writer.append(plan_forget(Scope(USER), item, now=iso(system_clock())))
        writer.redact(USER, target)
    assert not _file(path).exists()  # the forget removed the file holding its vector
    # A file written before the forget (a copy put back) still never serves it.
    _file(path).write_bytes(file_before)
    late = _store(path)
    assert all(i != target for q in queries for i, _ in _search(late, q))
    assert _mapped(late)
    _same_as_fresh(path, late, queries)
    # ... and it was written again without the forgotten row.
    again = vector_file.read(_file(path), "knowledge")
    assert again is not None and target not in again.ids and len(again.ids) == 199
    # The store that searched before the forget stops scoring the row as well.
    assert all(i != target for q in queries for i, _ in _search(reader, q))


def test_the_forgetting_store_writes_its_file_again_without_the_row(
        built: tuple[Path, SQLiteStore, np.random.Generator]) -> None:
    path, writer, rng = built
    target = _search(writer, _queries(rng, 1)[0])[0][0]
    item = writer.get_item(USER, target)
    assert item is not None
    with writer.writing_for(USER):
        writer.append(plan_forget(Scope(USER), item, now=iso(system_clock())))
        writer.redact(USER, target)
    assert not _file(path).exists()
    _search(writer, _queries(rng, 1)[0])
    loaded = vector_file.read(_file(path), "knowledge")
    assert loaded is not None and target not in loaded.ids and len(loaded.ids) == 199


def test_a_changed_text_drops_its_old_vector(
        built: tuple[Path, SQLiteStore, np.random.Generator]) -> None:
    """A row whose text changed has no vector until it is embedded again; a file
    written before must not score it with the old one."""
    path, writer, rng = built
    queries = _queries(rng)
    target = _search(writer, queries[0])[0][0]
    item = writer.get_item(USER, target)
    assert item is not None
    writer.append(plan_change(Scope(USER), item, {"content": "changed words"},
                              now=iso(system_clock()), reason="test", source="user"))
    reader = _store(path)
    assert all(i != target for q in queries for i, _ in _search(reader, q))
    _same_as_fresh(path, reader, queries)


def test_forget_user_removes_that_users_file_only(
        built: tuple[Path, SQLiteStore, np.random.Generator]) -> None:
    path, writer, rng = built
    _add(writer, rng, 60, user="bob")
    _search(writer, _queries(rng, 1)[0], user="bob")
    assert _file(path, "bob").is_file()
    other = _store(path)
    _search(other, _queries(rng, 1)[0], user="bob")
    writer.delete_user("bob")
    assert not _file(path, "bob").exists()
    assert _file(path, USER).is_file()
    assert "bob" not in writer._indexes["knowledge"].users
    # Another store that loaded bob before finds nothing of bob's now either.
    assert _search(other, _queries(rng, 1)[0], user="bob") == []


def test_another_model_makes_the_file_unused(
        built: tuple[Path, SQLiteStore, np.random.Generator]) -> None:
    path, writer, rng = built
    writer.set_meta("embedding_model", "another-model")
    reader = _store(path)
    queries = _queries(rng)
    _search(reader, queries[0])
    assert not _mapped(reader)
    _same_as_fresh(path, reader, queries)
    loaded = vector_file.read(_file(path), "knowledge")
    assert loaded is not None and loaded.model == "another-model"


@pytest.mark.parametrize("damage", ["truncate", "tail", "header", "garbage"])
def test_a_torn_or_damaged_file_is_rebuilt(
        built: tuple[Path, SQLiteStore, np.random.Generator], damage: str) -> None:
    path, _, rng = built
    file = _file(path)
    data = bytearray(file.read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 100]
    elif damage == "tail":
        data[-5] ^= 0xFF  # inside the ids
    elif damage == "header":
        data[20] ^= 0xFF
    else:
        data = bytearray(b"not a vector file")
    file.write_bytes(bytes(data))
    reader = _store(path)
    queries = _queries(rng)
    _search(reader, queries[0])
    assert not _mapped(reader)
    _same_as_fresh(path, reader, queries)
    assert vector_file.read(file, "knowledge") is not None  # written again, whole


def test_a_store_rolled_back_to_an_older_copy_rebuilds(
        built: tuple[Path, SQLiteStore, np.random.Generator]) -> None:
    """The file was written by a store whose embedding counter is ahead of this one."""
    path, writer, rng = built
    writer.set_meta("emb_seq", "5")
    reader = _store(path)
    _search(reader, _queries(rng, 1)[0])
    assert not _mapped(reader)


def test_a_small_scope_keeps_no_file(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    rng = np.random.default_rng(5)
    store = _store(path, rows=1_000)
    _add(store, rng, 100)
    _search(store, _queries(rng, 1)[0])
    assert not vector_file.vectors_dir(path).exists()


def test_a_read_only_folder_falls_back_to_memory(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    rng = np.random.default_rng(8)
    store = _store(path)
    _add(store, rng, 100)
    folder = vector_file.vectors_dir(path)
    folder.write_text("a file where the folder would go")  # mkdir fails as read-only would
    queries = _queries(rng)
    _same_as_fresh(path, store, queries)
    assert folder.read_text() == "a file where the folder would go"


def test_a_file_written_by_another_process_is_used(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    rng = np.random.default_rng(21)
    _add(_store(path), rng, 120)
    script = (
        "import sys, numpy as np\n"
        "from ledgermem.store.sqlite import SQLiteStore\n"
        "from ledgermem.types import ItemQuery\n"
        "s = SQLiteStore(sys.argv[1]); s.vector_file_rows = 50\n"
        "s.vector_search_items('alice', np.ones(16, dtype=np.float32), ItemQuery(), 5)\n")
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=120)
    assert _file(path).is_file()
    reader = _store(path)
    queries = _queries(rng)
    _search(reader, queries[0])
    assert _mapped(reader)
    _same_as_fresh(path, reader, queries)


def test_restoring_a_backup_removes_the_vector_files_of_what_the_store_held(
        tmp_path: Path) -> None:
    from ledgermem.backup import backup, restore

    rng = np.random.default_rng(7)
    store = _store(tmp_path / "live.db")
    _add(store, rng, 60)
    store.close()
    backup(tmp_path / "live.db", tmp_path / "copy.db")
    store = _store(tmp_path / "live.db")
    _add(store, rng, 60)
    query = rng.standard_normal(DIMS).astype(np.float32)
    _search(store, query)  # writes the vector file of 120 rows
    store.close()
    folder = vector_file.vectors_dir(tmp_path / "live.db")
    assert list(folder.glob("*.lmv"))
    restore(tmp_path / "copy.db", tmp_path / "live.db", force=True)
    assert not folder.exists()
    store = _store(tmp_path / "live.db")
    assert len(_search(store, query, limit=200)) == 60  # the backup's rows only
    store.close()
