"""LoCoMo evidence recall: does the search find the turns that answer a question?

For each sample, every turn (speaker, text, image caption, session date) is added to
a fresh scope; every question of categories 1–4 is asked with the sample's last
session date as "now"; recall@k is the share of a question's evidence turns found in
the top k, averaged over questions.
"""

from __future__ import annotations

import re
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from ..memory import Memory
from ..providers.embedders import DEFAULT_EMBEDDER, embedder_from_name
from ..retrieval.hybrid import SearchOptions
from .common import ManualClock, percentiles, progress, read_entries, require

__all__ = ["EvidenceIds", "locomo_date", "normalise_evidence", "run_locomo"]

_DIA = re.compile(r"^D(\d+):(\d+)$")


@dataclass
class EvidenceIds:
    """Evidence ids after normalisation, with counts of what was fixed or skipped."""

    ids: list[str] = field(default_factory=list)
    fixed: int = 0
    skipped: int = 0


def normalise_evidence(raw: Sequence[str], known: set[str]) -> EvidenceIds:
    """Clean LoCoMo evidence ids: split ``"D8:6; D9:17"``, read ``"D:11:26"`` as
    ``D11:26`` and ``"D30:05"`` as ``D30:5``; drop ids that name no turn."""
    out = EvidenceIds()
    for entry in raw:
        parts = [p for p in re.split(r"[;,\s]+", str(entry)) if p]
        if len(parts) > 1:
            out.fixed += 1
        for part in parts:
            candidate = part.strip()
            match = _DIA.match(candidate) or _DIA.match(candidate.replace("D:", "D", 1))
            if match is None:
                out.skipped += 1
                continue
            clean = f"D{int(match.group(1))}:{int(match.group(2))}"
            if clean != candidate:
                out.fixed += 1
            if clean not in known:
                out.skipped += 1
                continue
            if clean not in out.ids:
                out.ids.append(clean)
    return out


def locomo_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → an aware UTC datetime."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _sessions(conversation: dict[str, Any]) -> list[tuple[datetime, list[dict[str, Any]]]]:
    found = []
    for key, turns in conversation.items():
        match = re.fullmatch(r"session_(\d+)", key)
        if match and isinstance(turns, list):
            date = conversation.get(f"{key}_date_time")
            found.append((int(match.group(1)), locomo_date(date) if date else None, turns))
    found.sort(key=lambda entry: entry[0])
    last = datetime(2000, 1, 1, tzinfo=UTC)
    sessions = []
    for _, date, turns in found:
        last = date or last + timedelta(days=1)
        sessions.append((last, turns))
    return sessions


def _check_sample(sample: dict[str, Any], where: str) -> None:
    """Refuse, before the run starts, a sample missing what the run reads."""
    conversation = require(sample, "conversation", dict, where)
    for key, turns in conversation.items():
        if not re.fullmatch(r"session_\d+", key) or not isinstance(turns, list):
            continue
        date = conversation.get(f"{key}_date_time")
        if date is not None:
            try:
                locomo_date(require(conversation, f"{key}_date_time", str, where))
            except ValueError as exc:
                raise InvalidInput(f"{where}: {key}_date_time {date!r} is not a LoCoMo "
                                   "date (like '1:56 pm on 8 May, 2023')") from exc
        for turn in turns:
            if not isinstance(turn, dict):
                raise InvalidInput(f"{where}: {key} holds a turn that is not an object")
            require(turn, "dia_id", str, f"{where}, {key}")
    for qa in require(sample, "qa", list, where) if "qa" in sample else []:
        if not isinstance(qa, dict):
            raise InvalidInput(f"{where}: a qa entry is not an object")
        category = qa.get("category", 0)
        if isinstance(category, bool) or not isinstance(category, int | str) or not str(
                category).strip().isdigit():
            raise InvalidInput(f"{where}: a qa category must be a number, not {category!r}")
        if int(category) in (1, 2, 3, 4):
            require(qa, "question", str, where)
            if "evidence" in qa:
                require(qa, "evidence", list, where)


def turn_text(turn: dict[str, Any]) -> str:
    """A turn's text with its shared image described, as a reader would see it."""
    text = str(turn.get("text", "")).strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shares an image: {caption}]".strip()
    return text


