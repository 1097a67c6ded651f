"""Long-term memory (``long_term_memory.BaseLongTermMemory``)."""
