"""Events of the built-in context retrieval action.

Send a ``ContextRetrievalRequestEvent`` from an action; the built-in action
(``runtime.features.retrieval.context_retrieval_action``) queries the named
vector store with the request's text (and ``filters``), journaled (a replay after a failover
does not query again), and answers with a ``ContextRetrievalResponseEvent``
carrying the documents found, closest first. Names and constructors as
Flink Agents 0.3.1's ``flink_agents.api.events.context_retrieval_event``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List
from uuid import UUID

from pydantic import Field, field_validator

from flink_agents.api.events.event import Event
from flink_agents.api.vector_stores.vector_store import Document, check_filters

__all__ = ["ContextRetrievalRequestEvent", "ContextRetrievalResponseEvent"]


class ContextRetrievalRequestEvent(Event):
    """Asks for the documents of ``vector_store`` closest to ``query``.

    Built as in 0.3.1: ``ContextRetrievalRequestEvent(query, vector_store, max_results=3)``;
    ``filters`` is this project's compatible extension.

    Attributes:
        query: The text searched for.
        vector_store: Name of the agent's ``VECTOR_STORE`` resource.
        max_results: At most this many documents (>= 1; default 3).
        filters: Equality filter on document metadata (``{"product_id":
            "P1"}``; several keys AND-ed; ``api.vector_stores.vector_store``),
            or None for all documents.

    Raises:
        NotImplementedError: ``filters`` uses an operator or a non-scalar
            value (names the field).
        TypeError: ``filters`` is not a dict.
    """

    EVENT_TYPE: ClassVar[str] = "_context_retrieval_request_event"

    query: str
    vector_store: str
    max_results: int = Field(default=3, ge=1)
    filters: Dict[str, Any] | None = None

    JSON_OMIT_DEFAULT: ClassVar[frozenset] = frozenset({"filters"})

    def __init__(
        self, query: str, vector_store: str, max_results: int = 3, filters: Dict[str, Any] | None = None, **data: Any
    ) -> None:
        super().__init__(query=query, vector_store=vector_store, max_results=max_results, filters=filters, **data)

    @field_validator("filters", mode="before")
    @classmethod
    def _check_filters(cls, value: Any) -> Any:
        return check_filters(value)


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
