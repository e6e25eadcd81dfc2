"""The write pipeline: extraction, reconciliation, consolidation and maintenance.

Everything here writes through the ledger (``Store.append``) and talks to a model only
through the ``LLM`` protocol; a model's failure is logged and skipped, never raised
into the conversation.
"""

from .extraction import ExtractionOptions, ExtractionReport, ExtractionWorker
from .maintenance import MaintenanceOptions

__all__ = ["ExtractionOptions", "ExtractionReport", "ExtractionWorker", "MaintenanceOptions"]
