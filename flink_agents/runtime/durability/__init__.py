"""Durability: the journal, call positions, ids, and the typed codec journal and state are written in."""
