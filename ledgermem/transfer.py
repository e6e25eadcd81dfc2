"""Moving a memory between stores: JSON Lines export and import, and ``migrate``.

Only the ledger and the vectors travel. The destination replays the events through
``Store.append``, which derives its own views (knowledge, conversations, tool history,
LLM accounting) exactly as the source derived its own, so any backend can receive
from any other. Vectors are derived data that costs a model run to remake, so they
travel too and are put back with ``Store.set_embeddings``.

The export format (version 1) is UTF-8 JSON Lines, ASCII-escaped, one object a line:

1. a header: ``{"format": "ledgermem-export", "version": 1, "embedding_model": …,
   "embedding_dimensions": …, "vector_encoding": "base64-float32-le", "counts":
   {"events": …, "vectors": …}}`` (the model and dimension the source recorded, or
   null; the counts are what the source held when the export began, for progress);
2. every event of every user in ledger order: ``{"type": "event", "id", "ts",
   "user_id", "kind", "payload", "agent_id", "session_id", "subject_id",
   "visibility"}``, the fields of ``Event``;
3. every stored vector: ``{"type": "vector", "table": "knowledge" | "conversations",
   "id", "text", "model", "vector"}``, where ``text`` is what the vector was made from
   (a turn's is ``"speaker: text"``) and ``vector`` is the base64 of its float32
   values, little-endian (exact, and half the size of decimal floats);
4. an end record: ``{"type": "end", "events": …, "vectors": …}``, the exact counts
   written. An import without it, or whose counts differ, fails: the file was cut.

``export_jsonl(users=[…])`` writes only those users' events and vectors (a per-user
export); its header counts only them.

An import or migration runs in one transaction on the destination: it lands whole
or not at all. It refuses a user who already has a ledger in the destination (two
histories cannot be merged) and a destination that records another embedding model.
Stop writers to the source first: what is written meanwhile may be missed, and then
``migrate``'s count check fails.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import asdict
from datetime import datetime
from typing import IO, Any, Literal, cast, get_args

import numpy as np

from .domain.events import check_payload
from .errors import InvalidInput, NotFound, SchemaMismatch, StorageError
from .store.base import Store, Table, TurnQuery, Vector
from .types import Event, ItemQuery
from .validation import check_id, check_json, check_name, check_optional_name

__all__ = ["FORMAT", "VERSION", "Progress", "export_jsonl", "import_jsonl", "migrate"]

FORMAT = "ledgermem-export"
VERSION = 1
VECTOR_ENCODING = "base64-float32-le"
TABLES: tuple[Table, ...] = ("knowledge", "conversations")
PAGE = 1000
"""Events or vectors read from the source per query."""
BATCH = 500
"""Events appended, or vectors set, per call on the destination."""
CHECKED = ("events", "items", "turns", "tool_calls", "vectors")
"""What ``migrate`` compares per user (see ``Store.user_counts``)."""

Phase = Literal["events", "vectors"]
Progress = Callable[[Phase, int, int | None], None]
"""Called as work proceeds: the phase, how many of it are done, and how many there
are in all (None when unknown)."""

_EVENT_FIELDS = ("id", "ts", "user_id", "kind", "payload", "agent_id", "session_id",
                 "subject_id", "visibility")
_KIND = re.compile(r"[a-z][a-z0-9_-]*(?:\.[a-z0-9_-]+)+")
"""What every event kind looks like (``memory.added``, ``world.observed``)."""
MAX_KIND_CHARS = 100


# reading a store ----------------------------------------------------------------------
def _header(store: Store, users: Collection[str] | None = None) -> dict[str, Any]:
    counts = store.user_counts()
    totals = [c for user, c in counts.items() if users is None or user in users]
    dims = store.get_meta("embedding_dimensions")
    return {"format": FORMAT, "version": VERSION,
            "embedding_model": store.get_meta("embedding_model"),
            "embedding_dimensions": int(dims) if dims else None,
            "vector_encoding": VECTOR_ENCODING,
            "counts": {"events": sum(c["events"] for c in totals),
                       "vectors": sum(c["vectors"] for c in totals)}}


def _records(store: Store) -> Iterator[dict[str, Any]]:
    """Every event, then every vector, as export records (without header and end)."""
    seq = 0
    while page := store.ledger(seq, PAGE):
        for _, event in page:
            yield {"type": "event", **asdict(event)}
        seq = page[-1][0]
    yield from _vector_records(store)


def _user_records(store: Store, users: Collection[str]) -> Iterator[dict[str, Any]]:
    """The events of ``users`` (each user's in ledger order), then their vectors."""
    ids: set[str] = set()
    for user in sorted(set(users)):
        for event in store.events(user):
            yield {"type": "event", **asdict(event)}
        items, _ = store.query_items(user, ItemQuery(include_superseded=True))
        ids.update(item.id for item in items)
        ids.update(turn.id for turn in store.query_turns(user, TurnQuery()))
    yield from _vector_records(store, ids)


def _vector_records(store: Store, ids: Collection[str] | None = None
                    ) -> Iterator[dict[str, Any]]:
    """Every stored vector (only those of rows in ``ids`` when given)."""
    for table in TABLES:
        last = ""
        while rows := store.stored_embeddings(table, last, PAGE):
            for row_id, text, vector, model in rows:
                if ids is None or row_id in ids:
                    yield {"type": "vector", "table": table, "id": row_id, "text": text,
                           "model": model, "vector": _encode(vector)}
            last = rows[-1][0]


def _encode(vector: Vector) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _decode(text: Any, where: str) -> Vector:
    try:
        data = base64.b64decode(str(text), validate=True)
    except ValueError as exc:
        raise InvalidInput(f"{where}: the vector is not base64") from exc
    if not data or len(data) % 4:
        raise InvalidInput(f"{where}: the vector is not a whole number of float32 values")
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


# writing a store ----------------------------------------------------------------------
class _Writer:
    """Feeds records to one destination in batches, inside the caller's transaction."""

    def __init__(self, store: Store, header: dict[str, Any], progress: Progress | None
                 ) -> None:
        self.store, self.header, self.progress = store, header, progress
        counts = header.get("counts") or {}
        self.totals: dict[Phase, int | None] = {"events": counts.get("events"),
                                                "vectors": counts.get("vectors")}
        self.taken = set(store.user_ids())
        self.events: list[Event] = []
        self.wheres: list[str] = []
        self.vectors: dict[tuple[Table, str], list[tuple[str, str, Vector]]] = {}
        self.done: dict[Phase, int] = {"events": 0, "vectors": 0}

    def add(self, record: dict[str, Any], where: str) -> bool:
        """Take one record; False once the end record came."""
        kind = record.get("type")
        if kind == "event":
            self._event(record, where)
        elif kind == "vector":
            self._vector(record, where)
        elif kind == "end":
            self.finish()
            self._check_end(record)
            return False
        else:
            raise InvalidInput(f"{where}: unknown record type {kind!r}")
        return True

    def _event(self, record: dict[str, Any], where: str) -> None:
        if self.vectors:
            raise InvalidInput(f"{where}: an event after the vectors")
        try:
            event = Event(**{k: record[k] for k in _EVENT_FIELDS if k in record})
        except TypeError as exc:
            raise InvalidInput(f"{where}: not an event: {exc}") from exc
        if not isinstance(event.payload, dict) or not isinstance(event.user_id, str):
            raise InvalidInput(f"{where}: not an event")
        # what a write would refuse (nesting past MAX_JSON_DEPTH, NUL…) is refused here
        # too: stored, it would make every later read of that row fail
        try:
            _check_envelope(event)
            check_json(event.payload, "the payload")
            check_payload(event.kind, event.payload)
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc}") from exc
        if event.user_id in self.taken:
            raise InvalidInput(
                f"user {event.user_id!r} already has a ledger in {self.store.url}; "
                "two histories cannot be merged (forget that user there first)")
        self.events.append(event)
        self.wheres.append(where)
        if len(self.events) >= BATCH:
            self._flush_events()

    def _vector(self, record: dict[str, Any], where: str) -> None:
        self._flush_events()
        table, model = record.get("table"), record.get("model")
        if table not in get_args(Table) or not isinstance(model, str):
            raise InvalidInput(f"{where}: a vector needs a table and a model")
        row = (str(record.get("id")), str(record.get("text")),
               _decode(record.get("vector"), where))
        batch = self.vectors.setdefault((cast(Table, table), model), [])
        batch.append(row)
        if len(batch) >= BATCH:
            self._flush_vectors()

    def _flush_events(self) -> None:
        if self.events:
            try:
                self.store.append(self.events)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                # The projection met a payload its kind does not have (a field missing,
                # of another type): the file's fault, and nothing of it is kept.
                span = self.wheres[0] if len(self.wheres) == 1 else \
                    f"{self.wheres[0]} to {self.wheres[-1]}"
                raise InvalidInput(f"{span}: an event's payload does not fit its kind "
                                   f"({type(exc).__name__}: {exc})") from exc
            self._advance("events", len(self.events))
            self.events, self.wheres = [], []

    def _flush_vectors(self) -> None:
        for (table, model), rows in self.vectors.items():
            written = self.store.set_embeddings(table, rows, model)
            if written != len(rows):
                raise StorageError(
                    f"{len(rows) - written} of {len(rows)} {table} vectors found no row "
                    "with the text they were made from: the replayed ledger differs")
            self._advance("vectors", len(rows))
        self.vectors = {}

    def _advance(self, phase: Phase, count: int) -> None:
        self.done[phase] += count
        if self.progress is not None:
            self.progress(phase, self.done[phase], self.totals[phase])

    def finish(self) -> None:
        """Write what is buffered, then record the embedding model. Recorded last, so
        PostgreSQL builds its HNSW index once over the loaded vectors instead of
        updating it row by row."""
        self._flush_events()
        self._flush_vectors()
        model, dims = self.header.get("embedding_model"), self.header.get("embedding_dimensions")
        if model and self.store.get_meta("embedding_model") is None:
            self.store.set_meta("embedding_model", str(model))
            if dims:
                self.store.set_meta("embedding_dimensions", str(int(dims)))

    def _check_end(self, record: dict[str, Any]) -> None:
        expected = {"events": record.get("events"), "vectors": record.get("vectors")}
        if expected != self.done:
            raise StorageError(f"the export says it holds {expected}, but {self.done} were "
                               "read: the file is damaged")


