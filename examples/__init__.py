"""Runnable examples of ledgermem (``python -m examples.<name>`` from the repository root)."""
