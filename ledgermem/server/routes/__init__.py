"""The REST API's routes, one module per topic, each an ``APIRouter`` under ``/v1``."""
