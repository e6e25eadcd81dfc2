"""Storage backends behind one ``Store`` protocol."""

from .base import Store, TurnQuery
from .sqlite import SQLiteStore

__all__ = ["SQLiteStore", "Store", "TurnQuery"]
