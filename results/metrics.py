"""The metric table: every field of a case record, every column the results frame derives from them, and
every workload statistic a report shows, declared once (docs/DESIGN.md §6).

One row drives everything about its field:
- the case record: `results.record.new_case_record` starts every always-present field empty, and
  `results.record.check_case_record` refuses a field (or a block's key, or a table's column) no row
  declares, so the record cannot drift from this table;
- the results frame (`results.frame`): every scalar row is a column, numeric rows are floats, and a row with
  `derive` (results.derived) is computed there, in table order (so a row may use the rows above it); a
  table inside a case (`kernels.rows`) is one column, and `results.frame.table_frame` its long form;
- the report's tables (`reports.sections`, `reports.profiling`): a row lists the views that show it
  (`shown`), in table order, under its `header`, formatted by its `fmt`; a table's columns form the long
  table of their view (one row per kernel, per band);
- the docs: DESIGN.md §6's field reference is `field_reference()` (`gdpa-bench fields`), checked by a test.

To add a metric, add a row here and a test of its value (a derived row: a `derive` over the frame's columns).
"""

from __future__ import annotations

from results import derived
from results.figures import intensity, min_bytes, speedup_vs_baseline
from results.metric_row import Metric, block_rows

# tile efficiency at a t×t tile (workloads.stats.tile_efficiency; docs/DESIGN.md §4)
TILE_EFF = "ΣLqLk / Σ⌈Lq/{t}⌉{t}·⌈Lk/{t}⌉{t} (causal: unmasked over computed tiles' pairs)"
WHERE = ("kernels", "counters", "bands")  # the views of "Where the time goes", one row per case

_per_kernel = block_rows("counters.kernels", "profile", "counters")  # one Nsight Compute counter per kernel
_length_stat = block_rows("stats", "lengths", "workloads")  # a workload's `stats` (workloads.stats)
_power = block_rows("power", "energy loop")  # the case's `power` block; its views are named per row


