"""One line of text for a failure: how an exception is recorded in results.json, a skip reason, or an
error message the CLI prints (docs/DESIGN.md §13: bad input is one line)."""

from __future__ import annotations

import re

LIMIT = 300


def one_line(what: BaseException | str, limit: int = LIMIT, *, type_name: bool = True) -> str:
    """`what` as one line of at most `limit` characters (cut with "...").

    An exception reads `Type: first line of its message` (`type_name=False`: the first line alone); its
    type alone when the message is empty. Later lines of a message are context (a compiler's source
    dump, a traceback) and are dropped. A text, a message of our own that may quote a multi-line one,
    keeps every word with its whitespace collapsed."""
    if isinstance(what, BaseException):
        lines = str(what).strip().splitlines()
        first = lines[0].strip() if lines else ""
        kind = type(what).__name__
        text = (f"{kind}: {first}" if type_name else first) if first else kind
    else:
        text = " ".join(str(what).split())
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def regex_error(pattern: str) -> str | None:
    """Why `pattern` is not a usable Python regular expression (None: it is). `re` raises more than re.error
    on hostile patterns: OverflowError for a repetition count past its limit (`a{99999999999}`),
    RecursionError for thousands of nested groups."""
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        return one_line(exc, type_name=not isinstance(exc, re.error))
    return None
