#!/usr/bin/env bash
# monitor-samples-clock.patch's open question (docs/experiments/pending/README.md): does
# tests/test_profiling_gpu.py::test_the_monitor_leaves_a_host_bound_calls_samples_unchanged fail at the patch and
# pass without it, or fail on this machine either way? The test alone at main and at the patch applied in a copy,
# alternating, RUNS times each, on one machine (the test needs Triton and p1's wheels, not FA4). From the repository
# root on the device, inside `h200_session.sh fa4-1|fa4-2|env`; each run's rounds line and verdict to
# /tmp/gt/monitor-check.log.
set -uo pipefail
patch=docs/experiments/pending/monitor-samples-clock.patch
AB_DRY=1 bash docs/experiments/patch_ab.sh "$patch" configs/production.yaml || exit 1
for i in $(seq 1 "${RUNS:-2}"); do
  for d in before after; do
    dir=/tmp/ab-monitor-samples-clock-$d
    echo "== run $i, $d"
    (cd "$dir" && PYTHONPATH="$dir:${PYTHONPATH:-}" timeout 300 python3 -m pytest -m gpu -q -s -p no:cacheprovider \
      tests/test_profiling_gpu.py -k host_bound 2>&1 | grep -E "rounds_p50_p80_ms|passed|failed" | cut -c1-400)
  done
done 2>&1 | tee -a /tmp/gt/monitor-check.log
