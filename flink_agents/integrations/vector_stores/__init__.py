"""Vector store implementations (``chroma``)."""
