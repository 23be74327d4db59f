"""The "did you mean" of an unknown name, for every layer's error messages."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: object, choices: Iterable[object]) -> str:
    """`"; did you mean 'x'?"` for the closest of `choices` to `word` (case-insensitive), or "" when none
    is close: appended to a one-line error after its "allowed: ..." list."""
    if not isinstance(word, str) or not word or len(word) > 200:
        return ""
    names = [str(c) for c in choices]
    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f"; did you mean {by_lower[close[0]]!r}?" if close else ""
