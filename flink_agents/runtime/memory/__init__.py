"""Long-term memory backends kept at Flink Agents 0.3.1's paths
(``runtime.memory.mem0``). The vector-store backend lives in
``runtime.features.long_term_memory``."""
