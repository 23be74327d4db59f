"""A config's pydantic ValidationError as the one line a user reads (bench.config.models raises it as ConfigError)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from support.inputs import show
from support.suggest import close_match, did_you_mean

# pydantic's union members and wrappers in an error's location: not fields of the YAML (`max_len.int`)
_NOT_FIELDS = {"function-after", "int", "str", "bool", "float", "list[int]", "list[str]", "list[float]"}


def _loc(loc: tuple) -> str:
    shown = [str(p) for i, p in enumerate(loc) if not (i and isinstance(p, str) and p in _NOT_FIELDS)]
    return ".".join(shown) or "(top level)"


def _model_at(loc: list, root: type[BaseModel]) -> type[BaseModel] | None:
    """The config model that holds the field at `loc` (for the allowed names of an unknown field)."""
    model: type[BaseModel] = root
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field_info = model.model_fields.get(part)
        if field_info is None:
            return None
        found = [t for t in _types_in(field_info.annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
        if not found:
            return None
        model = found[0]
    return model


def _types_in(annotation: Any) -> list:
    out, todo = [], [annotation]
    while todo:
        t = todo.pop()
        out.append(t)
        todo.extend(getattr(t, "__args__", ()))
    return out


def validation_message(exc: ValidationError, data: dict, path, root: type[BaseModel]) -> str:
    """The first error of a config's validation as one line: the file, the field (a set by its name) and
    what is allowed; an unknown field lists the allowed names and the closest one."""
    err = exc.errors()[0]
    loc = list(err["loc"])
    holder = _model_at(loc, root) if err["type"] == "extra_forbidden" else None
    # name sets by their `name` rather than their index, so the message points at the YAML
    if len(loc) >= 2 and loc[0] == "sets" and isinstance(loc[1], int):
        sets = data.get("sets") or []
        if loc[1] < len(sets) and isinstance(sets[loc[1]], dict) and "name" in sets[loc[1]]:
            loc[1] = sets[loc[1]]["name"]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
        if holder is not None:
            names = list(holder.model_fields)
            msg += f"; allowed: {', '.join(names)}{did_you_mean(loc[-1], names)}"
    elif err["type"] == "missing":
        msg = "required field is missing" + _misspelt(exc, err["loc"])
    elif err["type"] in ("literal_error", "finite_number"):
        msg = f"{msg}, got {show(err.get('input'))}"
    if isinstance(err.get("input"), bool) and err["type"] == "string_type":
        # YAML 1.1 reads yes/no/on/off/true/false unquoted as booleans
        msg = f"read as the boolean {err['input']} (YAML takes yes, no, on, off unquoted as booleans): quote it"
    return f"{path}: {_loc(tuple(loc))}: {msg}"


def _misspelt(exc: ValidationError, loc: tuple) -> str:
    """` (unknown key 'provders' — did you mean 'providers'?)` when the mapping that misses a required field
    holds an unknown key close to its name (pydantic reports the missing field first, the typo apart)."""
    beside = [e["loc"][-1] for e in exc.errors() if e["type"] == "extra_forbidden" and tuple(e["loc"][:-1]) == loc[:-1]]
    for key in beside:
        if close_match(key, [loc[-1]]):
            return f" (unknown key {key!r} — did you mean {loc[-1]!r}?)"
    return f" (beside it the unknown key {beside[0]!r})" if beside else ""
