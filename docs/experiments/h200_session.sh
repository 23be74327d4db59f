#!/usr/bin/env bash
# One session's GPU work on a lent H200, one step per device call (the machine stays between calls only while
# they follow each other within its idle window). From the repository root, with what each step carries:
#   bash docs/experiments/h200_session.sh fa4-1 [CMD]   # carry .fa4/p1 .hk: wheels part 1, kernels to /tmp/hk
#   bash docs/experiments/h200_session.sh fa4-2 [CMD]   # carry .fa4/p2 .peers: part 2, FA4 installed, then CMD
#   bash docs/experiments/h200_session.sh env CMD       # later calls: CMD with FA4 and the kernel directory set
#   bash docs/experiments/h200_session.sh fbtriton [CMD] # carry .fbtriton/pK, one part per call; the call that
#                                                        # completes them installs /tmp/fbtriton-site and probes it
#   bash docs/experiments/h200_session.sh start NAME    # production | production-full | peers | peers-full | triton-tiles | owned-bwd | h200:
#                                                        # a run, detached
#   bash docs/experiments/h200_session.sh wait NAME [S] # until it ends (or S s, 540), then its folder to $OUT (always:
#                                                        # finished or not; a machine lost mid-run: untar NAME.tgz
#                                                        # into runs/ here, carry runs/NAME, `start` resumes it)
#   bash docs/experiments/h200_session.sh bands         # the independent band timing (issue 26)
#   bash docs/experiments/h200_session.sh tests-start G[:S] ...  # GPU-test groups (gpu_tests.sh G S) or commands,
#                                                        # detached, one chain after another: they outlive the call
#   bash docs/experiments/h200_session.sh tests-file FILE  # tests-start with FILE's lines as its steps (one group
#                                                        # or command a line, # comments): no quoting in the call
#   bash docs/experiments/h200_session.sh tests-wait [S]  # until every chain ends (or S s), logs to $OUT
# The device copy's .git is the checkout's as the session began: name the files' commit in every call that runs
# something, `GDPA_GIT_SHA=<git rev-parse HEAD, here> bash docs/experiments/h200_session.sh ...` (the detached runs
# inherit it; their records then carry the right commit, git_source "$GDPA_GIT_SHA (the repository's HEAD: ...)").
# Before the first call, here: `bash docs/experiments/prepare_h200_session.sh [--pending] [--fbtriton]` makes
# every carried folder below (they do not survive a session).
# A call carries at most 64 MiB with the tracked tree (~9 MB): .fa4/p2 (38) + .hk (~10) fit, .peers (10) beside
# them does not. The machine goes back 30 s after a call ends: prepare the next call before this one returns.
# Order that worked (2026-12-02, 30 min): fa4-1 + `gpu_tests.sh faults`; fa4-2 + `gpu_tests.sh profiling`;
# `start production` + `wait` (8 min + ncu); `env` + harness / peers groups. What one session holds (2026-12-03,
# held seconds): machine start ~90, faults 176, harness 170 (test_baselines needs more), the production run with
# a 1 s pre-roll 13 min (two calls), profiling 266, peers > 150: the GPU tests and a production run do not both
# fit in 30 device minutes. Every group at one commit in one session (faults, harness 300, kernels 290, profiling
# 280, peers 250: ~1300 s with the start), the production run at the same code in the next.
# 2026-12-04: `fa4-1` + `tests-start faults:250`, then `fa4-2` (carry .fa4/p2 .peers) + `tests-start kernels:300
# harness:360 profiling:320 peers:260` + `tests-wait`, then `tests-wait` again: every group in 15 min 40 s of
# chain, ~18 min held with the start; what is left holds a rerun of a file or a short check run, not a production run.
# 2026-12-04, second session: `fa4-1` (38 s), `fa4-2 "start production-full; wait production-h200 105"` (552 s),
# `wait production-h200 110` (498 s; `wait`'s S counted 5 s polls then: 525 and 550 s): the production run with the config's own 1 s windows, 16 min 30 s; then
# 8 min of short calls (a pending patch applied on the device copy, its GPU tests and a 12-case A/B, two ncu passes).
# 2026-12-04, third session: `fa4-1` (32 s), `fa4-2 "tests-start peers:260 <an experiment>"` (30 s), `fbtriton` twice
# (p0, then p1 + `tests-start 'start peers; wait for it'`, 34 s), `wait peers-h200` twice (1470 s): the peers GPU tests
# (238 s), a 33 s experiment and the peers run with 300 ms windows (176 cases, 20 min) took 26 of the 30 minutes.
# 2026-12-04, fourth session: the same order (`fa4-1`, `fa4-2 "tests-start peers:260 <grid_share>"`, `fbtriton`
# twice); the machine stopped answering 27 min in, in the third wait of the peers run (52 of its progress bar's
# 128 cases done), and none was lent after: the run was lost, since `wait` brought the folder back only once the
# run was done (it now brings it back from every call).
# 2026-12-05: three starts refused ("no device machine"; ~90 s, then 15 s of budget each, ~10 min apart: ask
# `status` for free until its none_now line is gone), then a start that counted ~6 min; `fa4-1 "tests-start
# faults:250"`, `fa4-2 "tests-start kernels:480 profiling:320 <owned-bwd run> <m64> <ncu>"`, `tests-wait` twice:
# faults 178 s, kernels 353 s, profiling ran out of its 320 s (give it 450), the owned-bwd run 5 min 35 s.
# 2026-12-06, seventeenth session: five refused starts over 28 min (both kinds; ~300 s of budget), then an H100 whose
# start counted ~9 min: `fa4-1`, `fa4-2` + one chain, `env` + a second chain queued behind it (each chain's kernels
# carried in the call that starts it), `tests-wait` twice: two A/Bs with their test_gdpa_hopper, an ncu pass and two
# band matrices in 14 min of chain.
# .fa4/p1, .fa4/p2 (38 MB each): ../shared/gpu/fa4-wheels.sh's wheels, with the 92 MB CUDA 13 cutlass-dsl libs
# wheel repacked as one tar.xz (66 MB) in three pieces; p1 also holds the small wheels, pydantic's and
# install.sh (joins the pieces, installs into /tmp/site). Make them here:
#   bash ../shared/gpu/fa4-wheels.sh /tmp/fa4w && docs/experiments/fa4_parts.sh /tmp/fa4w .fa4
# .hk: the Hopper kernels compiled ahead on a CPU machine (`CUTE_DSL_ARCH=sm_90a python
# docs/experiments/hopper_gpu.py --prebuild .hk`, and jagged_gpu.py / persistent_gpu.py the same); .peers: the
# peers' checkouts (README "Peer kernels"). Runs that must fit the session's device time use shorter windows
# than the configs (derive_config.py), said in their descriptions.
set -uo pipefail
step=${1:?step}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" runs
export PYTHONUNBUFFERED=1 GDPA_HOPPER_KERNEL_DIR=/tmp/hk
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
run_cmd() { [ $# -gt 0 ] && { echo "+ $*"; bash -c "$*"; }; return 0; }
# A 1 s pre-roll (the configs' own) before 300 ms energy and sample windows: with 0.3 s the power cap still moved
# the clock inside the samples (2026-12-03, df8f6ae: 1905 -> 1575 MHz in one case's last chunk; 7 of issue 31's
# 10 same-kernel misses), for ~90 s more over the production run's 128 cases.
windows="timing.rep_ms=300 power.settle_s=1.0 power.energy_loop_s=0.3"

start() {
  local name=$1 config=$2
  shift 2
  [ -e "runs/$name.done" ] && rm -f "runs/$name.done"
  # a run folder already there (one a lost machine's `wait` brought back, untarred into the checkout's runs/NAME
  # and carried: runs/ is git-ignored) is continued: results.files records the new machine as a second session
  local where="--out runs/$name"
  # (RETRY_FAILED=1: its failed cases run again too, `--retry-failed`)
  [ -e "runs/$name/results.json" ] && where="--resume runs/$name${RETRY_FAILED:+ --retry-failed}"
  setsid nohup bash -c "python3 -m bench run $config $where $* >> runs/$name.log 2>&1; echo \$? > runs/$name.done" \
    > /dev/null 2>&1 < /dev/null &
  echo "started $name: python3 -m bench run $config $where $*"
}

case $step in
fa4-1)
  mkdir -p /tmp/fa4 /tmp/hk && cp -r .fa4/p1/* /tmp/fa4/
  [ -d .hk ] && cp -r .hk/. /tmp/hk/
  # p1's wheels (pydantic among them) now: this call can already run the Triton-only GPU tests
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/fa4/wheels/*.whl
  export PYTHONPATH=/tmp/site:$PYTHONPATH
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit,temperature.gpu --format=csv
  shift; run_cmd "$@"
  ;;
fa4-2)
  cp .fa4/p2/* /tmp/fa4/ && source /tmp/fa4/install.sh && export PYTHONPATH=$PYTHONPATH:$PWD
  python3 -c "from flash_attn.cute import flash_attn_varlen_func; import pydantic; print('fa4 ok')"
  shift; run_cmd "$@"
  ;;
env)
  shift; run_cmd "$@"
  ;;
fbtriton)
  # Meta's Triton fork for meta_gdpa_ws / meta_gdpa_tlx (README "Peer kernels"): docs/experiments/fbtriton_parts.sh
  ls -l .fbtriton/p*/
  if [ -d /tmp/fbtriton-site/triton ]; then
    echo "/tmp/fbtriton-site: installed"
  elif bash docs/experiments/fbtriton_parts.sh install; then
    bash docs/experiments/fbtriton_parts.sh probe
  fi
  shift; run_cmd "$@"
  ;;
start)
  case ${2:?name} in
  production)
    python3 docs/experiments/derive_config.py configs/production.yaml runs/production-fast.yaml $windows \
      "providers=[gdpa, gdpa_triton, gdpa_hopper, fa4]"
    start production-h200 runs/production-fast.yaml
    ;;
  production-full)
    # the configs' own windows (1 s settle, energy loop and samples): issue 31's bar run, ~14 min + compiles + ncu
    python3 docs/experiments/derive_config.py configs/production.yaml runs/production-full.yaml \
      "providers=[gdpa, gdpa_triton, gdpa_hopper, fa4]"
    start production-h200 runs/production-full.yaml
    ;;
  peers)
    # issue 33's run: every meta_gdpa label (meta_gdpa_ws in fbtriton's site folder: `fbtriton` first), gdpa,
    # fa4, hstu, forward and backward (176 cases; `bench list` estimates ~12 min at the config's 1 s windows)
    python3 docs/experiments/derive_config.py configs/peers-h200.yaml runs/peers-fast.yaml $windows
    start peers-h200 runs/peers-fast.yaml --providers meta_gdpa,meta_gdpa_tma,meta_gdpa_persistent,meta_gdpa_ws,gdpa,fa4,hstu \
      --only "'/(fwd|bwd)/'"
    ;;
  peers-full)
    # the same run with the config's own 1 s windows (on an H100 the capped clock dips for ~145 ms every few hundred
    # ms: 300 ms windows put 2-5% between same-kernel cases there, docs/experiments/h100-2026-12-06d)
    python3 docs/experiments/derive_config.py configs/peers-h200.yaml runs/peers-full.yaml
    start peers-h200 runs/peers-full.yaml --providers meta_gdpa,meta_gdpa_tma,meta_gdpa_persistent,meta_gdpa_ws,gdpa,fa4,hstu \
      --only "'/(fwd|bwd)/'"
    ;;
  triton-tiles)
    # issue 30: Triton tile candidates where gdpa trails hstu or meta_gdpa (docs/experiments/triton_tiles.yaml)
    start triton-tiles docs/experiments/triton_tiles.yaml
    ;;
  owned-bwd)
    # issue 30: the owned backward where the Hopper backward's dQ accumulator costs most (docs/experiments/owned_bwd.yaml)
    start owned-bwd docs/experiments/owned_bwd.yaml
    ;;
  h200)
    python3 docs/experiments/derive_config.py configs/h200.yaml runs/h200-fast.yaml $windows
    start h200-gdpa runs/h200-fast.yaml --providers gdpa,gdpa_triton,gdpa_hopper,fa4 --only "'/(fwd|bwd)/'"
    ;;
  *) echo "unknown run $2" >&2; exit 2 ;;
  esac
  ;;
