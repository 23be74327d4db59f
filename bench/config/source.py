"""Reading a config — a YAML file or a Python dict — into plain data, with every guard applied before the
data reaches the models (bench.config.models): the path's text, a regular file of bounded size (a FIFO or a
device is refused, not waited on), YAML nesting depth and alias expansion counted on the parser's events
before anything is built (a 9×9 alias bomb is ~400 million values), duplicate keys, and the built data
checked like any untrusted data (support.inputs.check_plain: integer width, key types, cycles; numpy
scalars in a dict config become their Python values, any other foreign object is refused).

Every problem is one `ConfigError` line naming the file (or `<config dict>`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from bench.errors import ConfigError
from support.inputs import InputError, MiB, a_type, as_python, check_plain, read_regular

DICT_SOURCE = "<config dict>"  # how errors name a config given as a Python dict
MAX_CONFIG_BYTES = 4 * MiB  # the shipped configs are 1-3 KiB
MAX_DEPTH = 32  # a config nests about 5 levels (sets -> [i] -> lengths -> fill -> [j])
MAX_VALUES = 100_000  # YAML values once every alias is expanded
MAX_SCALAR = 65_536  # characters in one YAML value


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a config with `name:` twice is a mistake."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden, by design
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    seen = key in first
                except TypeError:  # an unhashable key: SafeLoader reports it
                    continue
                if seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"the key {key!r} appears twice (first on line {first[key] + 1})",
                        key_node.start_mark,
                    )
                first[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _yaml_error(path: Path, exc: yaml.YAMLError) -> ConfigError:
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1})" if mark else ""
    return ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}")


def check_yaml_events(raw: bytes, path: Path) -> None:
    """Depth, expanded size and value length of a YAML document, from the parser's events (an iterative
    state machine: nothing is built, so neither a 50,000-deep document nor an alias bomb costs more
    than one pass)."""
    frames: list[list] = []  # [anchor, values inside] per open collection
    sizes: dict[str, int] = {}  # anchor -> its expanded size
    top = 0

    def add(n: int, line: int) -> None:
        nonlocal top
        if frames:
            frames[-1][1] += n
            count = frames[-1][1]
        else:
            top += n
            count = top
        if count > MAX_VALUES:
            raise ConfigError(
                f"{path}: line {line}: more than {MAX_VALUES:,} values once YAML aliases are expanded; "
                "allowed: a config of ordinary size (an alias expands to everything its anchor holds)"
            )

    try:
        for ev in yaml.parse(raw, Loader=yaml.SafeLoader):
            line = ev.start_mark.line + 1 if ev.start_mark else 0
            if isinstance(ev, yaml.CollectionStartEvent):
                frames.append([ev.anchor, 0])
                if len(frames) > MAX_DEPTH:
                    raise ConfigError(f"{path}: line {line}: nested more than {MAX_DEPTH} levels deep; allowed: fewer")
            elif isinstance(ev, yaml.CollectionEndEvent):
                anchor, n = frames.pop()
                if anchor:
                    sizes[anchor] = n + 1
                add(n + 1, line)
            elif isinstance(ev, yaml.ScalarEvent):
                if len(ev.value) > MAX_SCALAR:
                    raise ConfigError(
                        f"{path}: line {line}: a value of {len(ev.value):,} characters; allowed: at most {MAX_SCALAR:,}"
                    )
                if ev.anchor:
                    sizes[ev.anchor] = 1
                add(1, line)
            elif isinstance(ev, yaml.AliasEvent):
                add(sizes.get(ev.anchor, 1), line)
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None


def read_config(source: Any) -> tuple[Path, Any, bytes]:
    """(path, data, raw bytes) of a config: a YAML file's path, or a dict (`path` is then DICT_SOURCE and
    `raw` its canonical JSON, for the config's sha256)."""
    if isinstance(source, Mapping):
        try:
            check_plain(source, DICT_SOURCE, max_depth=MAX_DEPTH, max_nodes=MAX_VALUES, paths=True, numpy_scalars=True)
        except InputError as exc:
            raise ConfigError(str(exc)) from None
        data = as_python(source)  # a config built from numpy or pandas: np.int64(2) is 2
        raw = json.dumps(data, sort_keys=True, default=str).encode()
        return Path(DICT_SOURCE), data, raw
    if not isinstance(source, (str, Path)):
        raise ConfigError(
            f"config: {a_type(source)} ({source!r:.60}); allowed: a YAML file path or a dict of config fields"
        )
    try:
        raw = read_regular(source, kind="a YAML config file", max_bytes=MAX_CONFIG_BYTES, what=str(source))
    except InputError as exc:
        text = str(exc).replace(": no such file;", ": config file not found;")
        raise ConfigError(text) from None
    path = Path(source)
    check_yaml_events(raw, path)
    try:
        data = yaml.load(raw, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    except (ValueError, RecursionError):  # int() of thousands of digits; nesting the events check missed
        raise ConfigError(
            f"{path}: holds a number of thousands of digits or nests too deeply; allowed: an ordinary config"
        ) from None
    try:
        check_plain(data, str(path), max_depth=MAX_DEPTH, max_nodes=MAX_VALUES)
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    return path, data, raw
