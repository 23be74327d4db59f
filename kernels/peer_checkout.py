"""Where a peer kernel's code comes from, and how it is loaded: never a copy in this repository, always the
user's own checkout or installed package (docs/DESIGN.md §11, "Peer kernels").

A peer provider finds its code in this order:

1. the provider option `path`: a checkout (`~` expanded; a relative path is the repository root's, the
   folder that holds `kernels/`, so every config and the Python API resolve it alike);
2. the peer's package, when it is importable as installed (e.g. `ads_mkl.ops.oss.gdpa` in Meta's tree);
3. the default checkout `.peers/<repository>` under the repository root (git-ignored).

Without any of them the provider is skipped with one line saying what is missing and how to get it.

Peer code imports itself under its own package name (Meta's GDPA as `ads_mkl.ops.oss.gdpa...`, HSTU as
`generative_recommenders...`), so a checkout is *mounted* under that name: the package is created in
`sys.modules` with the checkout as its search path, and the peer's own imports resolve into the checkout.
One process holds one checkout of each peer: an entry that asks for a second, different one is skipped
with the reason, never silently served by the first. A peer whose modules import each other as top-level
names (Meta's TLX megakernel: `from tlx_math import ...`) is `flat`: its folder goes first on `sys.path`
instead, and a top-level module of that name already loaded from elsewhere is a skip reason.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import subprocess
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from kernels.registry import Provider
from support.text import one_line

REPO_ROOT = Path(__file__).resolve().parents[1]
PEERS_ROOT = REPO_ROOT / ".peers"  # the default checkouts; tests point it elsewhere

_MOUNTED: dict[str, Path] = {}  # package -> the folder it was mounted from, by this module


class PeerLoadError(RuntimeError):
    """A peer's code could not be loaded; the message is the one-line skip reason."""


@dataclass(frozen=True)
class Peer:
    key: str  # the repository's folder name, e.g. ads_model_kernel_library
    title: str  # how a skip reason names it
    url: str  # where to clone it from
    package: str  # the package name its code imports itself as
    importable: str  # what a user makes importable instead of a checkout (skip reasons name it)
    package_dir: str  # that package's folder inside the checkout ("" = the checkout root)
    marker: str  # a file every checkout has: proves a path is one
    flat: bool = False  # its modules import each other as top-level names: package_dir goes on sys.path

    @property
    def default_path(self) -> Path:
        return PEERS_ROOT / self.key


@dataclass(frozen=True)
class Source:
    kind: str  # "path" or "import"
    path: Path | None  # the checkout, for kind "path"
    origin: str  # one phrase for reasons and records


def resolve_path(value: str) -> Path:
    """`~` expanded; relative to the repository root."""
    p = Path(value).expanduser()
    return p if p.is_absolute() else REPO_ROOT / p


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that is not a package, or a half-loaded one
        return False


def find_source(peer: Peer, module: str, path_option: str | None) -> Source | str:
    """Where `module` (a dotted name inside the peer's package) comes from, or the one-line reason it
    cannot be found (option `path`, then the importable package, then the default checkout)."""
    if path_option is not None:
        path = resolve_path(path_option)
        if not (path / peer.marker).is_file():
            what = f"not a checkout of {peer.url} (no {peer.marker})" if path.is_dir() else "no such folder"
            return f"options.path {path}: {what}; get it: git clone {peer.url} {path}"
        return Source("path", path, f"the checkout {path}")
    mounted = _MOUNTED.get(peer.package)
    if mounted is not None:  # another entry of this process mounted a checkout: the same code
        return Source("path", _checkout_of(peer, mounted), f"the checkout {_checkout_of(peer, mounted)}")
    if _importable(module):
        return Source("import", None, f"the installed package {peer.package}")
    default = peer.default_path
    if (default / peer.marker).is_file():
        return Source("path", default, f"the checkout {default}")
    return (
        f"{peer.title} not found: no options.path, {peer.importable} is not importable and {default} is "
        f"missing; get it: git clone {peer.url} {default} (or set the provider option path)"
    )


def _checkout_of(peer: Peer, mounted: Path) -> Path:
    return mounted.parents[len(Path(peer.package_dir).parts) - 1] if peer.package_dir else mounted


def _namespace(name: str, paths: list[str]) -> types.ModuleType:
    mod = types.ModuleType(name)
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = paths
    mod.__spec__ = spec
    mod.__path__ = paths
    return mod


def _bind(name: str, mod: types.ModuleType) -> None:
    """Put `mod` in sys.modules and on its parent, as the import system does for a real package."""
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, mod)


def mount_flat(peer: Peer, target: Path) -> None:
    """Put a flat peer's folder first on sys.path (once per process), its top module not loaded from elsewhere."""
    mounted = _MOUNTED.get(peer.package)
    if mounted is not None and mounted != target:
        raise PeerLoadError(f"{peer.package} is already loaded from {mounted}; one {peer.key} per process")
    loaded = sys.modules.get(peer.package)
    where = Path(getattr(loaded, "__file__", "") or "").parent.resolve() if loaded is not None else target
    if where != target:
        raise PeerLoadError(f"a module {peer.package} is already loaded from {where}; this entry asks for {target}")
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
    _MOUNTED[peer.package] = target


