"""A case's profiling views (docs/DESIGN.md §5): `breakdown` (the kernel breakdown; `trace_events`: which call a
kernel of its Kineto trace belongs to), `counters` (Nsight Compute per case), `bands` (the length bands of a
case, each timed alone), `views` (a case's timed views after its samples, its profiled ones, the counters
after the sweep), `later` (the profiled phase: after the last timed case of a process, since a profiler
session slows every later call of its process). Their config sections are bench.config.profiling; the
`profile` command is bench.cli.profile.

Imports bench.config and bench.case, nothing above.
"""