def run_locomo(
    data: Path,
    *,
    ks: Sequence[int] = (5, 10, 20),
    mode: str = "hybrid",
    embedder: Any = "default",
    db: str | Path | None = None,
    quiet: bool = False,
    limit_samples: int | None = None,
    store_per_sample: bool = False,
    search: SearchOptions | None = None,
) -> dict[str, Any]:
    """Run the benchmark and return the result object (see the CLI's ``--json``).

    ``db`` is a database path or URL (``postgresql://…`` included) to run in; by
    default a temporary SQLite file. In a given database each sample is a user named
    ``locomo-<run>-<sample>``, unique to the run, and forgotten (``forget_user``) at
    the end, so a shared database is left as it was found.

    ``store_per_sample`` gives each sample a store of its own (a new file, or a new
    schema of the PostgreSQL ``db``, dropped after it), so that nothing of one sample
    reaches another's ranking: SQLite's FTS5 takes BM25's corpus statistics over the
    whole file, every user in it, where PostgreSQL takes them per user.

    ``search`` replaces the default search options (its ``mode`` is set to ``mode``),
    to measure one knob against the defaults.
    """
    if store_per_sample and db is not None and not str(db).startswith("postgres"):
        raise InvalidInput("store_per_sample runs in temporary files or a postgresql:// db")
    if mode == "keyword":
        embedder = None
    elif isinstance(embedder, str):
        embedder = embedder_from_name(DEFAULT_EMBEDDER if embedder == "default" else embedder)
    samples = read_entries(data, "LoCoMo")[:limit_samples]
    for number, sample in enumerate(samples):
        _check_sample(sample, f"{data}: sample {number}")
    clock = ManualClock()
    folder = tempfile.TemporaryDirectory(prefix="ledgermem-locomo-") if db is None else None
    where = db or Path(folder.name) / "locomo.db"  # type: ignore[union-attr]
    prefix = "" if db is None else f"locomo-{uuid.uuid4().hex[:8]}-"
    search = replace(search or SearchOptions(), mode=mode)  # type: ignore[arg-type]

    def fresh(number: int) -> tuple[Memory, Callable[[], None]]:
        if not store_per_sample:
            return Memory.open(where, embedder=embedder, clock=clock, search=search), _nothing
        return _own_store(db, folder, number, embedder=embedder, clock=clock, search=search)

    memory, drop = fresh(0)
    users: list[str] = []
    top = max(ks)
    per_question: list[dict[Any, Any]] = []
    latencies: list[float] = []
    ingest_s = 0.0
    fixed = skipped = 0
    try:
        with progress(quiet) as bar:
            task = bar.add_task("LoCoMo", total=len(samples))
            for sample in samples:
                sample_id = str(sample.get("sample_id") or f"sample-{len(per_question)}")
                if store_per_sample and users:
                    memory.close()
                    drop()
                    memory, drop = fresh(len(users))
                handle = memory.for_user(prefix + sample_id)
                users.append(handle.user_id)
                started = time.perf_counter()
                sessions = _sessions(sample["conversation"])
                known: set[str] = set()
                speaker_a = sample["conversation"].get("speaker_a")
                for number, (date, turns) in enumerate(sessions, start=1):
                    batch = []
                    for offset, turn in enumerate(turns):
                        known.add(turn["dia_id"])
                        batch.append({
                            "role": "user" if turn.get("speaker") == speaker_a else "assistant",
                            "name": turn.get("speaker"), "content": turn_text(turn),
                            "at": date + timedelta(seconds=offset),
                            "metadata": {"dia_id": turn["dia_id"]}})
                    if batch:
                        handle.add_turns(batch, session_id=f"{sample_id}:session_{number}")
                memory.flush()
                ingest_s += time.perf_counter() - started
                clock.now = sessions[-1][0] + timedelta(hours=1) if sessions else clock.now
                for qa in sample.get("qa", []):
                    category = int(qa.get("category", 0))
                    if category not in (1, 2, 3, 4):
                        continue
                    evidence = normalise_evidence(qa.get("evidence", []), known)
                    fixed += evidence.fixed
                    skipped += evidence.skipped
                    if not evidence.ids:
                        continue
                    started = time.perf_counter()
                    hits = handle.search_conversations(qa["question"], limit=top)
                    latencies.append((time.perf_counter() - started) * 1000)
                    found = [h.turn.metadata.get("dia_id") for h in hits if h.turn]
                    row: dict[Any, Any] = {"category": category}
                    for k in ks:
                        row[k] = len(set(found[:k]) & set(evidence.ids)) / len(evidence.ids)
                    per_question.append(row)
                bar.advance(task)
    finally:
        try:
            if db is not None and not store_per_sample:
                for user_id in users:
                    memory.for_user(user_id).forget_user()
        finally:
            memory.close()
            drop()
            if folder is not None:
                folder.cleanup()
    return _summary("locomo", per_question, ks, latencies, ingest_s,
                    {"evidence_fixed": fixed, "evidence_skipped": skipped, "mode": mode,
                     "backend": memory.store.url.split(":", 1)[0]})


def _nothing() -> None:
    pass


def _own_store(db: str | Path | None, folder: Any, number: int, **kwargs: Any
               ) -> tuple[Memory, Callable[[], None]]:
    """A memory in a new store: ``sample-N.db`` in the temporary ``folder``, or a new
    schema of the PostgreSQL ``db``; the function returned drops that schema."""
    if db is None:
        return Memory.open(Path(folder.name) / f"sample-{number}.db", **kwargs), _nothing
    import psycopg

    from ..store.postgres import PostgresStore

    schema = f"locomo_{uuid.uuid4().hex[:12]}"

    def drop() -> None:
        with psycopg.connect(str(db), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    store = PostgresStore(str(db), schema=schema)
    try:
        return Memory(store, **kwargs), drop
    except BaseException:
        store.close()
        drop()
        raise


def _summary(name: str, rows: list[dict[Any, Any]], ks: Sequence[int], latencies: list[float],
             ingest_s: float, extra: dict[str, Any]) -> dict[str, Any]:
    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 4) if values else 0.0

    result: dict[str, Any] = {"benchmark": name, "questions": len(rows)}
    for k in ks:
        result[f"recall@{k}"] = mean([r[k] for r in rows])
    groups: dict[str, list[dict[Any, Any]]] = defaultdict(list)
    for row in rows:
        groups[str(row["category"])].append(row)
    result["by_category"] = {
        cat: {"questions": len(group), **{f"recall@{k}": mean([r[k] for r in group])
                                          for k in ks}}
        for cat, group in sorted(groups.items())}
    result["latency_ms"] = percentiles(latencies)
    result["ingest_s"] = round(ingest_s, 2)
    result.update(extra)
    return result
