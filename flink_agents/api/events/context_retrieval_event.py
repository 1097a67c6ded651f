"""Events of the built-in context retrieval action.

Send a ``ContextRetrievalRequestEvent`` from an action; the built-in action
(``runtime.builtin_actions.context_retrieval_action``) queries the named
vector store with the request's text, journaled (a replay after a failover
does not query again), and answers with a ``ContextRetrievalResponseEvent``
carrying the documents found, closest first. Names and constructors as
Flink Agents 0.3.1's ``flink_agents.api.events.context_retrieval_event``.
"""

from __future__ import annotations

from typing import Any, ClassVar, List
from uuid import UUID

from pydantic import Field

from flink_agents.api.events.event import Event
from flink_agents.api.vector_stores.vector_store import Document

__all__ = ["ContextRetrievalRequestEvent", "ContextRetrievalResponseEvent"]


class ContextRetrievalRequestEvent(Event):
    """Asks for the documents of ``vector_store`` closest to ``query``.

    Built as in 0.3.1: ``ContextRetrievalRequestEvent(query, vector_store, max_results=3)``.

    Attributes:
        query: The text searched for.
        vector_store: Name of the agent's ``VECTOR_STORE`` resource.
        max_results: At most this many documents (>= 1; default 3).
    """

    EVENT_TYPE: ClassVar[str] = "_context_retrieval_request_event"

    query: str
    vector_store: str
    max_results: int = Field(default=3, ge=1)

    def __init__(self, query: str, vector_store: str, max_results: int = 3, **data: Any) -> None:
        super().__init__(query=query, vector_store=vector_store, max_results=max_results, **data)


class ContextRetrievalResponseEvent(Event):
    """The documents found for the request ``request_id``.

    Built as in 0.3.1: ``ContextRetrievalResponseEvent(request_id, query, documents)``.

    Attributes:
        request_id: The ``id`` of the ``ContextRetrievalRequestEvent``.
        query: The request's text.
        documents: What the store returned, closest first (``Document.score``
            set by the store; Chroma: a distance, lower is closer).
    """

    EVENT_TYPE: ClassVar[str] = "_context_retrieval_response_event"

    request_id: UUID
    query: str
    documents: List[Document]

    def __init__(self, request_id: UUID, query: str, documents: List[Document], **data: Any) -> None:
        super().__init__(request_id=request_id, query=query, documents=documents, **data)
