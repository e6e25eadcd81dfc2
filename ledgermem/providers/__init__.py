"""Providers: embedders and LLMs behind small protocols, chosen by name."""

from .embedders import Embedder, embedder_from_name, register_embedder

__all__ = ["Embedder", "embedder_from_name", "register_embedder"]
