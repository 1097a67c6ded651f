"""Scheduling: KeyRunner (per-key order, cross-key concurrency, back-pressure), run slots, thread pools."""