wait)
  # S in seconds, as tests-wait's: it was a count of 5 s polls until 2026-12-07, when `wait production-h200 480` in a
  # 580 s call waited past the call's end and brought nothing back
  name=${2:?name} secs=${3:-540}
  case $secs in '' | *[!0-9]*) echo "wait: S=$secs: allowed: whole seconds" >&2; exit 2 ;; esac
  for _ in $(seq 1 $(( secs / 5 ))); do
    [ -e "runs/$name.done" ] && break
    sleep 5
  done
  tail -n 25 "runs/$name.log"
  # the folder comes back from every wait, finished or not: a machine lost mid-run (2026-12-04, fourth
  # session) then loses only what the last call did not bring back (results are written case by case)
  cp "runs/$name.log" "$OUT/"
  tar czf "$OUT/$name.tgz" -C runs "$name" && ls -la "$OUT/$name.tgz"
  if [ -e "runs/$name.done" ]; then echo "exit $(cat runs/$name.done)"; else echo "still running"; fi
  ;;
tests-start)
  # The GPU keeps working through the gaps between device calls (held time either way), and no group has to
  # fit what is left of one call's 600 s. Chains run one at a time (flock), in the order they were started.
  shift
  mkdir -p /tmp/gt
  id=$(date +%s%N)
  touch "/tmp/gt/pending.$id"
  steps=""
  for a in "$@"; do
    case $a in
    kernels* | profiling* | harness* | faults* | peers*)
      g=${a%%:*} lim=${a#*:}; [ "$lim" = "$a" ] && lim=450
      steps+="echo \"[\$(date +%T)] $g\"; OUT=/tmp/gt bash docs/experiments/gpu_tests.sh $g $lim > /tmp/gt/$g.out 2>&1; "
      steps+="tail -n 8 /tmp/gt/$g.out; " ;;
    # %q: a command holding quotes or parentheses must not break the echo around it (2026-12-06: it did, and the
    # chain never ran)
    *) steps+="printf '[%s] + %s\\n' \"\$(date +%T)\" $(printf %q "$a"); ( $a ) >> /tmp/gt/commands.log 2>&1; " ;;
    esac
  done
  # the pending mark goes even when the steps cannot be parsed, so tests-wait does not wait out its time on them
  setsid nohup flock /tmp/gt/lock bash -c "bash -c $(printf %q "$steps"); rm -f /tmp/gt/pending.$id" \
    >> /tmp/gt/chain.log 2>&1 < /dev/null &
  echo "started chain $id: $*"
  ;;
