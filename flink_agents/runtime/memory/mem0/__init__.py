"""Mem0-backed long-term memory (the ``mem0`` extra): ``mem0_long_term_memory``."""
