"""``python -m ledgermem`` runs the CLI."""

from .cli import main

main()
