"""The built-in context retrieval action (``_context_retrieval_action`` in
every plan, listening to ``ContextRetrievalRequestEvent``).

For a request ``(query, vector_store, max_results, filters)`` it queries the
agent's ``VECTOR_STORE`` resource ``vector_store`` with
``VectorStoreQuery(query_text=query, limit=max_results, filters=filters)``
and sends ``ContextRetrievalResponseEvent(request_id=<request's id>, query,
documents)``, closest first.

The query is one journaled call (``vector_store:<name>.query``, through the
``JournaledVectorStore`` the context hands out): a replay after a failover
returns the recorded documents and does not query the store again. The
store's blocking call runs on a worker thread, so the event loop of the
record's other tasks keeps running.

Retrieved documents are the store's data, sent as they are; an action that
puts them into a prompt decides how to present them (documents from an
untrusted source: ``runtime.features.untrusted.wrap_untrusted``).
"""

from __future__ import annotations

from typing import Any

from flink_agents.api.events.context_retrieval_event import (
    ContextRetrievalRequestEvent,
    ContextRetrievalResponseEvent,
)
from flink_agents.api.events.event import Event
from flink_agents.api.resource import ResourceType
from flink_agents.api.vector_stores.vector_store import VectorStoreQuery

__all__ = ["context_retrieval_action"]


async def context_retrieval_action(event: Event, ctx: Any) -> None:
    """Answer a ``ContextRetrievalRequestEvent`` (module docstring).

    Raises:
        KeyError: The agent has no vector store of the request's name (names
            it and the known ones).
        TypeError: The resource of that name is not a vector store.
        NotImplementedError: The request's ``filters`` are outside the
            equality DSL (names the field).
        Whatever the store raises (on replay: the journaled error).
    """
    request = ContextRetrievalRequestEvent.from_event(event)
    try:
        store = ctx.get_resource(request.vector_store, ResourceType.VECTOR_STORE)
    except KeyError as missing:
        raise KeyError(
            f"ContextRetrievalRequestEvent asks vector store {request.vector_store!r}, which the agent does not "
            f"declare: {missing.args[0] if missing.args else missing}"
        ) from None
    aquery = getattr(store, "aquery", None)
    if aquery is None:
        raise TypeError(
            f"ContextRetrievalRequestEvent asks vector store {request.vector_store!r}, but that resource is a "
            f"{type(store).__name__}, not a vector store (declare it with @vector_store or a BaseVectorStore class)"
        )
    query = VectorStoreQuery(query_text=request.query, limit=request.max_results, filters=request.filters)
    result = await aquery(query)
    ctx.send_event(ContextRetrievalResponseEvent(request_id=request.id, query=request.query, documents=result.documents))
