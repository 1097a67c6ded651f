"""The agent runtime: runs compiled plans on keyed records, durably.

Read it top down:

- ``engine.py``: ``AgentEngine``, one record's run from pending to done.
- ``driver.py``: what a host provides (keyed state, timers, emission).
- ``errors.py``: every runtime error, classified once (retryable, terminal,
  internal).
- ``builtin_actions.py``: the chat and tool actions every plan gets (compiled
  plans name this module).
- ``execution/``: a record's run (``Run``), the action loop, the context
  actions see, memory, ``KeyState``, and the apply step both hosts share;
  it names no feature.
- ``durability/``: the journal, call positions, ids, and the typed codec.
- ``scheduling/``: ``KeyRunner`` (per-key order, cross-key concurrency,
  back-pressure), run slots, thread pools.
- ``features/``: callbacks, steering, progress, conversations, sub-agents,
  retrieval, long-term memory, skills; they plug into ``execution/`` through
  ``execution/extensions.py`` (``features.register_all``, called by the engine).
- ``durable.py``: the public seam integrations use, and the only module of
  the runtime they import.
- ``local/`` and ``flink/``: the two hosts; only ``flink/`` imports PyFlink.
"""
