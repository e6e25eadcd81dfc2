"""Retrieval: query terms, rank fusion, salience and the hybrid search pipeline."""
