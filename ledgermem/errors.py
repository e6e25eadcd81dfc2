"""The one exception tree. Every error ledgermem raises on purpose is a ``LedgermemError``."""

from __future__ import annotations

__all__ = [
    "AccessDenied",
    "ConfigError",
    "InvalidInput",
    "LedgermemError",
    "NotFound",
    "ProviderError",
    "SchemaMismatch",
    "StorageError",
    "StoreClosed",
]


class LedgermemError(Exception):
    """Base class of every error raised by ledgermem."""


class NotFound(LedgermemError, LookupError):
    """No such id in the caller's scope (never says whether it exists elsewhere)."""


class InvalidInput(LedgermemError, ValueError):
    """The caller passed something ledgermem cannot store or interpret."""


class ConfigError(LedgermemError):
    """A setting, URL or configuration file is wrong."""


class StorageError(LedgermemError):
    """The database failed; the driver's exception is chained as ``__cause__``."""


class StoreClosed(StorageError):
    """The store was closed: nothing more can be read or written through it."""


class SchemaMismatch(StorageError):
    """The store was built with another embedding model or dimension, or a newer schema."""


class ProviderError(LedgermemError):
    """An LLM or embedding provider failed after its retries, or a search's reranker
    failed or returned hits it was not given."""


class AccessDenied(LedgermemError):
    """The scope or API key does not allow this operation."""
