"""The review index of the product-QA job: reviews in a Chroma collection,
built once, and the extractive answer of the offline ``local`` model.

Each review ``{"id": product id, "review": text, "ts": unix seconds}`` is one
``Document``: id ``"<product id>@<ts>"`` (unique in the shared data and the
bundled sample), content the review text, metadata ``{"product_id", "ts"}``
(what a question's retrieval filters on). Vectors come from the hashing
embedding (``HashingEmbeddingModelConnection``: offline, lexical).

``build_review_index`` writes the collection into a directory once and
leaves a manifest (``index.json``: a digest of the reviews and the embedding
settings, the review count); a later run over the same reviews reuses the
directory as is, other reviews rebuild it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence

from flink_agents._private_files import make_private_dirs
from flink_agents.api.vector_stores.vector_store import Document
from flink_agents.integrations.vector_stores.chroma.chroma_vector_store import ChromaVectorStore

__all__ = [
    "COLLECTION",
    "ReviewIndex",
    "build_review_index",
    "extractive_answer",
    "review_document",
    "review_id",
]

COLLECTION = "product_reviews"
# Chroma searches an HNSW graph, which is approximate: with its default
# breadth (ef 100) a question over one product's reviews sometimes missed a
# closer review (2 of 20 questions on 1 of 7 builds of the shared data).
# A broader search costs little at this size.
COLLECTION_METADATA = {"hnsw:construction_ef": 400, "hnsw:search_ef": 400}
MANIFEST = "index.json"
_BATCH = 500
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# Words that say nothing about what a question asks.
_STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does doing for from had has have how i if in into is it "
    "its it's me my of on or so than that the their them then there these they this those to too very was we "
    "were what when where which who why will with would you your yours any much many more most some such just "
    "about also get got really".split()
)


def review_id(review: Dict[str, Any]) -> str:
    """The document id of a review: ``"<product id>@<ts>"``."""
    return f"{review['id']}@{review['ts']}"


def review_document(review: Dict[str, Any]) -> Document:
    """A review as a ``Document`` (module docstring)."""
    return Document(
        id=review_id(review), content=review["review"], metadata={"product_id": review["id"], "ts": review["ts"]}
    )


@dataclass(frozen=True)
class ReviewIndex:
    """A built index.

    Attributes:
        directory: The Chroma persist directory.
        collection: The collection holding the reviews.
        reviews: How many reviews it holds.
        reused: True when an earlier build over the same reviews was kept.
        seconds: Wall time of this call.
    """

    directory: Path
    collection: str
    reviews: int
    reused: bool
    seconds: float


def _digest(reviews: Sequence[Dict[str, Any]], dimensions: int) -> str:
    digest = hashlib.sha256(
        f"hashing embedding, {dimensions} dimensions, collection {COLLECTION} {COLLECTION_METADATA}\n".encode()
    )
    for review in reviews:
        digest.update(json.dumps([review["id"], review["ts"], review["review"]]).encode("utf-8") + b"\n")
    return digest.hexdigest()


def build_review_index(
    reviews: Sequence[Dict[str, Any]], directory: Path, dimensions: int = 256, host: str | None = None,
    port: int | None = None,
) -> ReviewIndex:
    """Index ``reviews`` into ``directory`` (or a Chroma server), unless an
    index of the same reviews is there.

    Args:
        reviews: Valid reviews (``flink_agents.jobs.review_records.read_reviews``).
        directory: Chroma's persist directory, created if needed. The
            index of other reviews (or an unfinished build) in it is
            rebuilt in place; a directory holding anything else is refused.
            With ``host``, only the manifest is kept here.
        dimensions: Length of the hashing embedding's vectors.
        host, port: A Chroma server to index into instead of the directory.

    Raises:
        FileExistsError: ``directory`` is not empty and holds no index
            manifest (it is not ours to replace).
        ValueError: Two reviews have the same id (product and ts).
        ImportError: ``chromadb`` is not installed (names the extra).
    """
    import time

    from flink_agents.integrations.embedding_models.local.hashing_embedding_model import (
        HashingEmbeddingModelConnection,
        HashingEmbeddingModelSetup,
    )
    started = time.monotonic()
    digest = _digest(reviews, dimensions)
    manifest_path = directory / MANIFEST
    ours = manifest_path.is_file()
    if ours:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if manifest.get("digest") == digest:
            return ReviewIndex(directory, COLLECTION, manifest["reviews"], True, time.monotonic() - started)
    elif directory.exists() and any(directory.iterdir()):
        raise FileExistsError(
            f"index directory {directory} is not empty and holds no {MANIFEST}: give an empty or new directory"
        )
    documents = [review_document(review) for review in reviews]
    ids = [d.id for d in documents]
    if len(set(ids)) != len(ids):
        seen: set = set()
        duplicate = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise ValueError(f"two reviews have the id {duplicate!r} (same product and ts)")
    make_private_dirs(directory)  # 0700: it holds the reviews' text (an existing one is left as it is)
    # A build cut short leaves this manifest (no digest): the next run
    # rebuilds. The collection is dropped and refilled in place (removing
    # the directory under a client of this process would leave that client
    # on deleted files).
    manifest_path.write_text(json.dumps({"digest": None, "reviews": 0, "collection": COLLECTION}))
    embedding = HashingEmbeddingModelSetup(connection=HashingEmbeddingModelConnection(dimensions=dimensions))
    store = ChromaVectorStore(
        embedding_model=embedding, collection=COLLECTION, collection_metadata=COLLECTION_METADATA,
        **({"host": host, "port": port} if host else {"persist_directory": str(directory)}),
    )
    if COLLECTION in [c.name for c in store.client.list_collections()]:
        store.delete_collection(COLLECTION)  # an earlier build of other reviews
    for start in range(0, len(documents), _BATCH):
        store.add(documents[start:start + _BATCH])
    store.close()
    manifest_path.write_text(json.dumps({"digest": digest, "reviews": len(documents), "collection": COLLECTION}))
    return ReviewIndex(directory, COLLECTION, len(documents), False, time.monotonic() - started)


def _stem(word: str) -> str:
    """A light stemmer, enough to match "boils" with "boil", "sizes" with
    "size", "fitting" with "fit": strips one of -ing, -ed, -es, -s."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            word = word[: -len(suffix)]
            return word[:-1] if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2] else word
    return word


