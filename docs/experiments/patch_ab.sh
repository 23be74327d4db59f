#!/usr/bin/env bash
# One pending patch measured on the GPU machine: a harness config run before and after it on the same machine,
# back to back, `bench compare` between them, then GPU test groups at the patched tree. Each state is a copy of
# the checkout under /tmp (a later device call re-copies the repository root, never these), so the checkout
# itself is never patched. From the repository root on the device, FA4 installed (h200_session.sh fa4-1, fa4-2),
# the Hopper kernels of both states in $GDPA_HOPPER_KERNEL_DIR (their cache keys hash the sources: both fit one
# folder; prebuild the patched state's on the CPU with the patch applied):
#   GDPA_GIT_SHA=<commit> bash docs/experiments/h200_session.sh tests-start \
#     'bash docs/experiments/patch_ab.sh docs/experiments/pending/NAME.patch CONFIG.yaml kernels:600'
#   bash docs/experiments/h200_session.sh tests-wait 540     # /tmp/gt/ab-<NAME>.tgz: both runs and the comparison
# Groups after CONFIG: gpu_tests.sh GROUP[:SECONDS] in the patched copy, logs under /tmp/gt/<NAME>/. CONFIG may be
# one the patch adds: it is read from the patched copy and given to the unpatched one.
# AB_DRY=1: only make the two copies (a check on any machine). AB_TAG=T: results in /tmp/runs-ab/<NAME>-T and
# /tmp/gt/ab-<NAME>-T.tgz (a second A/B of the same patch).
set -uo pipefail
patch=${1:?usage: patch_ab.sh PATCH CONFIG [GROUP[:S] ...]} config=${2:?config}
shift 2
name=$(basename "$patch" .patch)
run_name=$name${AB_TAG:+-$AB_TAG}  # AB_TAG: two A/Bs of one patch keep their results apart
R=/tmp/runs-ab/$run_name SHA=${GDPA_GIT_SHA:-$(git rev-parse HEAD)}
log() { echo "[$(date +%T)] $*"; }
[ -f "$patch" ] || { echo "patch_ab.sh: no such patch: $patch" >&2; exit 2; }
rm -rf "$R" && mkdir -p "$R" /tmp/gt
for d in before after; do
  rm -rf "/tmp/ab-$name-$d" && mkdir -p "/tmp/ab-$name-$d"
  tar --exclude=./runs --exclude=./.fa4 --exclude=./.fbtriton --exclude=./.peers --exclude='./.hk*' -cf - . |
    tar -xf - -C "/tmp/ab-$name-$d"
done
(cd "/tmp/ab-$name-after" && git apply "$OLDPWD/$patch") || { log "$patch does not apply"; exit 1; }
# the config may be the patch's own (a new row's run): read from the patched tree, given to the unpatched one
[ -f "/tmp/ab-$name-after/$config" ] || { echo "patch_ab.sh: no such config, with or without the patch: $config" >&2; exit 2; }
[ -f "/tmp/ab-$name-before/$config" ] || { mkdir -p "$(dirname "/tmp/ab-$name-before/$config")" &&
  cp "/tmp/ab-$name-after/$config" "/tmp/ab-$name-before/$config" && log "$config: the patch's own, copied to the unpatched state"; }
[ "${AB_DRY:-}" = 1 ] && { log "AB_DRY: /tmp/ab-$name-before and -after are ready"; exit 0; }
run() {  # state, the commit its records name
  log "start $1"
  (cd "/tmp/ab-$name-$1" && GDPA_GIT_SHA="$2" PYTHONPATH="/tmp/ab-$name-$1:${PYTHONPATH:-}" \
    python3 -m bench run "$config" --out "$R/$1") > "$R/$1.log" 2>&1
  log "end $1 rc $?"; tail -n 3 "$R/$1.log"
}
run before "$SHA"
run after "$SHA + $name (pending patch)"
(cd "/tmp/ab-$name-after" && PYTHONPATH="/tmp/ab-$name-after:${PYTHONPATH:-}" python3 -m bench compare "$R/before" "$R/after") \
  > "$R/compare.txt" 2>&1
tail -n 40 "$R/compare.txt"
tar czf "/tmp/gt/ab-$run_name.tgz" -C /tmp/runs-ab "$run_name"
for group in "$@"; do
  g=${group%%:*} lim=${group#*:}; [ "$lim" = "$group" ] && lim=450
  log "gpu tests $g ($lim s), patched state"
  mkdir -p "/tmp/gt/$name"
  (cd "/tmp/ab-$name-after" && PYTHONPATH="/tmp/ab-$name-after:${PYTHONPATH:-}" OUT="/tmp/gt/$name" \
    GDPA_GIT_SHA="$SHA + $name" bash docs/experiments/gpu_tests.sh "$g" "$lim" > "/tmp/gt/$name/$g.out" 2>&1)
  log "$g rc $?"; tail -n 10 "/tmp/gt/$name/$g.out"
done
