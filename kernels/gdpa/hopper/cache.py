"""Our compile cache for the Hopper GDPA kernels, optionally backed by a directory of exported objects.

Kernels are compiled once per key (everything that changes the generated code) against symbolic ("fake")
CuTe tensors, so one compiled kernel serves every batch shape and compiling needs no GPU
(CUTE_DSL_ARCH=sm_90a cross-compiles). FA4's own `_flash_attn_fwd/_bwd.compile_cache` are never read or
written: the `fa4` softmax baseline compiles and runs exactly as it would without this package.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from pathlib import Path

import cutlass
import cutlass.cute as cute
from cutlass import Int32
from quack.compile_utils import make_fake_tensor

from support.environment import hopper_kernel_dir

_COMPILED: dict = {}
_COMPILE_LOCK = threading.Lock()
COMPILE_SECONDS: dict = {}  # key -> seconds spent compiling it (0.0 when loaded from the kernel directory)
_KERNEL_DIR: list = []  # [Path] once use_kernel_dir() was called (or GDPA_HOPPER_KERNEL_DIR set)


def use_kernel_dir(path) -> None:
    """Keep compiled kernels as object files in `path`: each kernel is loaded from there when present
    and exported there after compiling. Kernels compile without a GPU (CUTE_DSL_ARCH=sm_90a), so a
    directory filled on any machine with the same flash-attn-4 / nvidia-cutlass-dsl (and libs-cu13) versions
    and this package's sources serves a GPU machine without compiling there."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    _KERNEL_DIR[:] = [directory]


if hopper_kernel_dir():
    use_kernel_dir(hopper_kernel_dir())


@functools.cache
def _source_fingerprint() -> str:
    """What a stored kernel depends on besides its key: our sources and the versions we build on."""
    import flash_attn

    digest = hashlib.sha256(f"cutlass={cutlass.__version__} fa4={getattr(flash_attn, '__version__', '?')}".encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + source.read_bytes())
    return digest.hexdigest()


def _stored_path(key) -> Path | None:
    if not _KERNEL_DIR:
        return None
    name = hashlib.sha256((_source_fingerprint() + repr(key)).encode()).hexdigest()[:32]
    return _KERNEL_DIR[0] / f"{name}.o"


def compiled(key, build):
    """The kernel for `key`: from this process's cache, else the kernel directory, else `build()`."""
    fn = _COMPILED.get(key)
    if fn is None:
        with _COMPILE_LOCK:
            fn = _COMPILED.get(key)
            if fn is None:
                start = time.perf_counter()
                stored = _stored_path(key)
                if stored is not None and stored.exists():
                    fn = cute.runtime.load_module(str(stored), enable_tvm_ffi=True).func
                    start = None
                else:
                    fn = build()
                    if stored is not None:
                        tmp = stored.with_suffix(f".{os.getpid()}.tmp")
                        fn.export_to_c(object_file_path=str(tmp), function_name="func")
                        os.replace(tmp, stored)
                COMPILE_SECONDS[key] = 0.0 if start is None else round(time.perf_counter() - start, 2)
                _COMPILED[key] = fn
    return fn


def compiled_keys() -> list:
    return list(_COMPILED)


def fake_stream():
    return cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)


def fake_i32_vector(n):
    return make_fake_tensor(Int32, (n,), divisibility=1)
