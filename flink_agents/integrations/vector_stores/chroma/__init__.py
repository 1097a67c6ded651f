"""Chroma (``chromadb``) vector store: ``chroma_vector_store.ChromaVectorStore``."""
