#!/usr/bin/env bash
# A run folder that came back from the H200 (`h200_session.sh wait NAME`: $OUT/NAME.tgz) committed as an example
# run, the way docs/example-h200-production and docs/example-h200-peers are kept: results.json.gz, report.md and
# its palette PNGs, logs/ (the run's console and its errors, gzipped), the example history updated. From the
# repository root, on the CPU machine:
#   bash docs/experiments/land_run.sh TGZ NAME DEST [LOG ...]
#   e.g. bash docs/experiments/land_run.sh /work/.device/N/peers-h200.tgz peers-h200 docs/example-h200-peers \
#        /work/.device/M/pytest-gpu-test_peers_gpu.log
# NAME: the folder inside the tarball; DEST: replaced (its logs/README.md is kept: write what ran there by hand).
# LOG: more files for logs/ (GPU test logs), gzipped (a .gz one as it is). Prints the README tables and issue 30's
# bars last.
set -euo pipefail
tgz=${1:?usage: land_run.sh TGZ NAME DEST [LOG ...]} name=${2:?NAME} dest=${3:?DEST}
shift 3
[ -f "$tgz" ] || { echo "land_run.sh: $tgz: no such file" >&2; exit 2; }
case $dest in  # DEST is replaced: only an example-run folder of docs/
docs/example-*) ;;
*) echo "land_run.sh: DEST $dest: allowed: docs/example-<name> (it is replaced)" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar xzf "$tgz" -C "$tmp"
run=$tmp/$name
[ -f "$run/results.json" ] || { echo "land_run.sh: $tgz holds no $name/results.json" >&2; exit 2; }

readme=""
[ -f "$dest/logs/README.md" ] && readme=$(cat "$dest/logs/README.md")
rm -rf "$dest"
mkdir -p "$dest/logs"
gzip -c "$run/results.json" > "$dest/results.json.gz"
[ -n "$readme" ] && printf '%s\n' "$readme" > "$dest/logs/README.md"
log=$(dirname "$tgz")/$name.log
if [ -f "$log" ]; then gzip -c "$log" > "$dest/logs/run.log.gz"; elif [ -f "$log.gz" ]; then cp "$log.gz" "$dest/logs/run.log.gz"; fi
[ -f "$run/errors.log" ] && gzip -c "$run/errors.log" > "$dest/logs/errors.log.gz"
for f in "$@"; do  # gzipped once: a LOG that is already .gz is copied as it is
  case $f in *.gz) cp "$f" "$dest/logs/$(basename "$f")" ;; *) gzip -c "$f" > "$dest/logs/$(basename "$f").gz" ;; esac
done

# what a reader opens on the web: report.md and the PNGs (the rest is rebuilt from results.json.gz by `report`)
python -m bench report "$dest" > /dev/null
rm -f "$dest"/report.html "$dest"/power.csv "$dest"/results.csv "$dest"/results.parquet "$dest"/plots/*.csv

# a history orders runs by commit: a run resumed at another commit (meta.sessions at two commits, e.g. a
# machine lost mid-run and the rest measured after a fix) stays out of it, said here, not an error
commits=$(python - "$dest" <<'PY'
import sys
from results.files import read_results, sessions
print(len({str(s.get("git_sha")) for s in sessions(read_results(sys.argv[1])["meta"]) if isinstance(s, dict)}))
PY
)
history="tests/test_history.py's run list, "
if [ "$commits" -le 1 ]; then
  python -m bench history add "$dest" --store docs/example-history --max-samples 20
  python -m bench history report --store docs/example-history > /dev/null
  rm -rf docs/example-history/plots
else
  echo "== history: $dest not added (its sessions ran at $commits commits: meta.sessions; a history orders runs by commit)"
  history=""
fi

echo "== tables for the README"
case $name in
peers*)
  python -m bench table "$dest" --providers meta_gdpa,meta_gdpa_tma,meta_gdpa_persistent,meta_gdpa_ws,gdpa,fa4 --only '^set[12]/'
  python -m bench table "$dest" --providers gdpa,hstu --only '^causal_silu'
  python docs/experiments/issue30_bars.py docs/example-h200-production --peers "$dest" | tee "$dest/logs/issue30_bars.txt" || true
  ;;
production*)
  python -m bench table "$dest" --providers gdpa,gdpa_triton,gdpa_hopper,fa4
  python docs/experiments/issue30_bars.py "$dest" --peers docs/example-h200-peers | tee "$dest/logs/issue30_bars.txt" || true
  ;;
*) python -m bench table "$dest" ;;
esac
echo "== then: $dest/logs/README.md (what ran, the windows, the commit), ${history}git add"
