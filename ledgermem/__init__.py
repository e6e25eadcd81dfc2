"""ledgermem: long-term memory for LLM agents.

An append-only ledger is the truth; knowledge, conversations and indexes are views
over it. Embedded on SQLite by default, PostgreSQL + pgvector for teams.
"""

from .aio import AsyncMemory, AsyncUserMemory
from .clock import Clock, DateOrder
from .errors import (
    AccessDenied,
    ConfigError,
    InvalidInput,
    LedgermemError,
    NotFound,
    ProviderError,
    SchemaMismatch,
    StorageError,
    StoreClosed,
)
from .ledger_index import HybridEventIndex
from .memory import Memory, UserMemory, default_path
from .pipeline import ExtractionOptions, MaintenanceOptions
from .providers.llm import LLM, LLMCall, OpenAICompatibleLLM
from .retrieval.hybrid import SearchOptions
from .retrieval.rerank import Reranker
from .retrieval.salience import SalienceWeights
from .retrieval.when import TimeWindow, find_time_window
from .store.base import Store
from .store.sqlite import SQLiteStore
from .types import (
    CATEGORIES,
    SOURCES,
    Event,
    Finding,
    Hit,
    Item,
    ItemQuery,
    Proposal,
    Scope,
    ToolCall,
    Turn,
)
from .validation import Limits
from .views import MemoryIndex, ViewConfig

__version__ = "0.1.0"

__all__ = [
    "CATEGORIES",
    "LLM",
    "SOURCES",
    "AccessDenied",
    "AsyncMemory",
    "AsyncUserMemory",
    "Clock",
    "ConfigError",
    "DateOrder",
    "Event",
    "ExtractionOptions",
    "Finding",
    "Hit",
    "HybridEventIndex",
    "InvalidInput",
    "Item",
    "ItemQuery",
    "LLMCall",
    "LedgermemError",
    "Limits",
    "MaintenanceOptions",
    "Memory",
    "MemoryIndex",
    "NotFound",
    "OpenAICompatibleLLM",
    "Proposal",
    "ProviderError",
    "Reranker",
    "SQLiteStore",
    "SalienceWeights",
    "SchemaMismatch",
    "Scope",
    "SearchOptions",
    "StorageError",
    "Store",
    "StoreClosed",
    "TimeWindow",
    "ToolCall",
    "Turn",
    "UserMemory",
    "ViewConfig",
    "__version__",
    "default_path",
    "find_time_window",
]
