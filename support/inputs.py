"""Checks every untrusted input gets before it is used, shared by every layer (the commands, the config
loader, the readers of run files and plans, the lengths files): a path's text, a file read with a size
bound (never a FIFO or a device, which would block or never end), JSON-like data (depth, shared
references, integer width, key types, cycles, foreign types such as numpy scalars) and numbers typed on a
command line (ASCII digits only: Python's `int()` reads "٣" as 3).

Each check raises `InputError` (a ValueError) whose text is one line naming the input, what is wrong and
what is allowed; the caller re-raises it as its own error type (ConfigError, UsageError, ResultsError).
"""

from __future__ import annotations

import json
import os
import re
import reprlib
import stat
import sys
from collections.abc import Mapping
from typing import Any

NAME_MAX = 255  # bytes in one file name (Linux, macOS)
PATH_MAX = 4095  # bytes in a whole path, without the terminating NUL (Linux)
MAX_DEPTH = 64  # nesting levels of JSON-like data; a results.json has about 8, a config 5
INT_BITS = 64  # integers must fit 64 bits (seeds, byte and energy counters); wider ones are hostile
MiB = 2**20

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 40
_REPR.maxlist = _REPR.maxdict = 4


class InputError(ValueError):
    """Untrusted input that cannot be used; `str()` is one line."""


def a_type(value: Any) -> str:
    """`a str`, `an int`, `a numpy.int64`: a value's type with its article, for error lines."""
    kind = f"{type(value).__module__}.{type(value).__name__}".removeprefix("builtins.")
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def show(value: Any) -> str:
    """A short repr of a value for an error line (never the whole of a huge string or list)."""
    return _REPR.repr(value)


# ---------------------------------------------------------------------------------------------- paths


def check_path_text(path: Any, what: str) -> str:
    """`path` as text after the checks every path gets: text (str or os.PathLike), not empty, no NUL,
    encodable, each name at most NAME_MAX bytes and the whole at most PATH_MAX bytes. `what` names the
    input in the error ("--out", "output_dir", a file)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise InputError(f"{what}: {show(path)} is {a_type(path)}; allowed: a path (text)")
    if not path:
        raise InputError(f"{what}: the path is empty; allowed: a file or folder path")
    if "\0" in path:
        raise InputError(f"{what}: {show(path)} holds a NUL character; allowed: a path without NUL")
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        raise InputError(f"{what}: {show(path)} is not valid text for a path") from None
    if len(raw) > PATH_MAX:
        raise InputError(f"{what}: the path is {len(raw):,} bytes long; allowed: at most {PATH_MAX} bytes")
    longest = max(raw.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        raise InputError(
            f"{what}: a name in the path is {len(longest):,} bytes long ({show(os.fsdecode(longest))}); "
            f"allowed: at most {NAME_MAX} bytes per name"
        )
    return path


def read_regular(path: Any, *, kind: str, max_bytes: int, what: str | None = None) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; `kind` says what is allowed ("a YAML config
    file"). Opened without blocking, so a FIFO or a device is refused rather than waited on."""
    text = check_path_text(path, what or "path")
    where = what or text
    try:
        fd = os.open(text, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{where}: no such file; allowed: {kind}") from None
    except OSError as exc:
        raise InputError(f"{where}: cannot open it ({exc.strerror or exc}); allowed: {kind}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{where}: is a folder; allowed: {kind}")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{where}: not a regular file (a FIFO, socket or device); allowed: {kind}")
        if st.st_size > max_bytes:
            raise InputError(f"{where}: {st.st_size / MiB:,.1f} MiB; allowed: {kind} of at most {max_bytes // MiB} MiB")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:  # it grew while being read
            raise InputError(f"{where}: more than {max_bytes // MiB} MiB; allowed: {kind} of at most that")
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"{where}: cannot read it ({exc.strerror or exc}); allowed: {kind}") from None
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------- JSON-like data


def _where(base: str, link: tuple | None) -> str:
    """`base` and the path a link chain `(parent_link, key)` leads to: `cfg.yaml: sets[0].lengths`."""
    parts = []
    while link is not None:
        link, key = link
        parts.append(key)
    out = base
    for p in reversed(parts):
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


_LEAF = (str, bool, float, type(None))
_LEAVE = object()  # stack marker: the walk leaves a container


def _wide(n: int, at: str) -> InputError:
    digits = int(n.bit_length() * 0.30103) + 1  # str() of 4300+ digits raises in Python 3.11
    return InputError(f"{at}: an integer of about {digits} digits; allowed: integers of at most {INT_BITS} bits")


