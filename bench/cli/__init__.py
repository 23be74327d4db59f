"""The command line (docs/DESIGN.md §7): `parser` (`gdpa-bench` / `python -m bench`: the parser from the
command table), `options` (`Command`, the shared option groups), `commands` (run, list, workloads,
profile, env, submit, merge), `reporting` (report, compare, table, power-checks, fields), `history`
(history add, report, check), `profile` (the `profile` command), `workload_report` (the `workloads`
command's report).

The top of bench/: it may import every subpackage; none imports it.
"""
