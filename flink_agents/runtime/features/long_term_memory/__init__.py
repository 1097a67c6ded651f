"""``ctx.long_term_memory``: the long-term memory of the key an action runs for.

``long_term_memory_of(ctx)`` builds it for one action invocation from the
job's configuration (``LongTermMemoryOptions``):

- ``long-term-memory.vector-store`` names a ``VECTOR_STORE`` resource of the
  agent: a ``VectorStoreLongTermMemory`` over it (``vector_store_memory``),
  holding this key's items only, every call journaled;
- the three ``long-term-memory.mem0.*`` options (all set): Mem0, as in Flink
  Agents 0.3.1 (``flink_agents.runtime.memory.mem0``; the ``mem0`` extra).

The memory and the sets it returns are bound to the invocation, like the
context itself: once the action returned they refuse every call.
"""

from __future__ import annotations

from typing import Any, List

from flink_agents.api.core_options import AgentConfigOptions
from flink_agents.api.memory.long_term_memory import BaseLongTermMemory, LongTermMemoryOptions
from flink_agents.api.resource import ResourceType
from flink_agents.api.vector_stores.vector_store import BaseVectorStore
from flink_agents.runtime.features.long_term_memory.observed import ObservedLongTermMemory
from flink_agents.runtime.features.long_term_memory.vector_store_memory import (
    VectorStoreLongTermMemory,
    collection_of,
    scope_of,
    validate_set_name,
)

__all__ = ["VectorStoreLongTermMemory", "collection_of", "long_term_memory_of", "validate_set_name"]

_MEM0_OPTIONS = (
    LongTermMemoryOptions.Mem0.CHAT_MODEL_SETUP,
    LongTermMemoryOptions.Mem0.EMBEDDING_MODEL_SETUP,
    LongTermMemoryOptions.Mem0.VECTOR_STORE,
)


def long_term_memory_of(ctx: Any) -> BaseLongTermMemory:
    """See ``_backend``; wrapped to record the action's operations when
    long-term memory events are on (``ctx.ltm_observations`` set;
    ``observed.ObservedLongTermMemory``)."""
    memory = _backend(ctx)
    seen = getattr(ctx, "ltm_observations", None)
    return memory if seen is None else ObservedLongTermMemory(inner=memory, seen=seen)


def _backend(ctx: Any) -> BaseLongTermMemory:
    """The long-term memory of ``ctx``'s key, bound to ``ctx``'s invocation.

    Args:
        ctx: The runtime's ``ActionContext`` (``runtime.execution.context``).

    Raises:
        RuntimeError: The job configures no long-term memory (the message
            names ``long-term-memory.vector-store`` with an example), or only
            some of the Mem0 options.
        KeyError: The configured store is not a ``VECTOR_STORE`` resource of
            the agent (names it and the agent's vector stores).
        TypeError: The resource is not a ``BaseVectorStore``.
        ImportError: Mem0 is configured and ``mem0ai`` is not installed.
    """
    config = ctx.config
    mem0 = [config.get(option) for option in _MEM0_OPTIONS]
    if any(mem0):
        if not all(mem0):
            missing = [option.key for option, value in zip(_MEM0_OPTIONS, mem0) if not value]
            raise RuntimeError(f"Mem0 long-term memory needs all three long-term-memory.mem0.* options; not set: {missing}")
        from flink_agents.runtime.memory.mem0.mem0_long_term_memory import mem0_memory_of

        return mem0_memory_of(ctx, *mem0)
    name = config.get(LongTermMemoryOptions.VECTOR_STORE)
    known = _vector_stores(ctx)
    if not name:
        raise RuntimeError(
            f"action {ctx.action_name!r} used ctx.long_term_memory, but the job configures no long-term memory: "
            f"set {LongTermMemoryOptions.VECTOR_STORE.key!r} to the name of one of the agent's vector stores, "
            f"e.g. env.get_config().set({LongTermMemoryOptions.VECTOR_STORE.key!r}, 'memory_store') "
            f"(the agent's vector stores: {known})"
        )
    if name not in known:
        raise KeyError(
            f"{LongTermMemoryOptions.VECTOR_STORE.key} is {name!r}, which is not a vector store of "
            f"{ctx.runtime_run.plan.agent} (its vector stores: {known})"
        )
    # The raw store from the resource cache: every memory call is journaled
    # once, as itself, not again as vector store calls.
    store = ctx._resources(name, ResourceType.VECTOR_STORE)
    if not isinstance(store, BaseVectorStore):
        raise TypeError(f"{LongTermMemoryOptions.VECTOR_STORE.key} {name!r} is a {type(store).__name__}, not a BaseVectorStore")
    scope = scope_of(ctx.run_identity.key_text, config.get(AgentConfigOptions.JOB_IDENTIFIER))
    return VectorStoreLongTermMemory(store_name=name, store=store, scope=scope).bind(ctx)


def _vector_stores(ctx: Any) -> List[str]:
    return sorted(ctx.runtime_run.plan.resources.get(ResourceType.VECTOR_STORE, {}))
