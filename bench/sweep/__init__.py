"""A sweep in one process and the run folder it writes (docs/DESIGN.md §2, §7): `runner` (the sweep),
`rundir` (where a run may be written, `--resume` checks), `runlock` (one writer per run folder), `signals`
(Ctrl-C and SIGTERM), `progress` (the progress lines), `env` (the environment a run records), `report`
(the report step: a finished run's report), `api` (`bench.run`).

Named `sweep`, not `run`: `bench.run` is the API's function. Imports bench.config, bench.monitor,
bench.case and bench.profiling, nothing above.
"""
