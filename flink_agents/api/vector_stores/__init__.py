"""Vector store resources (``vector_store.BaseVectorStore``) and their queries."""
