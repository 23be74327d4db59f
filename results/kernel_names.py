"""How a kernel is named in a table or a legend: the profilers report C++ signatures and CuTe DSL names
hundreds of characters long; `short_kernel_name` keeps what tells kernels apart."""

from __future__ import annotations

import re
from typing import Any

NAME_WIDTH = 44
_CUTE_PREFIX = re.compile(r"^(?:void\s+)?kernel_cutlass_kernel_")
_CAMEL_TAIL = re.compile(r"([A-Z][A-Za-z0-9]{5,})$")
_FUNCTOR = re.compile(r"(\w+Functor\w*)")
_GENERIC = {"Kernel", "Kernel2", "device_kernel", "kernel"}


def short_kernel_name(name: Any) -> str:
    """Triton names as they are; CuTe DSL names by their kernel class
    (`...fwd_sm90FlashAttentionForwardSm90_object_at_...` → `FlashAttentionForwardSm90`); C++ names without
    namespaces, template arguments and parameters, keeping an elementwise kernel's functor."""
    s = str(name)
    if _CUTE_PREFIX.match(s):
        s = _CUTE_PREFIX.sub("", s).split("_object_at_")[0]
        tail = _CAMEL_TAIL.search(s)
        s = tail.group(1) if tail else s
    elif "::" in s or "<" in s:  # a C++ signature (Triton names and "Memset (Device)" stay whole)
        s = s.removeprefix("void ")
        args = s[s.find("<") + 1 :] if "<" in s else ""
        functor = _FUNCTOR.search(args)
        base = re.split(r"[<(]", s, maxsplit=1)[0].strip().rsplit("::", 1)[-1]
        if base in _GENERIC and args:  # cutlass::Kernel2<the gemm>: the gemm says which
            base = re.split(r"[<(,>]", args, maxsplit=1)[0].strip().rsplit("::", 1)[-1]
        s = base + (f"[{functor.group(1)}]" if functor else "")
    return s if len(s) <= NAME_WIDTH else s[: NAME_WIDTH - 1] + "…"