def _check_envelope(event: Event) -> None:
    """Refuse an event whose id, user, agent, session, kind, time or visibility no
    write would have stored (a NUL in a user id, a time without its offset…): kept,
    it would fail every later read, or a migration to PostgreSQL."""
    check_id(event.id, "an event's id")
    check_name(event.user_id, "user_id")
    check_optional_name(event.agent_id, "agent_id")
    check_optional_name(event.session_id, "session_id")
    if event.subject_id is not None:
        check_id(event.subject_id, "subject_id")
    if not (isinstance(event.kind, str) and len(event.kind) <= MAX_KIND_CHARS
            and _KIND.fullmatch(event.kind)):
        raise InvalidInput(f"kind {event.kind!r:.80} is not an event kind")
    if event.visibility not in ("private", "global"):
        raise InvalidInput(f"visibility {event.visibility!r:.40} is not private or global")
    try:
        moment = datetime.fromisoformat(event.ts) if isinstance(event.ts, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidInput(f"ts {event.ts!r:.60} is not an ISO 8601 time with a UTC offset")


def _check_model(store: Store, header: dict[str, Any]) -> None:
    """Refuse, before writing anything, vectors of another model than the store's."""
    model, dims = header.get("embedding_model"), header.get("embedding_dimensions")
    live = store.get_meta("embedding_model")
    live_dims = store.get_meta("embedding_dimensions")
    if model and live and (live != model or (dims and live_dims and int(live_dims) != dims)):
        raise SchemaMismatch(
            f"{store.url} uses {live} ({live_dims} dimensions) but the vectors to import "
            f"are {model} ({dims}); import into an empty store, or reembed one side first")


def _write(store: Store, header: dict[str, Any], records: Iterable[tuple[str, Any]],
           progress: Progress | None, check: Callable[[], None] | None = None) -> _Writer:
    """Replay ``records`` (where, record) into ``store`` in one transaction; ``check``
    runs inside it at the end, so a failed check leaves the store as it was."""
    _check_model(store, header)
    with store.transaction():
        writer = _Writer(store, header, progress)
        for where, record in records:
            if not isinstance(record, dict):
                raise InvalidInput(f"{where}: not a JSON object")
            if not writer.add(record, where):
                break
        else:
            raise StorageError("the export ends without its end record: the file was cut")
        if check is not None:
            check()
    store.settle()
    return writer


# public API ---------------------------------------------------------------------------
def export_jsonl(store: Store, fileobj: IO[str], *, users: Collection[str] | None = None,
                 progress: Progress | None = None) -> int:
    """Write every user's ledger and every stored vector of ``store`` to ``fileobj``
    in the export format (see the module's docstring). Returns the events written.

    Args:
        users: export only these users' ledgers and vectors (None: everyone).

    Raises:
        NotFound: one of ``users`` has no ledger in ``store``.
    """
    if users is not None:
        users = set(users)
        missing = sorted(users - set(store.user_ids()))
        if missing:
            raise NotFound(f"no ledger for user {', '.join(map(repr, missing))} in {store.url}")
    header = _header(store, users)
    totals: dict[Phase, int | None] = dict(header["counts"])
    done: dict[Phase, int] = {"events": 0, "vectors": 0}
    write = fileobj.write
    write(json.dumps(header, separators=(",", ":")) + "\n")
    for record in _records(store) if users is None else _user_records(store, users):
        phase: Phase = "events" if record["type"] == "event" else "vectors"
        write(json.dumps(record, separators=(",", ":")) + "\n")
        done[phase] += 1
        if progress is not None and done[phase] % PAGE == 0:
            progress(phase, done[phase], totals[phase])
    write(json.dumps({"type": "end", **done}, separators=(",", ":")) + "\n")
    if progress is not None:
        for phase in done:
            progress(phase, done[phase], done[phase])
    return done["events"]


def import_jsonl(store: Store, fileobj: IO[str], *, progress: Progress | None = None) -> int:
    """Replay an export into ``store``: its events through ``Store.append`` (which
    derives the views), then its vectors. All or nothing. Returns the events imported.

    Raises:
        InvalidInput: not an export, a line that is no record, or a user who already
            has a ledger in ``store``.
        SchemaMismatch: ``store`` records another embedding model.
        StorageError: the file was cut or damaged (its end record is missing or says
            otherwise), or the store failed.
    """
    lines = enumerate(fileobj, start=1)
    first = next(lines, None)
    if first is None:
        raise InvalidInput("an empty file is no ledgermem export")
    header = parse_object_line(first[1], "line 1")
    if header.get("format") != FORMAT:
        raise InvalidInput("not a ledgermem export (its first line names no "
                           f"{FORMAT!r} format)")
    if header.get("version") != VERSION:
        raise InvalidInput(f"export version {header.get('version')!r} is not one this "
                           f"ledgermem reads ({VERSION}); upgrade ledgermem")
    if header.get("vector_encoding", VECTOR_ENCODING) != VECTOR_ENCODING:
        raise InvalidInput(f"unknown vector encoding {header.get('vector_encoding')!r}")
    records = ((f"line {n}", parse_object_line(line, f"line {n}"))
               for n, line in lines if line.strip())
    return _write(store, header, records, progress).done["events"]


def migrate(src: Store, dst: Store, *, progress: Progress | None = None) -> dict[str, Any]:
    """Copy every user's ledger and vectors from ``src`` to ``dst``, then check, per
    user, that ``dst`` holds as many events, items, turns, tool calls and vectors as
    ``src`` (in the same transaction: on a mismatch nothing is kept).

    Returns the totals copied (``users``, ``events``, ``items``, ``turns``,
    ``tool_calls``, ``vectors``).

    Raises:
        InvalidInput: ``src`` and ``dst`` are the same store, or a user of ``src``
            already has a ledger in ``dst``.
        SchemaMismatch: ``dst`` records another embedding model than ``src``.
        StorageError: the counts differ (was ``src`` written to meanwhile?).
    """
    # (A PostgreSQL URL names a database; two schemas of one database are two stores.)
    if (src.url, getattr(src, "schema", None)) == (dst.url, getattr(dst, "schema", None)):
        raise InvalidInput(f"{src.url} is both the source and the destination")
    header = _header(src)
    before = src.user_counts()

    def check() -> None:
        after = dst.user_counts()
        wrong = {user: (counts, after.get(user)) for user, counts in before.items()
                 if {k: counts[k] for k in CHECKED} != {k: (after.get(user) or {}).get(k, 0)
                                                        for k in CHECKED}}
        if wrong:
            shown = "; ".join(f"{user}: {src.url} has {theirs}, {dst.url} got {ours}"
                              for user, (theirs, ours) in list(wrong.items())[:3])
            raise StorageError(f"the copy differs for {len(wrong)} users ({shown}); nothing "
                               "was kept. Was the source written to meanwhile?")

    _write(dst, header, _ended(_records(src), src.url), progress, check)
    return {"users": len(before),
            **{key: sum(c[key] for c in before.values()) for key in CHECKED}}


def _ended(records: Iterable[dict[str, Any]], where: str
           ) -> Iterator[tuple[str, dict[str, Any]]]:
    """A store's records, then an end record counting them."""
    done = {"events": 0, "vectors": 0}
    for record in records:
        done["events" if record["type"] == "event" else "vectors"] += 1
        yield where, record
    yield where, {"type": "end", **done}


def parse_object_line(line: str, where: str) -> dict[str, Any]:
    """One JSON Lines record that must be an object (``where`` names it in errors)."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{where}: not JSON ({exc.msg})") from exc
    except RecursionError as exc:  # the decoder recurses once per [ or {
        raise InvalidInput(f"{where}: JSON nested too deeply to read") from exc
    if not isinstance(value, dict):
        raise InvalidInput(f"{where}: not a JSON object")
    return value