tests-file)
  # a session's plan written down and committed beside the code it runs (docs/experiments/plans/*.chain), so the
  # device call is one word: the 2026-12-06 plan typed inline lost its chain to a quote inside a quote
  file=${2:?tests-file FILE}
  [ -f "$file" ] || { echo "tests-file: no such file: $file" >&2; exit 2; }
  mapfile -t steps < <(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$file")
  [ ${#steps[@]} -gt 0 ] || { echo "tests-file: no steps in $file" >&2; exit 2; }
  exec bash "$0" tests-start "${steps[@]}"
  ;;
tests-wait)
  for _ in $(seq 1 $(( ${2:-540} / 5 ))); do
    compgen -G "/tmp/gt/pending.*" > /dev/null || break
    sleep 5
  done
  cat /tmp/gt/chain.log
  compgen -G "/tmp/gt/pending.*" > /dev/null && echo "still running" || echo "every chain ended"
  # one archive: a call brings back at most 8 files, and the chains leave a log per test file (2026-12-06)
  cp /tmp/gt/chain.log /tmp/gt/commands.log "$OUT/" 2>/dev/null
  tar czf "$OUT/gt.tgz" -C /tmp/gt --exclude lock --exclude 'pending.*' . && ls -la "$OUT/gt.tgz"
  ;;
bands)
  python3 docs/experiments/bands_gpu.py 2>&1 | tee "$OUT/bands_gpu.log" | tail -12
  python3 docs/experiments/bands_gpu.py --compare runs/production-h200/results.json --against "$OUT/bands_gpu.json" \
    2>&1 | tee -a "$OUT/bands_gpu.log" | tail -20
  ;;
*)
  echo "unknown step $step" >&2
  exit 2
  ;;
esac
