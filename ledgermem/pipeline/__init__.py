"""The write pipeline: extraction, reconciliation, consolidation and maintenance.

Everything here writes through the ledger (``Store.append``) and talks to a model only
through the ``LLM`` protocol; a model's failure is logged and skipped, never raised
into the conversation. Workers and steps are given built parts (``PipelineParts``:
store, clock, writer, searcher, LLM…), never the ``Memory`` facade.
"""

from .extraction import ExtractionOptions, ExtractionReport, ExtractionWorker
from .guards import GuardOptions
from .maintenance import MaintenanceOptions
from .parts import PipelineParts

__all__ = ["ExtractionOptions", "ExtractionReport", "ExtractionWorker", "GuardOptions",
           "MaintenanceOptions", "PipelineParts"]
