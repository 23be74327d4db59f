"""Do two run folders hold the same results, apart from what timing decides? (A refactoring's check.)

    python docs/experiments/same_results.py OLD_RUN NEW_RUN

results.json: every case compared field by field (nested blocks key by key) except the fields that depend
on how fast this run was (the samples and everything computed from them); a field only the new run has is
listed as new, one only the old run has is a difference. report.md: every section, paragraph and table
compared; a table's columns by header (a moved column is reported, not counted as a difference), its cells
except those of timing columns. Exit 1 when anything but timings, new fields and moved columns differs.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# what the speed of this particular run decides (and the clock of the day)
TIMED = {
    "times_ms", "median_ms", "p20_ms", "p80_ms", "timed_s", "drift", "drift_p", "tflops", "util_peak",
    "util_measured", "wall_s", "sm_clock_mhz", "power",
}  # fmt: skip
# and where the checkout came from
TIMED_META = {"started_at", "finished_at", "git_sha", "git_commit", "git_dirty", "git_branch", "git_commit_time"}
TIMED_META |= {"git_source"}
TIMED_COLUMNS = re.compile(r"median ms|p20–p80 ms|^n$|TFLOP/s|util|speedup|J/call|W \(|at cap| vs |peak W|SM MHz|best ")
DATE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k not in ("sweep", "params", "pairing_params", "provider_options"):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def compare_json(old: dict, new: dict) -> tuple[list[str], set[str]]:
    diffs, added = [], set()
    for key in sorted(set(old["meta"]) | set(new["meta"])):
        if key in TIMED_META:
            continue
        if key not in new["meta"]:
            diffs.append(f"meta.{key}: missing in the new run")
        elif key not in old["meta"]:
            added.add(f"meta.{key}")
        elif old["meta"][key] != new["meta"][key]:
            diffs.append(f"meta.{key}: {old['meta'][key]!r} -> {new['meta'][key]!r}")
    if old["workloads"] != new["workloads"]:
        diffs.append("workloads differ")
    old_cases = {c["id"]: flat(c) for c in old["cases"]}
    new_cases = {c["id"]: flat(c) for c in new["cases"]}
    if list(old_cases) != list(new_cases):
        diffs.append(f"case ids or their order differ: {len(old_cases)} vs {len(new_cases)}")
    for cid in old_cases.keys() & new_cases.keys():
        a, b = old_cases[cid], new_cases[cid]
        for key in a.keys() | b.keys():
            if key.split(".")[0] in TIMED:
                continue
            if key not in b:
                diffs.append(f"{cid}: {key} missing in the new run")
            elif key not in a:
                added.add(key)
            elif a[key] != b[key]:
                diffs.append(f"{cid}: {key}: {a[key]!r} -> {b[key]!r}")
    return diffs, added


def blocks(md: str) -> list[tuple[str, object]]:
    """The report as ("text", line) and ("table", (headers, rows)) blocks."""
    out, table = [], None
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if table is None:
                table = (cells, [])
            elif not set(line) <= set("|-"):
                table[1].append(cells)
            continue
        if table is not None:
            out.append(("table", table))
            table = None
        if line.strip():
            out.append(("text", DATE.sub("<date>", line)))
    if table is not None:
        out.append(("table", table))
    return out


def compare_md(old: str, new: str) -> tuple[list[str], list[str]]:
    diffs, moved = [], []
    a, b = blocks(old), blocks(new)
    if [k for k, _ in a] != [k for k, _ in b]:
        return [f"the report's layout differs: {len(a)} vs {len(b)} blocks"], moved
    for (kind, x), (_, y) in zip(a, b, strict=True):
        if kind == "text":
            if x != y and not x.startswith("![") and not x.startswith("_"):
                diffs.append(f"text: {x!r} -> {y!r}")
            continue
        (ha, ra), (hb, rb) = x, y
        if ha != hb:
            if sorted(ha) == sorted(hb):
                moved.append(f"columns moved: {ha} -> {hb}")
            else:
                diffs.append(f"table headers: {ha} -> {hb}")
                continue
        if len(ra) != len(rb):
            diffs.append(f"table {ha[0]}: {len(ra)} rows -> {len(rb)}")
            continue
        for row_a, row_b in zip(ra, rb, strict=True):
            cells_a, cells_b = dict(zip(ha, row_a, strict=False)), dict(zip(hb, row_b, strict=False))
            for col in ha:
                if TIMED_COLUMNS.search(col) or col in ("started / finished", "git"):
                    continue
                if row_a[0] in ("started / finished", "git", "host"):
                    continue
                if cells_a.get(col) != cells_b.get(col):
                    diffs.append(f"table {ha[0]} row {row_a[0]}, {col}: {cells_a.get(col)!r} -> {cells_b.get(col)!r}")
    return diffs, moved


def main(old_dir: str, new_dir: str) -> int:
    old, new = Path(old_dir), Path(new_dir)
    jd, added = compare_json(
        json.loads((old / "results.json").read_text()), json.loads((new / "results.json").read_text())
    )
    md, moved = compare_md((old / "report.md").read_text(), (new / "report.md").read_text())
    print(f"results.json: {len(jd)} difference(s) outside timings; new fields: {', '.join(sorted(added)) or 'none'}")
    print(*(f"  {d}" for d in jd), sep="\n") if jd else None
    print(f"report.md: {len(md)} difference(s) outside timing columns; {len(moved)} table(s) with moved columns")
    print(*(f"  {d}" for d in md + moved), sep="\n") if md or moved else None
    return 1 if jd or md else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
