"""A case's profiling views, after its samples (docs/DESIGN.md §5): `breakdown` (the kernel breakdown;
`trace_events`: which call a kernel of its Kineto trace belongs to), `counters` (Nsight Compute per case),
`bands` (the length bands of a case, each timed alone), `views` (a case's views after its samples, the
counters after the sweep). Their config sections are bench.config.profiling; the `profile` command is
bench.cli.profile.

Imports bench.config and bench.case, nothing above.
"""