def _words(text: str) -> set:
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def extractive_answer(question: str, documents: Sequence[Document], max_sentences: int = 3) -> Dict[str, Any]:
    """The offline answer: the sentences of the retrieved reviews that best
    match the question's words, each quoted with its review id, best first.

    A sentence's score is the sum, over the question's words (stopwords
    aside, lightly stemmed) it contains, of ``log((n + 1) / df)``: ``n``
    sentences retrieved, ``df`` of them holding the word. A word in every
    review of the product (its name: "kettle") counts little, a rare one
    ("liter") much. Ties keep the retrieval order; a sentence repeated
    word for word in several reviews is quoted once.

    Args:
        question: The question text.
        documents: The retrieved reviews, closest first.
        max_sentences: At most this many sentences are quoted.

    Returns:
        ``{"answer": str, "review_ids": [ids of the quoted reviews, in
        quote order, without repeats]}``. With no sentence sharing a word,
        the first sentence of the closest review is quoted; with no
        documents, the answer says so and ``review_ids`` is empty.
    """
    if not documents:
        return {"answer": "No reviews of this product were found.", "review_ids": []}
    wanted = _words(question)
    sentences = []
    for rank, document in enumerate(documents):
        for position, sentence in enumerate(s.strip() for s in _SENTENCE.split(document.content)):
            if sentence:
                sentences.append((rank, position, sentence, document.id, _words(sentence) & wanted))
    df = {w: sum(1 for *_, words in sentences if w in words) for w in wanted}
    n = len(sentences)
    scored = sorted(
        # fsum: exactly rounded whatever the order of the set's words (a
        # plain sum of a set differs in its last bits between processes with
        # other hash seeds, and would break ties differently on each runner).
        ((-math.fsum(math.log((n + 1) / df[w]) for w in words), rank, position, sentence, rid)
         for rank, position, sentence, rid, words in sentences),
        key=lambda c: c[:3],
    )
    chosen: List[tuple] = []
    for candidate in (c for c in scored if c[0] < 0):  # a sentence repeated across reviews is quoted once
        if len(chosen) < max_sentences and all(candidate[3].casefold() != c[3].casefold() for c in chosen):
            chosen.append(candidate)
    chosen = chosen or scored[:1]
    quotes = [f'"{sentence}" ({rid})' for _, _, _, sentence, rid in chosen]
    review_ids = list(dict.fromkeys(rid for *_, rid in chosen))
    lead = "Reviewers say" if chosen[0][0] < 0 else "No review addresses this directly; the closest says"
    return {"answer": f"{lead}: " + " ".join(quotes), "review_ids": review_ids}