def numpy_scalar(obj: Any) -> bool:
    """A numpy integer, float or bool scalar (`np.int64(2)`, `np.float32(1.0)`, `np.bool_(True)`): what a
    config built from numpy or pandas holds. Without numpy imported there can be none."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, (np.integer, np.floating, np.bool_))


def as_python(data: Any) -> Any:
    """`data` with every numpy scalar (`numpy_scalar`) replaced by its Python value (`x.item()`: int, float,
    bool), mappings as dicts. Call it on data `check_plain(..., numpy_scalars=True)` accepted: its depth
    and size are bounded and it has no cycle, so the recursion ends."""
    if numpy_scalar(data):
        return data.item()
    if isinstance(data, Mapping):
        return {k: as_python(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(as_python(v) for v in data)
    return data


def check_plain(
    data: Any,
    where: str,
    *,
    max_depth: int = MAX_DEPTH,
    max_nodes: int | None = None,
    paths: bool = False,
    numpy_scalars: bool = False,
) -> None:
    """Refuse what JSON/YAML-like data must not hold: nesting deeper than `max_depth`, more than
    `max_nodes` values counting every shared reference at its full size (a YAML alias bomb, a dict that
    repeats one list a million times), cycles, keys that are not text, integers wider than 64 bits,
    and any type other than text, numbers, booleans, null, lists/tuples and mappings (`paths`: also
    os.PathLike values; `numpy_scalars`: also numpy integer, float and bool scalars, which `as_python`
    converts). Iterative: no recursion limit is reached whatever the input."""
    stack: list[tuple[Any, Any, int]] = [(data, None, 0)]
    on_path: set[int] = set()
    nodes = 0
    while stack:
        obj, link, depth = stack.pop()
        if obj is _LEAVE:
            on_path.discard(link)
            continue
        nodes += 1
        if isinstance(obj, _LEAF) or (paths and isinstance(obj, os.PathLike)) or (numpy_scalars and numpy_scalar(obj)):
            continue
        if isinstance(obj, int):
            if obj.bit_length() > INT_BITS:
                raise _wide(obj, _where(where, link))
            continue
        if not isinstance(obj, (Mapping, list, tuple)):
            hint = " (convert it: x.tolist())" if type(obj).__module__.startswith("numpy") else ""
            raise InputError(
                f"{_where(where, link)}: {a_type(obj)} value {show(obj)}{hint}; allowed: text, numbers, booleans, "
                "null, lists and mappings"
            )
        if depth >= max_depth:
            raise InputError(f"{_where(where, link)}: nested more than {max_depth} levels deep; allowed: fewer")
        if id(obj) in on_path:
            raise InputError(f"{_where(where, link)}: refers back to itself (a cycle); allowed: a tree of values")
        on_path.add(id(obj))
        stack.append((_LEAVE, id(obj), depth))
        items = obj.items() if isinstance(obj, Mapping) else enumerate(obj)
        children = []
        for k, v in items:
            if isinstance(obj, Mapping) and not isinstance(k, str):
                raise InputError(f"{_where(where, link)}: the key {show(k)} is {a_type(k)}; allowed: text keys")
            if type(v) in _LEAF:  # the bulk of a results file (samples, lengths): no stack entry
                nodes += 1
            elif type(v) is int:
                nodes += 1
                if v.bit_length() > INT_BITS:
                    raise _wide(v, _where(where, (link, k)))
            else:
                children.append((v, (link, k), depth + 1))
        if max_nodes is not None and nodes + len(children) > max_nodes:
            raise InputError(
                f"{where}: more than {max_nodes:,} values once shared references (YAML aliases) are expanded; "
                "allowed: a config of ordinary size"
            )
        stack.extend(reversed(children))


def load_json(raw: bytes, where: str) -> Any:
    """Parse JSON bytes that came from outside, with one-line errors; then `check_plain` the result."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte {exc.start}); allowed: a JSON file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise InputError(f"{where}: nested too deeply to read; allowed: at most {MAX_DEPTH} levels") from None
    except ValueError:  # an integer beyond Python's 4300-digit conversion limit
        raise InputError(
            f"{where}: holds an integer of thousands of digits; allowed: integers of at most {INT_BITS} bits"
        ) from None
    check_plain(data, where)
    return data


# -------------------------------------------------------------------------------- command-line numbers

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.I)


def integer(text: str) -> int:
    """argparse type: an integer in ASCII digits (Python's int() also reads other scripts' digits)."""
    if not isinstance(text, str) or len(text) > 30 or not _INT.fullmatch(text.strip()):
        raise ValueError(text)
    return int(text)


def number(text: str) -> float:
    """argparse type: a number in ASCII digits (float() also reads other scripts' digits)."""
    if not isinstance(text, str) or len(text) > 60 or not _FLOAT.fullmatch(text.strip()):
        raise ValueError(text)
    return float(text)
