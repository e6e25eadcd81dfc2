"""Vector files: a SQLite store's per-user vector matrices persisted beside it.

A process's first vector search of a large scope used to read every vector BLOB of
that scope (13 s for 800,000 rows). The store now keeps each (table, user) matrix in a
file under ``<db>.vectors/`` and maps it (``np.memmap``, copy-on-write) instead. The
BLOBs stay the truth: a file is only a cache of them, checked against the store before
use and rebuilt from the BLOBs when it does not match.

One file holds, for one table and one user (the file is named by a hash of the user
id, never the id itself):

- a header (JSON, with its own CRC-32): format version, table, embedding model,
  dimensions, row and ghost counts, ``cursor`` (the highest ``emb_seq`` it covers),
  ``counter`` (the store-wide ``emb_seq`` counter when it was written) and the
  CRC-32 of the sequence numbers and ids;
- the float32 matrix, 64-byte aligned, so it can be mapped in place;
- each row's ``emb_seq`` (int64), then the ``ghosts``: sequence numbers of rows that
  had a number but no vector when the file was written;
- the row ids, UTF-8, one per line.

What the checks catch: a file of another format, table, model or dimension; a torn or
truncated file (the size must be exactly what the header says); damage to the header,
sequence numbers or ids (CRC-32). Damage inside the matrix is not checksummed: a
CRC over 1.2 GB costs ~0.8 s, most of the time the file saves. Files are written to a
temporary name, synced and renamed over the old one, so a crash leaves either the old
file or the new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["LoadedVectors", "discard", "discard_all", "file_for", "read", "vectors_dir",
           "write"]

MAGIC = b"LMVECS01"
_PREFIX = struct.Struct("<8sII")  # magic, header length, header CRC-32
_ALIGN = 64
_STALE_TMP_S = 600.0
"""A temporary file older than this is a crashed writer's and may be removed."""


@dataclass
class LoadedVectors:
    """What a vector file holds, its matrix mapped from the file."""

    model: str
    dims: int
    matrix: npt.NDArray[np.float32]
    seqs: npt.NDArray[np.int64]
    ghosts: npt.NDArray[np.int64]
    ids: list[str]
    cursor: int
    counter: int


def vectors_dir(db_path: Path) -> Path:
    """The folder beside the database that holds its vector files."""
    return db_path.with_name(db_path.name + ".vectors")


def file_for(directory: Path, table: str, user_id: str) -> Path:
    """The file of one user's vectors of ``table``: named by a hash of the user id."""
    digest = hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return directory / f"{table}-{digest}.lmv"


def read(path: Path, table: str) -> LoadedVectors | None:
    """The vectors in ``path``, or None when it is missing, of another table or format,
    torn or damaged (the caller then rebuilds it from the store)."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = _header(f.read(_PREFIX.size), f)
            if head is None or head.get("table") != table or head.get("size") != size:
                return None
            count, dims, ghosts = int(head["count"]), int(head["dims"]), int(head["ghosts"])
            f.seek(int(head["tail_at"]))
            tail = f.read(size - int(head["tail_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if (zlib.crc32(tail) != head["tail_crc"]
            or len(tail) != 8 * (count + ghosts) + head["ids_bytes"]):
        return None
    numbers = np.frombuffer(tail, dtype="<i8", count=count + ghosts).astype(np.int64)
    text = tail[8 * (count + ghosts):].decode("utf-8", "surrogatepass")
    ids = text.split("\n") if count else []
    if len(ids) != count:
        return None
    matrix: npt.NDArray[np.float32]
    if count:
        try:
            matrix = np.memmap(path, dtype="<f4", mode="c", offset=int(head["data_at"]),
                               shape=(count, dims))
        except (OSError, ValueError):
            return None
    else:
        matrix = np.zeros((0, dims), dtype=np.float32)
    return LoadedVectors(model=str(head["model"]), dims=dims, matrix=matrix,
                         seqs=numbers[:count], ghosts=numbers[count:], ids=ids,
                         cursor=int(head["cursor"]), counter=int(head["counter"]))


def _header(prefix: bytes, f: Any) -> dict[str, Any] | None:
    if len(prefix) != _PREFIX.size:
        return None
    magic, length, crc = _PREFIX.unpack(prefix)
    if magic != MAGIC or length > 1 << 20:
        return None
    raw = f.read(length)
    if len(raw) != length or zlib.crc32(raw) != crc:
        return None
    head = json.loads(raw)
    return head if isinstance(head, dict) and head.get("version") == 1 else None


def write(path: Path, table: str, *, model: str, matrix: npt.NDArray[np.float32],
          keep: npt.NDArray[np.bool_], seqs: npt.NDArray[np.int64],
          ghosts: npt.NDArray[np.int64], ids: list[str], cursor: int, counter: int) -> bool:
    """Write the rows of ``matrix`` where ``keep`` is true (with their ``seqs`` and
    ``ids``) to ``path`` atomically. Returns False, leaving no file behind, where the
    folder cannot be written (a read-only location): the store then works from memory."""
    rows = np.flatnonzero(keep)
    dims = int(matrix.shape[1])
    kept_ids = [ids[i] for i in rows]
    id_bytes = "\n".join(kept_ids).encode("utf-8", "surrogatepass")
    tail = (np.concatenate([seqs[rows], ghosts]).astype("<i8").tobytes() + id_bytes)
    head: dict[str, Any] = {"version": 1, "table": table, "model": model, "dims": dims,
                            "count": len(rows), "ghosts": len(ghosts), "cursor": cursor,
                            "counter": counter, "ids_bytes": len(id_bytes),
                            "tail_crc": zlib.crc32(tail)}
    # The header holds its own offsets and the total size: sized with placeholders of
    # the final width, so encoding the real values cannot move anything.
    head.update(data_at=10**15, tail_at=10**15, size=10**15)
    data_at = _aligned(_PREFIX.size + len(json.dumps(head)))
    tail_at = data_at + 4 * dims * len(rows)
    head.update(data_at=data_at, tail_at=tail_at, size=tail_at + len(tail))
    raw = json.dumps(head).encode().ljust(data_at - _PREFIX.size)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        _remove_stale_tmp(path)
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(_PREFIX.pack(MAGIC, len(raw), zlib.crc32(raw)) + raw)
            for start in range(0, len(rows), 65_536):  # no second copy of a large matrix
                f.write(np.ascontiguousarray(matrix[rows[start:start + 65_536]],
                                             dtype="<f4").tobytes())
            f.write(tail)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):  # the folder itself could not be made
            tmp.unlink(missing_ok=True)
        return False
    return True


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def _remove_stale_tmp(path: Path) -> None:
    now = time.time()
    for old in path.parent.glob(path.name + ".*.tmp"):
        try:
            if now - old.stat().st_mtime > _STALE_TMP_S:
                old.unlink()
        except OSError:
            pass  # another writer took it meanwhile


def discard(directory: Path, table: str, user_id: str) -> None:
    """Remove one user's file of ``table`` (nothing if there is none)."""
    with contextlib.suppress(OSError):  # a read-only location never had a file
        file_for(directory, table, user_id).unlink(missing_ok=True)


def discard_all(directory: Path) -> None:
    """Remove every vector file (a model change or cleared vectors make all stale)."""
    try:
        for path in directory.glob("*.lmv"):
            path.unlink(missing_ok=True)
    except OSError:
        pass
