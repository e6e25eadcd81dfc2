"""Benchmarks run by ``ledgermem bench`` and ``make bench``: retrieval quality
(LoCoMo, LongMemEval) and scale (throughput, latency, memory, file size)."""
