"""A deterministic, offline, lexical embedding: signed feature hashing of
words and word pairs.

The vector of a text is built as in "feature hashing" (Weinberger,
Dasgupta, Langford, Smola and Attenberg, *Feature Hashing for Large Scale
Multitask Learning*, ICML 2009): the text is lower-cased and split into
words (runs of Unicode letters and digits); every word (unigram) and every
pair of adjacent words (bigram) is a feature; a feature adds +1 or -1 (the
sign taken from its hash, so collisions cancel out on average instead of
piling up) at the position ``hash(feature) mod dimensions``; the vector is
then scaled to unit length (L2 norm 1).

What it measures: word overlap. Two texts are close when they share words
and word pairs, whatever the order of the sentences; "cheap" and
"inexpensive" are as far apart as any two different words. It knows
nothing of meaning, synonyms or languages. Use it where a test, an example
or an offline job needs an embedding that is the same on every machine,
every process and every run (the hash is BLAKE2b of the UTF-8 feature, not
Python's ``hash``, so ``PYTHONHASHSEED`` does not change it), costs no
download and no service; use a real embedding model (OpenAI, Ollama, ...)
for retrieval by meaning.

Vectors have ``dimensions`` floats; a text with no words (empty, only
punctuation) embeds to the zero vector, which has no direction (a cosine
distance to it is undefined; an L2 distance is 1 to every unit vector).
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any, List, Sequence

from pydantic import Field

from flink_agents.api.embedding_models.embedding_model import (
    BaseEmbeddingModelConnection,
    BaseEmbeddingModelSetup,
    Embedding,
    texts_of,
)

__all__ = ["HashingEmbeddingModelConnection", "HashingEmbeddingModelSetup", "hashing_embedding"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _features(text: str) -> List[str]:
    words = _WORD.findall(text.lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


def hashing_embedding(text: str, dimensions: int) -> Embedding:
    """The unit-length signed feature-hashing vector of ``text`` (module
    docstring): ``dimensions`` floats, all zero for a text without words.

    Raises:
        ValueError: ``dimensions`` < 1.
    """
    if dimensions < 1:
        raise ValueError(f"dimensions must be >= 1, got {dimensions}")
    vector = [0.0] * dimensions
    for feature in _features(text):
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "big")
        sign = 1.0 if value & 1 else -1.0
        vector[(value >> 1) % dimensions] += sign
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector


class HashingEmbeddingModelConnection(BaseEmbeddingModelConnection):
    """Embeds texts by signed feature hashing, in process (module docstring).

    Attributes:
        dimensions: Length of every vector (>= 1; default 256). More
            dimensions mean fewer features sharing a position.
    """

    dimensions: int = Field(default=256, ge=1)

    def embed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Embed one text or a batch.

        Args:
            text: One string, or a sequence of strings.
            **kwargs: ``dimensions`` overrides the connection's; ``model``
                (the setup's name, ``"hashing"``) is accepted and ignored;
                anything else is refused.

        Returns:
            One unit vector of ``dimensions`` floats for a string; one per
            text, in input order, for a sequence.

        Raises:
            TypeError: An item of the batch is not a string (names its
                index), or an unknown setting was given (names it).
            ValueError: ``dimensions`` < 1.
        """
        settings = dict(kwargs)
        settings.pop("model", None)
        dimensions = int(settings.pop("dimensions", None) or self.dimensions)
        if settings:
            raise TypeError(
                f"{type(self).__name__}.embed got setting(s) it does not take: {', '.join(sorted(settings))}; "
                "it takes: dimensions, model"
            )
        texts = texts_of(text)
        vectors = [hashing_embedding(item, dimensions) for item in texts]
        return vectors[0] if isinstance(text, str) else vectors

    async def aembed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """``embed`` (pure computation, done on the caller's thread)."""
        return self.embed(text, **kwargs)


class HashingEmbeddingModelSetup(BaseEmbeddingModelSetup):
    """The hashing embedding over a ``HashingEmbeddingModelConnection``.

    Attributes:
        connection: Name of the connection resource (or the connection).
        model: ``"hashing"``, informational only.
        dimensions: Overrides the connection's ``dimensions`` when set.
    """

    model: str = Field(default="hashing")
    dimensions: int | None = Field(default=None, ge=1)

    @property
    def model_kwargs(self) -> dict:
        kwargs = super().model_kwargs
        if self.dimensions is not None:
            kwargs["dimensions"] = self.dimensions
        return kwargs
