#!/usr/bin/env bash
# Issue 30: the backward A/B of the pending backward patches on the GPU machine, then the kernels GPU tests with all
# of them. Each state is a copy of the tree under /tmp (a later device call re-copies the repository root, never
# these), so the patches are applied there and the checkout stays main:
#   before     the tree as it is
#   pointwise  + issue30-act-prime-fp32 + issue30-unscaled-p (fewer pointwise instructions a score)
#   all        + issue30-paired-bwd-blocks (two query blocks a step)
# docs/experiments/bwd_ab.yaml runs in each (runs/ under /tmp/runs-ab), `bench compare` between neighbours and
# before -> all, then `gpu_tests.sh kernels` in the all state; /tmp/gt/ab-runs.tgz holds the runs. From the
# repository root on the device, after fa4-1 and fa4-2:
#   GDPA_GIT_SHA=<main's commit> bash docs/experiments/h200_session.sh tests-start 'bash docs/experiments/bwd_ab_states.sh'
#   bash docs/experiments/h200_session.sh env "bash docs/experiments/h200_session.sh tests-wait 540; cp /tmp/gt/ab-runs.tgz \$OUT/"
# AB_DRY=1: only make the three copies (a check on any machine).
set -uo pipefail
ROOT=$(pwd) P=$(pwd)/docs/experiments/pending R=/tmp/runs-ab SHA=${GDPA_GIT_SHA:-$(git rev-parse HEAD)}
mkdir -p $R /tmp/gt
log() { echo "[$(date +%T)] $*"; }
for d in before pointwise all; do
  rm -rf /tmp/ab-$d && mkdir -p /tmp/ab-$d
  tar --exclude=./runs --exclude=./.fa4 --exclude=./.fbtriton --exclude=./.peers --exclude=./.hk -cf - . | tar -xf - -C /tmp/ab-$d
done
for d in pointwise all; do
  (cd /tmp/ab-$d && git apply $P/issue30-act-prime-fp32.patch $P/issue30-unscaled-p.patch) || { log "$d: patches failed"; exit 1; }
done
(cd /tmp/ab-all && git apply $P/issue30-paired-bwd-blocks.patch) || { log "all: pairs patch failed"; exit 1; }
[ "${AB_DRY:-}" = 1 ] && { log "AB_DRY: the three states are ready under /tmp/ab-*"; exit 0; }
run() {  # state label
  log "start $1"
  (cd /tmp/ab-$1 && GDPA_GIT_SHA="$2" PYTHONPATH=/tmp/ab-$1:$PYTHONPATH python3 -m bench run docs/experiments/bwd_ab.yaml \
    --out $R/bwd-$1) > $R/bwd-$1.log 2>&1
  log "end $1 rc $?"; tail -n 3 $R/bwd-$1.log
}
# AB_SKIP_POINTWISE=1: before and all only (a session short of device time)
run before "$SHA"
[ "${AB_SKIP_POINTWISE:-}" = 1 ] || run pointwise "$SHA + act-prime + unscaled-p (pending patches)"
run all "$SHA + act-prime + unscaled-p + paired blocks (pending patches)"
pairs="before pointwise|pointwise all|before all"
[ "${AB_SKIP_POINTWISE:-}" = 1 ] && pairs="before all"
IFS='|' read -ra pairs <<< "$pairs"
for pair in "${pairs[@]}"; do
  set -- $pair; log "compare $1 -> $2"
  (cd /tmp/ab-all && PYTHONPATH=/tmp/ab-all:$PYTHONPATH python3 -m bench compare $R/bwd-$1 $R/bwd-$2) > $R/compare-$1-$2.txt 2>&1
  tail -n 30 $R/compare-$1-$2.txt
done
tar czf /tmp/gt/ab-runs.tgz -C /tmp runs-ab
log "kernels GPU tests, all state"
(cd /tmp/ab-all && PYTHONPATH=/tmp/ab-all:$PYTHONPATH OUT=/tmp/gt GDPA_GIT_SHA="$SHA + the three patches" \
  bash docs/experiments/gpu_tests.sh kernels 600 > /tmp/gt/kernels-all.out 2>&1)
log "kernels tests rc $?"; tail -n 12 /tmp/gt/kernels-all.out
