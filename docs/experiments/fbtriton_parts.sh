#!/usr/bin/env bash
# Meta's Triton fork `fbtriton` (it installs as the `triton` package) for a GPU machine without a package
# index, in parts small enough to travel with the tracked tree (a device call carries at most 64 MiB), for
# the providers that run in its environment (README "Peer kernels": meta_gdpa_ws, meta_gdpa_tlx). From the
# repository root:
#   bash docs/experiments/fbtriton_parts.sh parts     # here, with PyPI: .fbtriton/p0 .. pN (git-ignored)
#   bash docs/experiments/fbtriton_parts.sh install   # the GPU machine, every .fbtriton/pK carried: /tmp/fbtriton-site
#   bash docs/experiments/fbtriton_parts.sh probe     # import triton from it, TLX, one kernel compiled for this GPU
#   PART_BYTES=30000000 bash docs/experiments/fbtriton_parts.sh resplit   # the same archive in other part sizes
# With a package index `pip install --no-deps --target /tmp/fbtriton-site fbtriton==3.6.1` is all it takes.
#
# `parts` downloads the cp312 manylinux wheel (307 MB; fbtriton 3.6.1 is what ads_model_kernel_library names for
# its TLX packages), unpacks it and leaves out what neither `import triton` nor a compile for NVIDIA loads:
# the MLIR dialect plugins (libtriton.so does not link them: `readelf -d`), the instrumentation test library,
# FileCheck, CUPTI (proton's profiler only; libproton.so does not link it), cuobjdump and nvdisasm;
# `ptxas-blackwell` is the same file as `ptxas` (same checksum): kept as a link. The AMD backend stays: Triton
# imports every backend its distributions' entry points name (fbtriton's and the stock build's beside it).
# Trimmed, `import triton`, TLX and a compile for sm_90 and sm_100 work (`probe`; checked with Python 3.12). Then tar.xz, split
# into PART_BYTES (52 MB) pieces, one per folder pK, with a MANIFEST (part names in order, sha256 of the
# whole) in p0. Each pK is one device call's `carry` entry; `install` joins them, checks the sum and unpacks.
# A part plus the tracked tree (~9 MB) must stay under 64 MiB: with 52 MB the archive is two parts (97 MB in
# all, 2026-12-02), two device calls.
set -euo pipefail
step=${1:?step: parts, install or probe}
VERSION=${FBTRITON_VERSION:-3.6.1}
PARTS=${FBTRITON_PARTS:-.fbtriton}
SITE=${FBTRITON_SITE:-/tmp/fbtriton-site}
PART_BYTES=${PART_BYTES:-52000000}
PY=${PYTHON:-python3}

# $1/fbtriton.tar.xz -> $PARTS/pK/fbtriton.tar.xz.KK, their names in order in $1/MANIFEST
split_parts() {
  rm -rf "$PARTS" && mkdir -p "$PARTS"
  (cd "$1" && split -b "$PART_BYTES" -d -a 2 fbtriton.tar.xz fbtriton.tar.xz.)
  local k=0 part
  for part in "$1"/fbtriton.tar.xz.[0-9]*; do
    mkdir -p "$PARTS/p$k" && mv "$part" "$PARTS/p$k/"
    echo "p$k/$(basename "$part")" >> "$1/MANIFEST"
    k=$((k + 1))
  done
}

case $step in
parts)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  wheel=${FBTRITON_WHEEL:-}  # a wheel downloaded before, else the index's
  if [ -z "$wheel" ]; then
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 "fbtriton==$VERSION" -d "$work" -q
    wheel=$(ls "$work"/fbtriton-*.whl)
  fi
  "$PY" -m zipfile -e "$wheel" "$work/site"
  t="$work/site/triton"
  rm -rf "$t/plugins" "$t/instrumentation" "$t/FileCheck" "$t/backends/nvidia/lib/cupti" \
    "$t/backends/nvidia/bin/cuobjdump" "$t/backends/nvidia/bin/nvdisasm"
  if cmp -s "$t/backends/nvidia/bin/ptxas" "$t/backends/nvidia/bin/ptxas-blackwell"; then
    ln -sf ptxas "$t/backends/nvidia/bin/ptxas-blackwell"
  fi
  chmod +x "$t/backends/nvidia/bin/"*
  echo "trimmed: $(du -sh "$work/site" | cut -f1) on disk (the wheel unpacked: 1.1 GB)"
  XZ_OPT=${XZ_OPT:--6 -T2} tar -C "$work/site" -cJf "$work/fbtriton.tar.xz" .
  split_parts "$work"
  echo "sha256 $(sha256sum "$work/fbtriton.tar.xz" | cut -d' ' -f1) fbtriton==$VERSION" >> "$work/MANIFEST"
  mv "$work/MANIFEST" "$PARTS/p0/"
  echo "$(du -cb "$PARTS"/p*/fbtriton.tar.xz.* | tail -1 | cut -f1) bytes in $(ls -d "$PARTS"/p* | wc -l) parts:"
  ls -l "$PARTS"/p*/
  ;;
resplit)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mapfile -t parts < <(grep -v '^sha256 ' "$PARTS/p0/MANIFEST")
  (cd "$PARTS" && cat "${parts[@]}") > "$work/fbtriton.tar.xz"
  grep '^sha256 ' "$PARTS/p0/MANIFEST" > "$work/sum"
  split_parts "$work"
  cat "$work/sum" >> "$work/MANIFEST" && mv "$work/MANIFEST" "$PARTS/p0/"
  ls -l "$PARTS"/p*/
  ;;
install)
  manifest="$PARTS/p0/MANIFEST"
  want=$(awk '$1 == "sha256" {print $2}' "$manifest")
  mapfile -t parts < <(grep -v '^sha256 ' "$manifest")
  for p in "${parts[@]}"; do
    [ -f "$PARTS/$p" ] || { echo "missing $PARTS/$p: carry every $PARTS/pK first" >&2; exit 2; }
  done
  got=$(cd "$PARTS" && cat "${parts[@]}" | sha256sum | cut -d' ' -f1)
  [ "$got" = "$want" ] || { echo "the parts' sha256 $got is not the manifest's $want" >&2; exit 2; }
  rm -rf "$SITE" && mkdir -p "$SITE"
  (cd "$PARTS" && cat "${parts[@]}") | tar -xJ -C "$SITE"
  echo "installed $(grep '^sha256 ' "$manifest" | cut -d' ' -f3) into $SITE ($(du -sh "$SITE" | cut -f1))"
  ;;
probe)
  probe=$(mktemp -d)/probe.py
  cat > "$probe" <<'EOF'
import sys

import triton
import triton.language as tl
import triton.language.extra.tlx as tlx
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def add(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)


try:
    import torch

    cc = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
except ImportError:
    cc = (9, 0)
target = GPUTarget("cuda", cc[0] * 10 + cc[1], 32)
src = ASTSource(add, signature={"x": "*fp32", "y": "*fp32", "n": "i32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 128})
k = triton.compile(src, target=target)
print(f"triton {triton.__version__} from {triton.__file__}; tlx {tlx.__name__}; sm_{target.arch}: "
      f"{len(k.asm['cubin'])} bytes of cubin")
EOF
  PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" TRITON_CACHE_DIR=$(mktemp -d) "$PY" "$probe"
  ;;
*)
  echo "unknown step $step (parts, install, probe)" >&2
  exit 2
  ;;
esac
