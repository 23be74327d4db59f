"""The "did you mean" of an unknown name, for every layer's error messages."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_match(word: object, choices: Iterable[object]) -> str | None:
    """The closest of `choices` to `word` (case-insensitive), or None when none is close."""
    if not isinstance(word, str) or not word or len(word) > 200:
        return None
    names = [str(c) for c in choices]
    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def did_you_mean(word: object, choices: Iterable[object]) -> str:
    """`"; did you mean 'x'?"` for the closest of `choices` to `word` (case-insensitive), or "" when none
    is close: appended to a one-line error after its "allowed: ..." list."""
    close = close_match(word, choices)
    return f"; did you mean {close!r}?" if close else ""
