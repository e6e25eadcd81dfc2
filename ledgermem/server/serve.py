"""Running the server: build the memory and the app from settings, start uvicorn,
say where it listens and which keys open it, stop cleanly on Ctrl-C.

``ServeSpec`` is everything a server process needs to build the same app as its
siblings; with ``--workers N`` uvicorn starts N processes, and each builds its app
from the spec (passed in ``LEDGERMEM_SERVE_SPEC``) through ``worker_app``. The keys
are made before any worker starts, in the parent process:

- the admin key, at the first start on a database, printed once; or the one given in
  ``LEDGERMEM_ADMIN_KEY`` (never stored), which every process accepts;
- a key for the local user (``--user``, default ``local``), kept in a file readable by
  its owner only (mode 0600) in the user data dir, one file per database, so that
  every start prints the same key; a file whose key no longer opens the API (revoked,
  or another database) is replaced by a new key.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from ..aio import AsyncMemory
from ..config import Settings, find_config_path, load_settings, memory_options
from ..errors import ConfigError
from ..memory import Memory, open_store
from ..store.base import Store
from .app import ServerSettings, create_app
from .keys import KeyRing
from .metrics import CountingLLM, ServerMetrics
from .ratelimit import RateLimit

__all__ = ["ADMIN_KEY_ENV", "SPEC_ENV", "ServeSpec", "Startup", "build_app", "local_key",
           "open_memory", "prepare_keys", "worker_app"]

log = logging.getLogger("ledgermem.server")

SPEC_ENV = "LEDGERMEM_SERVE_SPEC"
ADMIN_KEY_ENV = "LEDGERMEM_ADMIN_KEY"
TEST_EMBEDDERS = {"hash": "ledgermem.testing"}
"""Embedders that live with the test helpers, registered only when named."""


@dataclass(frozen=True)
class ServeSpec:
    """What every server process needs to build the same application.

    Attributes:
        db: the database URL or path (None: the settings', else the default file).
        config: the configuration file (None: ``LEDGERMEM_CONFIG`` or the default one).
        embedder: the embedder's name (None: the settings', else the model the store
            records; ``none`` for keyword search only).
        rate: requests per second per key (None: no limit); ``burst`` its bucket.
        public_metrics: serve ``/metrics`` without a key.
    """

    db: str | None = None
    config: str | None = None
    embedder: str | None = None
    rate: float | None = 50.0
    burst: int = 100
    public_metrics: bool = False

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ServeSpec:
        text = environ.get(SPEC_ENV)
        if not text:
            raise ConfigError(f"{SPEC_ENV} is not set: start the server with ledgermem serve")
        return cls(**json.loads(text))

    def settings(self, environ: Mapping[str, str]) -> Settings:
        """The configuration file and ``LEDGERMEM_*`` environment, read now."""
        return load_settings(find_config_path(self.config, environ), environ)

    def server_settings(self) -> ServerSettings:
        limit = None if self.rate is None else RateLimit(self.rate, self.burst)
        return ServerSettings(rate_limit=limit, public_metrics=self.public_metrics)


def _embedder(store: Store, name: str | None, environ: Mapping[str, str]) -> Any:
    """The embedder ``name`` says, else the one that made the store's vectors."""
    from ..providers.embedders import DEFAULT_EMBEDDER, embedder_for_model, embedder_from_name

    if name == "none":
        return None
    spec = name or store.get_meta("embedding_model")
    module = TEST_EMBEDDERS.get((spec or "").partition(":")[0])
    if module is not None:
        importlib.import_module(module)  # registers the test embedders
    options: dict[str, Any] = {}
    if (spec or "").startswith("openai"):
        options["api_key"] = next((environ[n] for n in ("LEDGERMEM_EMBEDDER_API_KEY",
                                                        "OPENAI_API_KEY") if environ.get(n)), None)
    if name is None and spec is not None:
        dims = store.get_meta("embedding_dimensions")
        if spec.startswith("openai:") and dims:
            options["dimensions"] = int(dims)
        return embedder_for_model(spec, **options)
    return embedder_from_name(spec or DEFAULT_EMBEDDER, **options)


def open_memory(spec: ServeSpec, metrics: ServerMetrics, environ: Mapping[str, str]
                ) -> AsyncMemory:
    """The memory a server process serves, with its LLM counted into ``metrics``."""
    settings = spec.settings(environ)
    store = open_store(spec.db or settings.database.url)
    try:
        options = memory_options(settings)
        if options.get("llm") is not None:
            options["llm"] = CountingLLM(options["llm"], metrics)
        embedder = _embedder(store, spec.embedder or settings.embedder.name, environ)
        return AsyncMemory.from_sync(Memory(store, embedder=embedder, **options))
    except BaseException:
        store.close()
        raise


def build_app(memory: AsyncMemory, spec: ServeSpec, metrics: ServerMetrics,
              environ: Mapping[str, str], *, close_memory: bool = True) -> FastAPI:
    """The app over ``memory``; with ``close_memory`` it closes the memory when the
    server stops (a worker process's own)."""
    keys = KeyRing(memory.store)
    given = environ.get(ADMIN_KEY_ENV)
    if given:  # the operator's admin key; a stored one was made by the parent process
        keys.ensure_admin(given)
    app = create_app(memory, keys, settings=spec.server_settings(), metrics=metrics)
    if not close_memory:
        return app

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await memory.close()

    app.router.lifespan_context = lifespan
    return app


def worker_app() -> FastAPI:
    """The app of one worker process (uvicorn's factory under ``--workers``)."""
    environ = dict(os.environ)
    spec = ServeSpec.from_env(environ)
    metrics = ServerMetrics()
    return build_app(open_memory(spec, metrics, environ), spec, metrics, environ)


@dataclass(frozen=True)
class Startup:
    """The keys to show when the server starts."""

    user: str
    user_key: str
    key_file: Path
    admin_key: str | None
    """A new admin key, shown this once; None when one existed or the environment gave it."""


def _key_file(data_dir: Path, store: Store) -> Path:
    digest = hashlib.sha256(store.url.encode("utf-8")).hexdigest()[:16]
    return data_dir / "server-keys" / f"{digest}.key"


def local_key(keys: KeyRing, user: str, path: Path) -> str:
    """The local user's key: the one kept in ``path`` while it still opens the API for
    ``user``, else a new one written there (owner-only)."""
    if path.is_file():
        kept = path.read_text(encoding="utf-8").strip()
        found = keys.verify(kept)
        if found is not None and found.user == user and not found.admin:
            return kept
    token, _ = keys.create(user, label="local (ledgermem serve)")
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    os.chmod(path, 0o600)  # a file that existed keeps its mode through O_CREAT
    return token


def prepare_keys(store: Store, user: str, data_dir: Path, environ: Mapping[str, str], *,
                 new_admin_key: bool = False) -> Startup:
    """Make the admin key (at the first start, or a replacement with
    ``new_admin_key``: the stored admin keys are revoked) and the local user's key."""
    keys = KeyRing(store)
    if new_admin_key:
        for info in keys.list():
            if info.admin and info.active:
                keys.revoke(info.key_id)
    admin_key = keys.ensure_admin(environ.get(ADMIN_KEY_ENV) or None)
    path = _key_file(data_dir, store)
    return Startup(user, local_key(keys, user, path), path, admin_key)
