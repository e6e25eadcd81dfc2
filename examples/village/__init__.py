"""The village: villagers and a judge solve a mystery over one shared ledger.

Run it with ``python -m examples.village`` from the repository root (see README.md).
``scene`` holds the logic, ``story`` the cast, the clues and the scripted answers.
"""
