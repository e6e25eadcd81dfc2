"""The memory server: a REST API (FastAPI) over the async API, with API keys bound to
users, Prometheus metrics, and the dashboard's files. ``create_app`` builds the
application, ``ledgermem serve`` runs it under uvicorn."""
