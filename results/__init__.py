"""The results contract (docs/DESIGN.md §6): what a run folder holds and what every figure in it means.

The runner, the shard merge and the report all go through this package; it imports no presentation.

- `files`: results.json / results.csv / results.parquet (schema, writer, reader, flattening)
- `power_csv`: the NVML timeline and its one stitching rule
- `record`: a case record (the entry of one case) and the figures of its samples
- `figures`: FLOPs, TFLOP/s, utilization, energy, bytes: each computed once
- `power`: the headline power figure and a case's power flags; a run's power counts
- `drift`: a case's drift; `checks` + `verdicts`: what `compare` reads and decides
- `frame`: the cases as a pandas frame with the derived figures (`load_run`)

    from results import load_run
    meta, cases, workloads = load_run("runs/<run>")
"""

from results.files import ResultsError, read_results
from results.frame import load_run
from results.power_csv import read_power

__all__ = ["ResultsError", "load_run", "read_power", "read_results"]