# fmt: off
METRICS: tuple[Metric, ...] = (
    Metric("id", "", "config", "", "`<set>/<mode>/L=<max_len>/<axis>=<value>.../<label>`: the case's name", kind="text",
      shown=("cases", *WHERE), header="case"),
    Metric("set", "", "config", "", "the config's set (a sweep of workloads)", kind="text"),
    Metric("max_len", "tokens", "config", "", "the largest length the set's length family draws (L)", fmt="len"),
    Metric("sweep", "", "config", "", "{axis: value} of every swept axis besides L", kind="object"),
    Metric("provider", "", "config", "", "the provider's label (the config's; default its registry name)", kind="text"),
    Metric("label", "", "frame", "provider, + ' (softmax)' for softmax providers",
      "how tables and legends name the provider", kind="text", shown=("cases", "kernels"), header="provider"),
    Metric("provider_name", "", "config", "", "the provider's registry name", kind="text"),
    Metric("provider_options", "", "provider", "", "the options in force (`options_record()`); null without options",
      kind="object"),
    Metric("semantics", "", "provider", "", "`gdpa` or `softmax` (softmax providers are speed references)",
      kind="text"),
    Metric("mode", "", "config", "", "`fwd`, `bwd` or `fwd_bwd`", kind="text"),
    Metric("dtype", "", "config", "", "the inputs' dtype: bf16, fp16, fp32", kind="text"),
    Metric("activation", "", "config", "", "GDPA's activation; `softmax` for softmax providers", kind="text"),
    Metric("workload", "", "config", "", "the workload's parameters and the statistics of its lengths", kind="block"),
    Metric("workload.name", "", "config", "", "the workload (`<set>/L=<max_len>/<axis>=<value>...`)", kind="text"),
    Metric("workload.family", "", "config", "", "the length family (docs/DESIGN.md §4)", kind="text"),
    Metric("workload.params", "", "config", "", "the family's parameters", kind="object"),
    Metric("workload.pairing", "", "config", "", "the Q/KV pairing rule", kind="text"),
    Metric("workload.pairing_params", "", "config", "", "the pairing rule's parameters", kind="object"),
    Metric("workload.sorted", "", "config", "", "sequences sorted by work, longest first", kind="flag"),
    Metric("workload.B", "count", "config", "", "sequences in the batch"),
    Metric("workload.H", "count", "config", "", "query heads"),
    Metric("workload.Hkv", "count", "config", "", "key/value heads (GQA when below H)"),
    Metric("workload.D", "count", "config", "", "head dimension"),
    Metric("workload.causal", "", "config", "", "causal mask (j ≤ i, diagonal kept)", kind="flag"),
    Metric("workload.alpha", "", "config", "", "pre-activation scale"),
    Metric("workload.qk_scale", "", "config", "", "post-activation scale"),
    Metric("workload.max_q", "tokens", "lengths", "max Lq", "the longest query sequence"),
    Metric("workload.max_kv", "tokens", "lengths", "max Lk", "the longest key sequence"),
    Metric("workload.total_q", "tokens", "lengths", "ΣLq", "query rows of the packed tensor"),
    Metric("workload.total_kv", "tokens", "lengths", "ΣLk", "key rows of the packed tensor"),
    Metric("workload.padding_waste", "fraction", "lengths", "1 − ΣLq / (B·max Lq)", "padding a dense layout would add"),
    Metric("workload.flop_waste", "fraction", "lengths", "1 − Σw / (B·max Lq·max Lk), w = LqLk (causal: kept pairs)",
      "FLOP area a dense layout wastes"),
    Metric("workload.imbalance", "", "lengths", "max(w) / mean(w), w = LqLk (causal: kept pairs)",
      "work of the largest sequence over the mean", fmt="frac"),
    Metric("workload.seed", "count", "config", "", "the seed the lengths and inputs are drawn with"),
    Metric("workload.lengths_sha256", "", "lengths", "", "a hash of the Q and KV lengths", kind="text"),
    Metric("status", "", "runner", "",
      "`ok` timed · `incorrect` failed the gate, not timed · `failed` raised (e.g. out of memory) or faulted the "
        "GPU · `skipped` cannot run here, unsupported, or needs more memory than is free (`needs N GiB, M GiB free`)",
      kind="text", shown=("cases",), header="status"),
    Metric("ok", "", "frame", "status == 'ok'", "the case was timed", kind="flag"),
    Metric("flops", "FLOP", "runner", "4·H·D·Σ unmasked pairs (causal: its provider's mask); bwd ×2.5, fwd_bwd ×3.5",
      "useful FLOPs per call, the peers' convention (docs/DESIGN.md §3)", fmt="sci"),
    Metric("times_ms", "ms", "timer", "", "every timed sample, in measurement order", kind="list"),
    Metric("median_ms", "ms", "timer", "median of times_ms", "time per call", shown=("cases", "kernels"),
      header="median ms"),
    Metric("p20_ms", "ms", "timer", "20th percentile of times_ms", "a fast call", shown=("cases",), header="p20–p80 ms",
      span_to="p80_ms"),
    Metric("p80_ms", "ms", "timer", "80th percentile of times_ms", "a slow call"),
    Metric("n_samples", "count", "frame", "len(times_ms)", "timed samples", shown=("cases",), header="n", fmt="count"),
    Metric("timed_s", "s", "timer", "Σ times_ms / 1000", "the timed window the samples add up to", fmt="ms"),
    Metric("drift", "fraction", "timer", "(median of the last tenth − median of the first tenth) / first tenth",
      "did the time move while measured (null under 20 samples; results.drift)"),
    Metric("drift_p", "", "timer", "Mann-Whitney U, first vs last tenth", "the drift's p-value", fmt="sci"),
    Metric("chunk_clocks", "MHz", "monitor", "", "[samples so far, SM clock] read at each of the timer's chunks "
      "(empty: not read per chunk): the clock each sample ran near", kind="list"),
    Metric("sm_clock_mhz", "MHz", "monitor", "median sample's clock, between the readings after each chunk",
      "the clock the samples ran at (compare normalises by it); null without the monitor"),
    Metric("sm_mcycles", "M cycles", "frame", "median_ms · sm_clock_mhz / 1000", "SM cycles a call: at a binding "
      "power cap the clock is what a kernel's power per cycle leaves it, so time follows energy and this tells the "
      "kernel's own speed", shown=("cases",), header="M cycles", derive=derived.cycles_column),
    Metric("tflops", "TFLOP/s", "timer", "flops / (median_ms · 1e-3) / 1e12", "achieved rate (results.figures.tflops)",
      shown=("summary", "cases", "bands"), header="TFLOP/s", derive=derived.tflops_column),
    Metric("util_peak", "fraction", "timer", "tflops / meta.peak_tflops[dtype]", "share of the datasheet dense peak",
      shown=("summary", "cases"), header="util peak", derive=derived.utilization_column("peak_tflops", "util_peak")),
    Metric("util_measured", "fraction", "timer", "tflops / meta.measured_gemm_tflops",
      "share of the GEMM ceiling measured in the run", shown=("summary", "cases"), header="util GEMM",
      derive=derived.utilization_column("measured_gemm_tflops", "util_measured")),
    # the workload block's tile efficiencies, shown next to the utilization (issue 22); recorded after its other keys
    Metric("workload.tile_eff_64", "fraction", "lengths", TILE_EFF.format(t=64),
      "share of the score area a 64×64-tile kernel computes that is useful", shown=("cases",), header="tile eff 64"),
    Metric("workload.tile_eff_128", "fraction", "lengths", TILE_EFF.format(t=128),
      "share of the score area a 128×128-tile kernel computes that is useful", shown=("cases",),
      header="tile eff 128"),
    Metric("speedup", "×", "frame", "median_ms(baseline, same shape) / median_ms",
      "time ratio vs the baseline provider on the same shape (> 1: faster)", shown=("cases",), header="speedup",
      derive=lambda df, meta: speedup_vs_baseline(df, df.attrs.get("baseline"))),
    Metric("correctness", "", "gate", "", "the correctness gate (docs/DESIGN.md §9); null when the gate is off",
      kind="block"),
    Metric("correctness.rel_err", "", "gate", "‖out − ref‖ / ‖ref‖ in fp64, the worst tensor",
      "relative error against the exact reference", shown=("cases",), header="rel err", fmt="sci"),
    Metric("correctness.tolerance", "", "gate", "", "the largest rel_err that passes", fmt="sci"),
    Metric("correctness.passed", "", "gate", "rel_err ≤ tolerance, no NaN/Inf", "the case passed the gate",
      kind="flag"),
    Metric("correctness.per_tensor", "", "gate", "", "{out[, dq, dk, dv]: rel_err}", kind="object"),
    Metric("correctness.checked_seqs", "count", "gate", "", "sequences compared with the reference"),
    Metric("energy_j_per_call", "J", "frame", "headline_w · seconds / calls (power.*), else avg_w · median_ms",
      "energy per call", shown=("summary", "cases"), header="J/call", derive=derived.energy_column),
    Metric("power_w", "W", "frame", "power.headline_w (results.power.headline_w)",
      "the one power figure a report shows", shown=("summary", "cases"), header="W (energy counter)",
      derive=derived.headline_column),
    Metric("power_above_cap", "", "frame", "power.above_cap", "flagged above the cap + 3%", kind="flag",
      derive=derived.power_flag("above_cap")),
    Metric("power_estimators_apart", "", "frame", "power.estimators_disagree",
      "flagged: the two power estimators more than 5% apart", kind="flag",
      derive=derived.power_flag("estimators_disagree")),
    Metric("power", "", "energy loop", "", "power during the energy loop (docs/DESIGN.md §5); null without the monitor",
      kind="block"),
    _power("n_samples", "count", "", "sampler readings in the window"),
    _power("avg_w", "W", "mean of the readings", "the samples' average power over the window"),
    _power("peak_w", "W", "max of the readings", "the highest reading", shown=("cases",),
      header="peak W"),
    Metric("tflops_per_w", "TFLOP/s/W", "frame", "power.tflops_per_w, else tflops / power.avg_w", "efficiency",
      shown=("cases",), header="TFLOP/s/W", derive=derived.per_watt_column),
    _power("frac_at_cap", "fraction", "share of readings with power ≥ 0.97·cap or sw_power_cap",
      "how much of the loop ran at the power cap", shown=("summary", "cases"), header="at cap"),
    _power("frac_power_at_cap", "fraction", "share of readings with power ≥ 0.97·cap",
      "the power part of frac_at_cap"),
    _power("frac_sw_power_cap", "fraction", "share of readings with the sw_power_cap reason",
      "the reason part of frac_at_cap"),
    _power("sm_clock_mhz_median", "MHz", "median SM clock of the readings", "the loop's SM clock",
      shown=("cases",), header="SM MHz"),
    _power("temperature_c_max", "°C", "", "the hottest reading"),
    _power("reasons", "", "", "clock-event reasons seen in any reading (sw_power_cap, thermal, …)",
      kind="list", shown=("cases",), header="reasons"),
    _power("energy_j_per_call", "J", "avg_w_from_energy · seconds / calls", "energy per call from the energy counter"),
    _power("energy_source", "", "", "counter_ticks · counter · samples: how the energy was read", kind="text"),
    _power("avg_w_from_energy", "W", "Δ energy counter / Δt between its first and last step",
      "the headline power estimator"),
    _power("avg_w_from_energy_delta", "W", "(counter at end − at start) / seconds",
      "the plain start/end delta, for comparison"),
    _power("energy_span_s", "s", "", "the time the counter figure covers", fmt="ms"),
    _power("counter_step_ms", "ms", "", "median time between counter updates"),
    _power("avg_w_same_span", "W", "mean of the readings over energy_span_s",
      "the second estimator of the same energy"),
    _power("n_samples_same_span", "count", "", "readings over energy_span_s"),
    _power("tflops", "TFLOP/s", "flops · calls / seconds / 1e12", "the loop's rate"),
    _power("tflops_per_w", "TFLOP/s/W", "power.tflops / headline_w", "the loop's efficiency"),
    _power("cap_w", "W", "", "the configured cap, else the enforced limit"),
    _power("calls", "count", "", "calls in the window"),
    _power("seconds", "s", "", "the window's length", fmt="ms"),
    _power("headline_w", "W", "avg_w_from_energy, else avg_w_same_span / avg_w (results.power.headline_w)",
      "the one power figure a report shows"),
    _power("estimator_diff", "fraction", "avg_w_same_span / avg_w_from_energy − 1",
      "how far the two estimators are apart"),
    _power("estimators_disagree", "", "|estimator_diff| > 5% (where the counter resolves 5%)", "flag", kind="flag"),
    _power("above_cap", "", "headline_w > cap_w · 1.03 (where the counter resolves 5%)", "flag", kind="flag"),
    _power("settle_s", "s", "", "the pre-roll before the window opened", fmt="ms"),
    _power("power_source", "", "", "instant (NVML field) or average (~1 s NVML average)", kind="text"),
    _power("monitor_error", "", "", "an NVML error while the loop ran, or null", kind="text"),
    Metric("gpu_index", "count", "runner", "", "the GPU that ran the case (null on CPU)"),
    Metric("gpu_name", "", "runner", "", "its name", kind="text"),
    Metric("session", "count", "runner", "", "which of `meta.sessions` (a run resumed on another machine or commit) "
      "measured the case; absent: the first", optional=True),
    Metric("kernel_config", "", "provider", "",
      "what the provider ran (`kernel_configs()`): for the GDPA op the backend and reason per pass, tiles, "
        "registers, spills",
      kind="object"),
    Metric("environment", "", "runner", "",
      "the environment that ran the case: a provider entry's own (`environment:`, a worker started with it) or the "
        "harness's", kind="block"),
    Metric("environment.declared", "", "config", "",
      "the entry's `environment` (`python`, `prepend_path`) as the config names it; null: the harness's own",
      kind="object"),
    Metric("environment.python", "", "runner", "", "the interpreter of the process that ran the case", kind="text"),
    Metric("environment.triton", "", "runner", "", "`triton.__version__` in that process", kind="text"),
    Metric("environment.triton_package", "", "runner", "",
      "the distribution that installed that `triton`, `<name> <version>` (Meta's fork installs as triton: "
        "`fbtriton 3.6.1`)", kind="text"),
    Metric("environment.triton_path", "", "runner", "", "the folder it was imported from", kind="text"),
    Metric("wall_s", "s", "runner", "", "wall time of the whole case (gate, build, timing, energy loop)", fmt="ms"),
    Metric("min_bytes", "B", "frame", "elem · (2Q + 2K) fwd, (3Q + 4K) bwd, both for fwd_bwd",
      "compulsory HBM traffic (results.figures.min_bytes)", fmt="sci",
      derive=lambda df, meta: derived.rows_map(df, min_bytes)),
    Metric("intensity", "FLOP/B", "frame", "flops / min_bytes", "arithmetic intensity", shown=("cases",),
      header="FLOP/B", derive=lambda df, meta: derived.rows_map(df, lambda r: intensity(r["flops"], r["min_bytes"]))),
    Metric("error", "", "runner", "", "null, or why the case is not ok (one line)", kind="text", shown=("cases",),
      header="error"),
    Metric("monitor_overhead", "", "overhead check", "", "the case timed with the sampler on, off, on", kind="block",
      optional=True),
    Metric("monitor_overhead.median_ms_with", "ms", "overhead check", "", "mean of the two medians with it on"),
    Metric("monitor_overhead.median_ms_without", "ms", "overhead check", "", "median with it stopped"),
    Metric("monitor_overhead.overhead", "fraction", "overhead check", "with / without − 1", "what monitoring costs"),
    # Where the time goes (docs/DESIGN.md §5): the kernels of a call, Nsight Compute per kernel, the length bands
    Metric("kernels", "", "breakdown", "", "the kernels one call launches: a profiler pass after every timed "
      "measurement of the process (bench.profiling.breakdown, .later; GPU runs by default)", kind="block",
      optional=True),
    Metric("kernels.source", "", "breakdown", "", "cuda (CUPTI) · cpu (the CPU profiler's ops)", kind="text"),
    Metric("kernels.profiled_calls", "count", "breakdown", "", "calls profiled (after warm_ms of uncounted calls)"),
    Metric("kernels.sum_ms", "ms", "breakdown", "Σ rows.ms", "kernel time per call", shown=("kernels",),
      header="kernel sum ms"),
    Metric("kernels_over_median", "", "frame", "kernels.sum_over_median, else kernels.sum_ms / median_ms", "below 1: "
      "launch gaps and host work between kernels", shown=("kernels",), header="sum / median", fmt="frac",
      derive=derived.ratio_column("kernels.sum_ms", "median_ms", recorded="kernels.sum_over_median")),
    Metric("kernels.pass_median_ms", "ms", "breakdown", "median of the pass's event-timed calls", "the call timed "
      "as the samples are, inside the breakdown's own profiler pass (the clock and moment its kernels ran at)",
      shown=("kernels",), header="pass ms"),
    Metric("kernels.pass_calls", "count", "breakdown", "", "the pass's event-timed calls"),
    Metric("kernels.pass_sum_ms", "ms", "breakdown", "Σ kernel time of the pass's event-timed calls / pass_calls",
      "GPU: the kernel time per call of the very calls pass_median_ms timed"),
    Metric("kernels.sum_over_pass", "", "breakdown", "pass_sum_ms (else sum_ms) / pass_median_ms", "GPU: the "
      "kernel sum of the pass's calls against their event time: what the breakdown is judged by", shown=("kernels",),
      header="sum / pass", fmt="frac"),
    Metric("kernels.sum_over_median", "", "breakdown", "pass_sum_ms (else sum_ms) / median_ms", "GPU: the kernel "
      "sum against the case's timed median (reported: the samples ran at another moment, under a power cap at "
      "another clock)"),
    Metric("kernels.idle_share", "fraction", "breakdown", "1 − sum_over_pass (≥ 0)", "GPU: the share of the "
      "call the GPU ran none of its kernels", shown=("kernels",), header="GPU idle"),
    Metric("kernels.accounting", "", "breakdown", "sum_over_pass: [0.95, 1.05] · [0.90, 0.95) · < 0.90 · > 1.05",
      "GPU: accounted (the kernels are the call's time) · launch gaps (the GPU idles 5–10% of the call between "
      "its kernels: neither host-bound nor fully accounted) · host-bound · kernels over the call (overlapping "
      "streams, or kernels placed in the wrong call)", kind="text", shown=("kernels",), header="accounting"),
    Metric("host_bound", "", "breakdown", "1 − cuda_graph.ms / median_ms > 0.1 (and by ms_at_samples_clock where "
      "known), else kernels.idle_share > 0.1 and 1 − kernels.sum_ms / median_ms > 0.1",
      "the GPU idled more than 10% of the call: the host sets its time (null without a GPU breakdown)",
      kind="flag", shown=("kernels",), header="host-bound"),
    Metric("cuda_graph", "", "graph", "", "the call's device time from CUDA-graph replay beside the event-timed "
      "median (`timing.cuda_graph`; bench.case.graph_timing)", kind="block", optional=True),
    Metric("cuda_graph.ms", "ms", "graph", "(median replay of calls + flushes − of flushes) / calls",
      "device time per call, no host work between calls", shown=("kernels",), header="graph ms"),
    Metric("cuda_graph.calls", "count", "graph", "", "calls captured per graph"),
    Metric("cuda_graph.replays", "count", "graph", "", "timed replays of each graph"),
    Metric("cuda_graph.flush_ms", "ms", "graph", "", "the L2 flush per call, subtracted"),
    Metric("cuda_graph.sm_clock_mhz", "MHz", "graph", "median of NVML reads between replay rounds",
      "the SM clock the replays ran at (null without a power monitor)", optional=True),
    Metric("cuda_graph.ms_at_samples_clock", "ms", "graph", "ms × sm_clock_mhz / the samples' sm_clock_mhz",
      "the graph's device time at the samples' clock (the same SM cycles): what host_bound also reads, so that "
      "a clock the power cap moved between samples and replays is not taken for host time", optional=True),
    Metric("cuda_graph.error", "", "graph", "", "null, or why the call could not be captured (its event timing "
      "stands)", kind="text", shown=("kernels",), header="graph error"),
    Metric("cuda_graph.memory", "", "graph", "", "the caching allocator around the capture: allocated_gib and "
      "reserved_gib before it, call_peak_gib (one call's peak allocation), reserved_after_gib once its graphs "
      "are released", kind="object", optional=True),
    Metric("kernels.n_kernels", "launches", "breakdown", "Σ rows.calls", "kernel launches per call", shown=("kernels",),
      header="launches"),
    Metric("kernels_top", "", "frame", "", "the longest kernels by short name and share", kind="text",
      shown=("kernels",), header="top kernels", derive=derived.top_kernels),
    Metric("kernels.rows", "", "breakdown", "", "one row per kernel name, longest first (past 24: `(other)`)",
      kind="table"),
    Metric("kernels.rows.name", "", "breakdown", "", "the kernel as the profiler names it; memsets and copies count",
      kind="text", shown=("kernels",), header="kernel"),
    Metric("kernels.rows.calls", "launches", "breakdown", "", "its launches per call", shown=("kernels",),
      header="calls per call"),
    Metric("kernels.rows.ms", "ms", "breakdown", "", "its time per call", shown=("kernels",), header="ms per call"),
    Metric("kernels.rows.share", "fraction", "breakdown", "ms / sum_ms", "its share of the kernel time",
      shown=("kernels",), header="share"),
    Metric("kernels.rows.rule", "", "breakdown", "", "GPU: what placed it in the call (bench.profiling.trace_events): "
      "launch (its launch API call ran in the call's range) · device time (no launch recorded: its GPU start)",
      kind="text", shown=("kernels",), header="placed by"),
    Metric("kernels.unattributed_ms", "ms", "breakdown", "", "GPU: device time per call that no rule placed in a call, "
      "a flush or the warm-up (~0)"),
    Metric("kernels.trace", "", "breakdown", "", "the pass's Kineto trace, from the run folder (`breakdown.trace`, "
      "`profile --trace`; Perfetto's JSON loader opens it)", kind="text"),
    Metric("kernels.error", "", "breakdown", "", "null, or why there is no breakdown (the case stays ok)", kind="text",
      shown=("kernels",), header="breakdown error"),
    Metric("counters", "", "profile", "", "Nsight Compute over one call, clocks untouched (bench.profiling.counters; "
      "config `counters.only`, `gdpa-bench profile`)", kind="block", optional=True),
    Metric("counters.status", "", "profile", "", "ok · skipped (no ncu, no counter permission, a CPU run) · failed",
      kind="text", shown=("counters",), header="ncu"),
    Metric("counters.tensor_pct", "%", "profile", "duration-weighted kernels.tensor_pct",
      "tensor-pipe activity over the call's kernels", shown=("counters",), header="tensor pipe"),
    Metric("counters.duration_ms", "ms", "profile", "Σ kernels.duration_ms", "kernel time of the call under ncu",
      shown=("counters",), header="kernel ms"),
    Metric("counters.intensity", "FLOP/B", "profile", "flops / dram_bytes", "measured arithmetic intensity (the "
      "roofline's star)", shown=("counters",), header="FLOP/B (DRAM)"),
    Metric("counters.tflops", "TFLOP/s", "profile", "flops / duration_ms", "useful FLOPs over the kernel time",
      shown=("counters",), header="TFLOP/s (kernels)"),
    Metric("counters.reason", "", "profile", "", "null, or why not ok (one line)", kind="text", shown=("counters",),
      header="reason"),
    Metric("counters.kernels", "", "profile", "", "one row per kernel of the call, in launch order", kind="table"),
    _per_kernel("name", "", "", "the kernel", "kernel", kind="text"),
    _per_kernel("duration_ms", "ms", "gpu__time_duration", "its duration", "ms"),
    _per_kernel("tensor_pct", "%", "sm__pipe_tensor_op_hmma_cycles_active (% of peak sustained active)",
      "tensor-pipe activity", "tensor pipe"),
    _per_kernel("sm_pct", "%", "sm__throughput (% of peak)", "SM throughput", "SM"),
    _per_kernel("dram_pct", "%", "dram__throughput (% of peak)", "DRAM throughput", "DRAM"),
    _per_kernel("occupancy_pct", "%", "sm__warps_active (% of peak sustained active)", "achieved occupancy",
      "occupancy"),
    _per_kernel("registers", "count", "launch__registers_per_thread", "registers per thread", "regs"),
    _per_kernel("local_ld", "count", "smsp__sass_inst_executed_op_local_ld.sum",
      "local-memory loads (register spills or local arrays)", "local ld"),
    _per_kernel("local_st", "count", "smsp__sass_inst_executed_op_local_st.sum", "local-memory stores", "local st"),
    _per_kernel("dram_bytes", "B", "dram__bytes_read.sum + dram__bytes_write.sum", "DRAM traffic", "DRAM bytes",
      fmt="sci"),
    _per_kernel("sm_clock_mhz", "MHz", "sm__cycles_elapsed.avg.per_second", "its SM clock"),
    Metric("counters.dram_bytes", "B", "profile", "Σ kernels.dram_bytes", "DRAM traffic of the call", fmt="sci"),
    Metric("counters.sm_clock_mhz", "MHz", "profile", "duration-weighted kernels.sm_clock_mhz", "the SM clock"),
    Metric("counters.report", "", "profile", "", "the kept .ncu-rep (`counters.keep`, `profile --keep`)", kind="text"),
    Metric("counters.replayed", "", "profile", "", "options the ncu child laid over the provider's own to run what the "
      "case recorded (`Provider.replay_options`: the op's plan per pass), or null", kind="object", optional=True),
    Metric("tc_util_ncu", "fraction", "profile", "counters.tensor_pct / 100", "tensor-pipe activity read by Nsight "
      "Compute (also in runs before `counters`)", optional=True),
    Metric("ncu_sm_clock_mhz", "MHz", "profile", "", "the SM clock under Nsight Compute", optional=True),
    Metric("ncu_kernels", "", "profile", "", "the kernels profiled (runs before `counters`)", kind="object",
      optional=True),
    Metric("ncu_duration_ms", "ms", "profile", "", "their total duration", optional=True),
    Metric("ncu_report", "", "profile", "", "the kept .ncu-rep file", kind="text", optional=True),
    Metric("bands", "", "bands", "", "the batch split by min(Lq, Lk), each band timed alone (bench.profiling.bands; "
      "config `bands.only`, `profile --bands`)", kind="block", optional=True),
    Metric("bands.key", "", "bands", "", "what a sequence is banded by: min(Lq, Lk)", kind="text"),
    Metric("bands.edges", "tokens", "bands", "", "e1 < e2 < ...: the bands [0, e1), ..., [e_last, ∞)", kind="list"),
    Metric("bands.sum_ms", "ms", "bands", "Σ rows.median_ms", "the bands' medians summed (null unless every band "
      "with sequences was timed)", shown=("bands",), header="bands sum ms"),
    Metric("bands.whole_ms", "ms", "bands", "median_ms", "the whole batch's median", shown=("bands",),
      header="whole ms"),
    Metric("bands.sum_over_whole", "", "bands", "sum_ms / whole_ms", "above 1: the bands apart cost more than the "
      "batch (tails, launches)", fmt="frac", shown=("bands",), header="sum / whole"),
    Metric("bands.kernel_sum_ms", "ms", "bands", "Σ rows.kernel_ms", "the bands' kernel times summed (GPU runs with "
      "the breakdown; null unless every band was timed)"),
    Metric("bands.kernel_sum_over_whole", "", "bands", "kernel_sum_ms / kernels.sum_ms", "the same against the whole "
      "batch's kernels: near 1 while sum / whole is not: host time", fmt="frac", shown=("bands",),
      header="kernel sum / whole"),
    Metric("bands.why", "", "bands", "", "null when the bands sum within 10% of the whole batch, else why not",
      kind="text", shown=("bands",), header="why not within 10%"),
    Metric("bands.tile", "tokens", "bands", "", "the (query, key) tile of the kernel", kind="list", fmt="tile",
      shown=("bands",), header="tile"),
    Metric("bands.tile_source", "", "bands", "", "the kernel_config entry it came from, else assumed (128×128)",
      kind="text", shown=("bands",), header="tile from"),
    Metric("bands.tile_eff", "fraction", "bands", "ΣLqLk / Σ computed pairs at tile", "the batch's tile efficiency "
      "at the kernel's tile", shown=("bands",), header="tile efficiency"),
    Metric("bands.long_band", "", "bands", "", "the band the kernel ran fastest", kind="text", shown=("bands",),
      header="fastest band"),
    Metric("bands.long_tflops", "TFLOP/s", "bands", "max rows.tflops", "the kernel's long-sequence speed",
      shown=("bands",), header="long-sequence TFLOP/s"),
    Metric("bands.ceiling_tflops", "TFLOP/s", "bands", "tile_eff · long_tflops", "the jaggedness ceiling: the "
      "batch's speed if jaggedness cost only the partial tiles", shown=("bands",), header="ceiling TFLOP/s"),
    Metric("bands_achieved", "fraction", "frame", "tflops / bands.ceiling_tflops", "the batch's speed over its "
      "jaggedness ceiling", shown=("bands",), header="achieved / ceiling",
      derive=derived.ratio_column("tflops", "bands.ceiling_tflops")),
    Metric("bands.error", "", "bands", "", "null, or why the split failed", kind="text", shown=("bands",),
      header="error"),
    Metric("bands.rows", "", "bands", "", "one row per band, in length order (empty ones too)", kind="table"),
    Metric("bands.rows.label", "", "bands", "", "the band: <e1, e1–e2−1, ..., ≥e_last", kind="text",
      shown=("bands",), header="band"),
    Metric("bands.rows.lo", "tokens", "bands", "", "its lower edge (inclusive)"),
    Metric("bands.rows.hi", "tokens", "bands", "", "its upper edge (exclusive; null: none)"),
    Metric("bands.rows.n_seqs", "count", "bands", "", "its sequences", shown=("bands",), header="seqs"),
    Metric("bands.rows.seq_share", "fraction", "bands", "n_seqs / B", "its share of the sequences", shown=("bands",),
      header="seq share"),
    Metric("bands.rows.work_pairs", "count", "bands", "Σ work_pairs", "its work (unmasked score pairs)"),
    Metric("bands.rows.work_share", "fraction", "bands", "work_pairs / Σ work_pairs", "its share of the work",
      shown=("bands",), header="work share"),
    Metric("bands.rows.tile_eff_64", "fraction", "bands", TILE_EFF.format(t=64), "its tile efficiency at 64×64"),
    Metric("bands.rows.tile_eff_128", "fraction", "bands", TILE_EFF.format(t=128), "its tile efficiency at 128×128",
      shown=("bands",), header="tile eff 128"),
    Metric("bands.rows.flops", "FLOP", "bands", "as flops, on the band's lengths", "its FLOPs per call", fmt="sci"),
    Metric("bands.rows.status", "", "bands", "", "ok · empty · incorrect (its gate failed) · failed · skipped",
      kind="text", shown=("bands",), header="status"),
    Metric("bands.rows.rel_err", "", "bands", "as correctness.rel_err", "its gate's relative error", fmt="sci"),
    Metric("bands.rows.median_ms", "ms", "bands", "", "its median, timed alone", shown=("bands",), header="ms"),
    Metric("bands.rows.p20_ms", "ms", "bands", "", "its 20th percentile"),
    Metric("bands.rows.p80_ms", "ms", "bands", "", "its 80th percentile"),
    Metric("bands.rows.n_samples", "count", "bands", "", "its timed samples"),
    Metric("bands.rows.kernel_ms", "ms", "bands", "kernels.sum_ms of the band", "its kernels' time per call",
      shown=("bands",), header="kernel ms"),
    Metric("bands.rows.pass_median_ms", "ms", "bands", "kernels.pass_median_ms of the band", "its call timed "
      "inside its breakdown's pass"),
    Metric("bands.rows.idle_share", "fraction", "bands", "1 − kernel_ms / pass_median_ms (≥ 0)", "GPU: its "
      "host-bound share: of its call, the time the GPU idled", shown=("bands",), header="GPU idle"),
    Metric("bands.rows.graph_ms", "ms", "bands", "as cuda_graph.ms", "its CUDA-graph device time "
      "(`timing.cuda_graph`)", shown=("bands",), header="graph ms"),
    Metric("bands.rows.note", "", "bands", "", "null, or why kernel_ms or graph_ms is missing", kind="text"),
    Metric("bands.rows.time_share", "fraction", "bands", "median_ms / sum_ms", "its share of the bands' time",
      shown=("bands",), header="time share"),
    Metric("bands.rows.tflops", "TFLOP/s", "bands", "flops / median_ms", "its rate", shown=("bands",),
      header="TFLOP/s"),
    Metric("bands.rows.error", "", "bands", "", "null, or why not ok", kind="text", shown=("bands",), header="error"),
    Metric("host", "", "merge", "", "the host that ran the case (merged runs)", kind="text", optional=True),
    Metric("node", "count", "merge", "", "its node (cluster runs)", optional=True),
    Metric("local_gpu_index", "count", "merge", "", "its GPU on that node (cluster runs)", optional=True),
    # identity read back from the id for runs that lack the fields (results.frame.case_keys)
    Metric("shape", "", "frame", "id without its last `/label`", "the shape: cases on one shape compare", kind="text"),
    Metric("panel", "", "frame", "shape without its `L=` segment", "one plot panel", kind="text"),
    Metric("sweep_label", "", "frame", "`axis=value, ...` of sweep", "the swept values besides L", kind="text"),
)
# fmt: on
TABLES = {m.name for m in METRICS if m.kind == "table"}
# What the run's `workloads` entry holds per workload, and the statistics the report shows.
# fmt: off
WORKLOAD_METRICS: tuple[Metric, ...] = (
    Metric("q_lengths", "tokens", "lengths", "", "every sequence's query length", kind="list"),
    Metric("kv_lengths", "tokens", "lengths", "", "every sequence's key length", kind="list"),
    Metric("family", "", "config", "", "the length family", kind="text", shown=("workloads",), header="length family"),
    Metric("params", "", "config", "", "its parameters", kind="object", shown=("workloads",), header="its parameters",
      fmt="params"),
    Metric("pairing", "", "config", "", "the Q/KV pairing rule", kind="text", shown=("workloads",),
      header="Q/KV pairing"),
    Metric("pairing_params", "", "config", "", "its parameters", kind="object", shown=("workloads",),
      header="its parameters", fmt="params"),
    Metric("stats", "", "lengths", "", "the statistics of the lengths (workloads.stats)", kind="block"),
    _length_stat("B", "count", "", "sequences", "B"),
    _length_stat("total_q", "tokens", "ΣLq", "query rows", "total Q"),
    _length_stat("total_kv", "tokens", "ΣLk", "key rows", "total KV"),
    _length_stat("mean_q", "tokens", "", "mean Lq", "mean Q", fmt="whole"),
    _length_stat("p50_q", "tokens", "", "median Lq", "p50 Q", fmt="whole"),
    _length_stat("p90_q", "tokens", "", "90th percentile of Lq", "p90 Q", fmt="whole"),
    _length_stat("p99_q", "tokens", "", "99th percentile of Lq", "p99 Q", fmt="whole"),
    _length_stat("max_q", "tokens", "", "max Lq", "max Q"),
    _length_stat("mean_kv", "tokens", "", "mean Lk", "mean KV", fmt="whole"),
    _length_stat("p50_kv", "tokens", "", "median Lk"),
    _length_stat("p90_kv", "tokens", "", "90th percentile of Lk"),
    _length_stat("p99_kv", "tokens", "", "99th percentile of Lk"),
    _length_stat("max_kv", "tokens", "", "max Lk", "max KV"),
    _length_stat("padding_waste", "fraction", "1 − ΣLq / (B·max Lq)", "padding of a dense Q layout", "padding waste Q"),
    _length_stat("padding_waste_kv", "fraction", "1 − ΣLk / (B·max Lk)", "padding of a dense KV layout",
      "padding waste KV"),
    _length_stat("flop_waste", "fraction", "1 − Σw / (B·max Lq·max Lk), w = LqLk (causal: kept pairs)",
      "FLOP area a dense layout wastes", "FLOP waste"),
    _length_stat("imbalance", "", "max(w) / mean(w), w = LqLk (causal: kept pairs)",
      "work of the largest sequence over the mean", "imbalance", fmt="frac"),
    _length_stat("top1pct_work_share", "fraction", "", "share of the work in the largest 1% of sequences",
      "top-1% work share"),
    _length_stat("total_work_pairs", "count", "Σ unmasked (q, k) pairs", "the work FLOPs are counted on"),
    _length_stat("lengths_sha256", "", "", "a hash of the Q and KV lengths", kind="text"),
    _length_stat("tile_eff_64", "fraction", TILE_EFF.format(t=64),
      "useful share of the score area at a 64×64 tile (workloads.stats.tile_efficiency)", "tile eff 64"),
    _length_stat("tile_eff_128", "fraction", TILE_EFF.format(t=128), "useful share of the score area at a 128×128 tile",
      "tile eff 128"),
)
# fmt: on


