"""Mem0 (``mem0ai``) vector store providers: ``mem0_vector_store.Mem0VectorStore``."""
