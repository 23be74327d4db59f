"""One case, measured: what happens between a case's inputs and its record (docs/DESIGN.md §5).

`timing` (the timed samples, the L2 flush), `graph_timing` (the CUDA-graph device time beside them), `gate`
(the correctness gate), `power` (the case's energy loop), `calibrate` (the measured copy and GEMM ceilings),
`faults` (which CUDA errors leave a process's context unusable), `device` (which device, the interpreter on a
CPU), `hardware` (the GPU's datasheet figures).

Imports bench.config and bench.monitor, nothing above.
"""
