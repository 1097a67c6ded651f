"""Embedding model resources (connections and setups)."""
