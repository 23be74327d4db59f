#!/usr/bin/env bash
# The GPU tests (`pytest -m gpu`) in groups that each fit one device call, one pytest per file so a file that
# hangs or dies ends itself and not the call (the H200 runs of 2026-12-02 lost every message of the files
# after a killed one). From the repository root, on the GPU machine, inside `h200_session.sh env ...`:
#   bash docs/experiments/gpu_tests.sh GROUP [LIMIT_S]    # LIMIT_S: the group's seconds (default 450)
#   bash docs/experiments/gpu_tests.sh list               # the groups and their files
# Each file: `pytest -m gpu -v -s -rA` under `timeout` (what is left of LIMIT_S, killed 30 s after TERM), its
# log in $OUT/pytest-gpu-<file>.log; a table last (file, exit, passed/failed/skipped/errors, seconds).
set -uo pipefail
declare -A FILES=(
  [kernels]="$(grep -l 'pytest.mark.gpu' tests/test_gdpa_*.py | tr '\n' ' ')"  # each op test file with a GPU test
  [profiling]="tests/test_profiling_gpu.py tests/test_profiling.py"
  [harness]="tests/test_monitor.py tests/test_resources.py tests/test_baselines.py"
  [faults]="tests/test_faults_gpu.py"
  [peers]="tests/test_peers_gpu.py tests/test_peers_meta_tma.py"
)
group=${1:?usage: gpu_tests.sh GROUP [LIMIT_S] | list}
if [ "$group" = list ]; then
  for g in kernels profiling harness faults peers; do echo "$g: ${FILES[$g]}"; done
  exit 0
fi
[ -n "${FILES[$group]:-}" ] || { echo "unknown group $group; allowed: ${!FILES[*]} list" >&2; exit 2; }
limit=${2:-450}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
rows=()
status=0
for f in ${FILES[$group]}; do
  left=$((limit - ($(date +%s) - start)))
  name=$(basename "$f" .py)
  log="$OUT/pytest-gpu-$name.log"
  if [ "$left" -lt 20 ]; then
    rows+=("$name|not run|no time left|0")
    status=1
    continue
  fi
  t0=$(date +%s)
  timeout -k 30 "$left" python3 -m pytest -m gpu -v -s -rA -p no:cacheprovider "$f" > "$log" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] && status=1
  summary=$(grep -E "^=+ .*(passed|failed|skipped|error|no tests ran).* in [0-9.]+s" "$log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')
  [ -z "$summary" ] && summary="killed at ${left} s: $(grep -cE ' PASSED| FAILED| ERROR' "$log") tests reported"
  rows+=("$name|$rc|$summary|$(($(date +%s) - t0))")
  grep -E "^(FAILED|ERROR) " "$log" | cut -c1-300
done
printf '\n%-24s %-5s %-60s %s\n' file exit result seconds
for r in "${rows[@]}"; do
  IFS='|' read -r n rc s t <<<"$r"
  printf '%-24s %-5s %-60s %s\n' "$n" "$rc" "$s" "$t"
done
exit $status
