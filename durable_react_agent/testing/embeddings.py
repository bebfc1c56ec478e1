"""The scripted model's `/v1/embeddings`: deterministic vectors that know a few synonyms, so the
tests can tell a memory found by meaning from one found by its words. A word counts for its
concept (eat, meal, sushi: food), a few function words for nothing, and each concept is a
dimension picked by its hash. No randomness, no I/O."""

from __future__ import annotations

import hashlib
import math
import re

DIMENSIONS = 256
WORD = re.compile(r"\w+")
CONCEPTS = {
    "food": ("food", "foods", "eat", "eating", "ate", "meal", "meals", "dish", "dishes",
             "cuisine", "sushi", "pizza", "pasta", "ramen", "lunch", "dinner", "breakfast"),
    "fondness": ("like", "likes", "love", "loves", "enjoy", "enjoys", "favourite", "favorite",
                 "prefer", "prefers", "fond"),
    "place": ("city", "cities", "town", "towns", "place", "live", "lives", "home"),
    "travel": ("train", "trains", "commute", "bus", "travel", "trip", "flight"),
}
CONCEPT_OF = {word: concept for concept, words in CONCEPTS.items() for word in words}
UNSAID = frozenset({"i", "a", "an", "the", "is", "am", "are", "do", "does", "what", "which",
                    "my", "me", "to", "of", "and", "that", "could", "every", "day"})


def embed(text: str) -> list[float]:
    """`text`'s vector, of unit length (all zeros but one for a text of no counted word)."""
    vector = [0.0] * DIMENSIONS
    for word in WORD.findall(text.lower()):
        if word in UNSAID:
            continue
        concept = CONCEPT_OF.get(word, word)
        vector[int(hashlib.sha256(concept.encode()).hexdigest(), 16) % DIMENSIONS] += 1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0:
        vector[0] = 1.0
        return vector
    return [x / norm for x in vector]