def mount(peer: Peer, checkout: Path) -> None:
    """Make `peer.package` import from `checkout` (once per process; the same checkout again is a no-op)."""
    target = (checkout / peer.package_dir if peer.package_dir else checkout).resolve()
    if peer.flat:
        mount_flat(peer, target)
        return
    loaded = sys.modules.get(peer.package)
    if loaded is not None:
        paths = [Path(p).resolve() for p in getattr(loaded, "__path__", [])]
        if target not in paths:
            where = paths[0] if paths else getattr(loaded, "__file__", "elsewhere")
            raise PeerLoadError(
                f"{peer.package} is already loaded from {where}; one {peer.key} per process "
                f"(this entry asks for {checkout})"
            )
        return
    parts = peer.package.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            _bind(name, _namespace(name, []))  # holds only what is mounted under it
    init = target / "__init__.py"
    if init.is_file():
        spec = importlib.util.spec_from_file_location(peer.package, init, submodule_search_locations=[str(target)])
        mod = importlib.util.module_from_spec(spec)
        _bind(peer.package, mod)
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            sys.modules.pop(peer.package, None)
            raise
    else:
        _bind(peer.package, _namespace(peer.package, [str(target)]))
    _MOUNTED[peer.package] = target


def unmount(peer: Peer) -> None:
    """Forget the peer's package and every module loaded under its top-level name, mounted or imported
    (tests; a process normally keeps what it loaded); a flat peer's folder and every module loaded from it."""
    target = _MOUNTED.pop(peer.package, None)
    if peer.flat:
        if target is not None:
            sys.path[:] = [p for p in sys.path if p != str(target)]
            for name, mod in list(sys.modules.items()):
                f = getattr(mod, "__file__", None)
                if f and Path(f).resolve().is_relative_to(target):
                    del sys.modules[name]
        sys.modules.pop(peer.package, None)
        return
    top = peer.package.split(".")[0]
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        del sys.modules[name]


def load(peer: Peer, source: Source, module: str) -> types.ModuleType:
    """Import `module` from `source`; PeerLoadError with one line when it does not import."""
    try:
        if source.kind == "path":
            mount(peer, source.path)
        return importlib.import_module(module)
    except PeerLoadError:
        raise
    except Exception as exc:  # ImportError, or whatever the peer's module raises while it loads
        raise PeerLoadError(f"{peer.title} from {source.origin} failed to import {module}: {one_line(exc)}") from None


@functools.cache
def commit_of(checkout: Path) -> str | None:
    """The checkout's git commit, when it is a git work tree (recorded with each case)."""
    if not (checkout / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def source_record(source: Source, module: types.ModuleType | None) -> dict:
    """What a case records about the peer code it ran."""
    rec: dict[str, Any] = {"source": source.kind, "origin": source.origin}
    if source.path is not None:
        rec["commit"] = commit_of(source.path)
    if module is not None:
        rec["file"] = getattr(module, "__file__", None)
    return rec


def parse_options(provider: str, options: Mapping[str, Any], fields: Mapping[str, tuple[type, Any]]) -> dict:
    """`options` checked against `fields` (name -> (type, default)): one-line ValueError naming the option
    and what is allowed. Booleans must be YAML booleans (`true`), not 1 or "yes"."""
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise ValueError(f"{provider}: unknown option {unknown[0]!r}; allowed: {', '.join(fields)}")
    out = {}
    for key, (typ, default) in fields.items():
        value = options.get(key, default)
        if value is not None:
            ok = isinstance(value, bool) if typ is bool else isinstance(value, typ) and not isinstance(value, bool)
            if not ok or (typ is str and not value.strip()):
                kind = {bool: "true or false", str: "a non-empty string"}.get(typ, typ.__name__)
                raise ValueError(f"{provider}: option {key}: {value!r} is not allowed; allowed: {kind}")
        out[key] = value
    return out


class PeerProvider(Provider):
    """A provider whose kernel is a peer's code (kernels.hstu, kernels.meta_gdpa, kernels.meta_gdpa_cute):
    it takes `path` and its other options from `option_fields` (name -> (type, default)), finds and loads
    `peer`'s `module` once, and records where the code came from."""

    peer: ClassVar[Peer]
    module: ClassVar[str]
    option_fields: ClassVar[dict[str, tuple[type, Any]]]

    def __init__(self, options=None):
        super().__init__(options)
        self._loaded: types.ModuleType | None = None
        self._source: Source | None = None

    def parse_options(self, options: dict) -> dict:
        return parse_options(self.name, options, self.option_fields)

    def options_record(self) -> dict:
        return dict(self.options)

    def source(self) -> Source | str:
        """Where the peer's code is, or why it is not to be had (cached once found)."""
        if self._source is None:
            found = find_source(self.peer, self.module, self.options["path"])
            if isinstance(found, str):
                return found
            self._source = found
        return self._source

    def peer_module(self) -> types.ModuleType:
        """The peer's module, loaded once; PeerLoadError (one line) when it cannot be."""
        source = self.source()
        if isinstance(source, str):
            raise PeerLoadError(source)
        if self._loaded is None:
            self._loaded = load(self.peer, source, self.module)
        return self._loaded

    def availability(self, device) -> str | None:
        """None where the peer's code is found, imports, and runs on `device` (`device_reason`)."""
        found = self.source()
        if isinstance(found, str):
            return found
        reason = self.device_reason(torch.device(device))
        if reason:
            return reason
        try:
            self.peer_module()
        except PeerLoadError as exc:
            return str(exc)
        return None

    def device_reason(self, device: torch.device) -> str | None:
        """None where this peer's kernel runs on `device`, else why not (checked before its code loads)."""
        return None

    def source_fields(self) -> dict | None:
        """What a case records about the code it ran (`source_record`); None before it was found."""
        return None if self._source is None else source_record(self._source, self._loaded)
