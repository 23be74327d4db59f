#!/usr/bin/env bash
# Everything a device session carries, made here on the CPU machine before the first device call (git-ignored
# folders do not survive a session: each one starts without them). From the repository root:
#   bash docs/experiments/prepare_h200_session.sh [--pending] [--fbtriton] [--state DIR=PATCH ...]
# --pending: apply docs/experiments/pending/*.patch first (the Hopper kernels are then prebuilt for them).
# --state DIR=PATCH: also prebuild the Hopper kernels of this tree with PATCH applied into DIR (a worktree of HEAD,
#   removed after): the patched state of a `patch_ab.sh` A/B (the kernels' cache key hashes the sources, so both
#   states' kernels can share /tmp/hk on the device). E.g. --state .hk2=docs/experiments/pending/NAME.patch
# Makes .fa4/p1 .fa4/p2 (FA4's wheels, docs/experiments/fa4_parts.sh), installs FA4 here to cross-compile,
# prebuilds the Hopper kernels into .hk (~8 min on 2 cores), clones the peers into .peers from the mirrors
# the `fetch` tool leaves under /work/.mirror (fetch github:facebookresearch/ads_model_kernel_library and
# github:meta-recsys/generative-recommenders first), and with --fbtriton the two .fbtriton parts. Prints the
# carry sizes last: a call carries at most 64 MiB with the tracked tree.
set -euo pipefail
pending=0 fbtriton=0 states=()
while [ $# -gt 0 ]; do
  case $1 in
  --pending) pending=1 ;;
  --fbtriton) fbtriton=1 ;;
  --state)
    spec=${2:-}
    dir=${spec%%=*} patch=${spec#*=}
    if [ -z "$spec" ] || [ "$dir" = "$spec" ] || [ -z "$dir" ] || [ ! -f "$patch" ]; then
      echo "--state: expected DIR=PATCH with PATCH an existing file, got '$spec'" >&2; exit 2
    fi
    git apply --check "$patch" 2>/dev/null || { echo "--state: $patch does not apply to this tree" >&2; exit 2; }
    states+=("$spec"); shift ;;
  *) echo "unknown option $1; allowed: --pending --fbtriton --state DIR=PATCH" >&2; exit 2 ;;
  esac
  shift
done
log() { echo "[$(date +%H:%M:%S)] $*"; }

if [ "$pending" = 1 ]; then
  for p in docs/experiments/pending/*.patch; do
    if git apply --check "$p" 2>/dev/null; then git apply "$p" && log "applied $p"; else log "not applied (already, or conflicts): $p"; fi
  done
fi

if [ ! -d .fa4/p1 ] || [ ! -d .fa4/p2 ]; then
  log "FA4 wheels"
  bash ../shared/gpu/fa4-wheels.sh /tmp/fa4w > /tmp/fa4w.log 2>&1
  bash docs/experiments/fa4_parts.sh /tmp/fa4w .fa4
fi
if ! python -c "import flash_attn.cute, cutlass.cute" 2>/dev/null; then
  log "FA4 here (to cross-compile)"
  python -m pip install -q "flash-attn-4==4.0.0b36" "nvidia-cutlass-dsl[cu13]==4.8.1" "quack-kernels==0.6.5"
fi

prebuild() {  # the tree to compile from, the kernel folder (absolute)
  local tree=$1 out=$2 script
  log "Hopper kernels of $tree into $out"
  for script in hopper_gpu persistent_gpu jagged_gpu persistent_bwd_gpu; do
    [ -f "$tree/docs/experiments/$script.py" ] || continue
    (cd "$tree" && CUTE_DSL_ARCH=sm_90a PYTHONPATH=. python -W ignore "docs/experiments/$script.py" --prebuild "$out") \
      > "/tmp/prebuild-$script.log" 2>&1 || { log "prebuild $script failed: /tmp/prebuild-$script.log"; exit 1; }
  done
}
prebuild "$PWD" "$PWD/.hk"
for spec in "${states[@]}"; do
  dir=${spec%%=*} patch=${spec#*=} wt=/tmp/prepare-state-$$
  git worktree add -q --detach "$wt" HEAD
  git -C "$wt" apply "$PWD/$patch"
  prebuild "$wt" "$PWD/$dir"
  git worktree remove --force "$wt"
done

mkdir -p .peers
missing=()
for pair in facebookresearch+ads_model_kernel_library:ads_model_kernel_library \
  meta-recsys+generative-recommenders:generative-recommenders; do
  src=/work/.mirror/${pair%%:*}/repo dst=.peers/${pair##*:}
  if [ -d "$dst/.git" ]; then continue; fi
  if [ -d "$src" ]; then git clone -q "$src" "$dst" && log "cloned $dst"; else
    log "no mirror $src: fetch it first"; missing+=("github:${pair%%:*}"); fi
done

if [ "$fbtriton" = 1 ] && [ ! -d .fbtriton/p0 ]; then
  log "fbtriton parts"
  bash docs/experiments/fbtriton_parts.sh parts > /tmp/fbtriton-parts.log 2>&1
fi

tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
log "carry sizes (MiB; each call also carries the tracked tree, $((tree / 1048576)) MiB; limit 64):"
du -sm .fa4/p1 .fa4/p2 .hk .peers .fbtriton/p* 2>/dev/null || true
for spec in "${states[@]}"; do du -sm "${spec%%=*}"; done
# a .peers without a peer is 1 MB that carries fine and fails the peers run on the device: say so last (2026-12-08)
if [ ${#missing[@]} -gt 0 ]; then
  echo "prepare_h200_session.sh: .peers is incomplete: fetch ${missing[*]//+//} (the fetch tool), then run this again" >&2
  exit 3
fi