def shown_in(view: str, table: tuple[Metric, ...] | None = None) -> list[Metric]:
    """The rows a report view shows, in order: one per case (`table` None: no table's columns), or
    `table`'s rows (e.g. `table_columns("kernels.rows")`: one per kernel)."""
    rows = [m for m in METRICS if m.block not in TABLES] if table is None else table
    return [m for m in rows if view in m.shown]


def table_columns(name: str) -> tuple[Metric, ...]:
    """The columns of the table `name` (a row of kind table), in order."""
    return tuple(m for m in METRICS if m.block == name)


def frame_columns() -> list[Metric]:
    """The results frame's columns: every row but the blocks, the objects kept whole and a table's columns
    (a table is one column of lists; results.frame.table_frame makes it long)."""
    return [m for m in METRICS if m.kind not in ("block", "object") and m.block not in TABLES]


def metric(name: str) -> Metric:
    """The row `name` of the case table."""
    return next(m for m in METRICS if m.name == name)


def field_reference() -> str:
    """The field reference of docs/DESIGN.md §6, as Markdown (`gdpa-bench fields` prints it)."""

    def table(rows: list[Metric]) -> list[str]:
        out = ["| field | unit | source | formula | description | shown |", "|---|---|---|---|---|---|"]
        for m in rows:
            shown = ", ".join(f'{v} "{m.header}"' for v in m.shown)
            when = " Only where it applies." if m.optional else ""
            cells = [f"`{m.name}`", m.unit, m.source, m.formula, m.description + when, shown]
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return out

    groups = [
        (
            "**cases** — one record per case; a block's keys are `block.key`, a table's columns `table.column`:",
            [m for m in METRICS if m.in_record],
        ),
        (
            "**derived when read** (`results.load_run`'s frame; not in results.json):",
            [m for m in METRICS if not m.in_record],
        ),
        ("**workloads** — per workload name:", list(WORKLOAD_METRICS)),
    ]
    return "\n\n".join(title + "\n\n" + "\n".join(table(rows)) for title, rows in groups)
