"""The RFC's comparison key: NFKC, case folding, whitespace collapse, edge stripping.

Normalization is a comparison aid, never a stored identity (RFC "Matching
policy"). The key is computed to a fixpoint because case folding can produce
text that NFKC would fold again, and a key that changes when normalized twice
would make replay disagree with itself.
"""

import functools
import unicodedata

_EDGE_CATEGORIES = frozenset({"C", "P", "Z"})
_MAX_ROUNDS = 4


def _strip_edges(value: str) -> str:
    start, end = 0, len(value)
    while start < end and unicodedata.category(value[start])[0] in _EDGE_CATEGORIES:
        start += 1
    while end > start and unicodedata.category(value[end - 1])[0] in _EDGE_CATEGORIES:
        end -= 1
    return value[start:end]


def _round(value: str) -> str:
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold())
    return _strip_edges(" ".join(folded.split()))


# Cues, conditions and check names repeat across a journal; short ones are memoized
# (bounded: at most _MEMO_SIZE texts of at most _MEMO_MAX_CHARS characters).
_MEMO_SIZE = 16_384
_MEMO_MAX_CHARS = 256


def normalize(value: str) -> str:
    """Return the comparison key of ``value``; the empty string means blank."""
    if len(value) <= _MEMO_MAX_CHARS:
        return _memoized(value)
    return _normalize(value)


def _normalize(value: str) -> str:
    current = value
    for _ in range(_MAX_ROUNDS):
        following = _round(current)
        if following == current:
            return current
        current = following
    return current


_memoized = functools.lru_cache(maxsize=_MEMO_SIZE)(_normalize)


def is_blank(value: str) -> bool:
    return normalize(value) == ""


@functools.lru_cache(maxsize=4096)
def bigrams(key: str) -> frozenset[tuple[str, ...]]:
    """Token bigrams of an already-normalized key (a single token is its own gram)."""
    tokens = tuple(key.split())
    if not tokens:
        return frozenset()
    if len(tokens) == 1:
        return frozenset({tokens})
    return frozenset(tokens[i : i + 2] for i in range(len(tokens) - 1))


def bigram_overlap(left_key: str, right_key: str) -> float:
    """Jaccard overlap of two keys' token bigrams, in [0, 1]."""
    left, right = bigrams(left_key), bigrams(right_key)
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)
