"""docs/config-reference.md, generated from the config models (bench.config.models), the length-family and pairing
registries (workloads) and the provider registry, so that it cannot drift from what a config accepts:

    python -m bench.config.reference > docs/config-reference.md
    python -m bench.config.reference --check        # exit 1 when the file differs from what it generates

Each field's type, default and bounds come from its pydantic model; what it means and one example come
from `FIELD_DOCS` below, which tests/test_config_reference.py holds to the models: every field has an
entry, every entry is a field, and every example loads as a config. A family's or pairing rule's
parameters, defaults and allowed values come from its registry.
"""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from bench.config.models import (
    BenchConfig,
    Correctness,
    Environment,
    Hardware,
    Power,
    ProviderEntry,
    Timing,
    WorkloadSet,
)
from bench.config.profiling import Bands, Breakdown, Counters
from kernels.activations import ACTIVATION_NAMES
from kernels.registry import PROVIDER_MODULES, provider_class, provider_names
from workloads import FAMILIES, PAIRINGS, REQUIRED
from workloads import pairing as pairing_module
from workloads.params import allowed_text

DOC = Path(__file__).resolve().parents[2] / "docs" / "config-reference.md"
NAME_RULE = "letters, digits and _ . + - (not starting with . or -)"
SELECTS = "a Python regular expression matching at least one case id"

#: (section title, model, the YAML path of its fields)
MODELS: list[tuple[str, type[BaseModel], str]] = [
    ("Top level", BenchConfig, ""),
    ("hardware", Hardware, "hardware."),
    ("timing", Timing, "timing."),
    ("correctness", Correctness, "correctness."),
    ("power", Power, "power."),
    ("breakdown", Breakdown, "breakdown."),
    ("counters", Counters, "counters."),
    ("bands", Bands, "bands."),
    ("A provider entry (providers: and sets[].providers:)", ProviderEntry, "providers[]."),
    ("A provider's own environment (providers[].environment)", Environment, "providers[].environment."),
    ("A workload set (sets:)", WorkloadSet, "sets[]."),
]

#: dotted field -> (what it does, one example, what is allowed beyond the model's own bounds or "")
FIELD_DOCS: dict[str, tuple[str, Any, str]] = {
    "name": ("Names the run folder (`<output_dir>/<name>-<UTC time>`); default: the file's stem.", "h200", NAME_RULE),
    "description": ("Free text, shown nowhere but the file.", "peer shapes on an H200", ""),
    "device": ("Where the cases run.", "cuda", ""),
    "hardware": ("The GPU the config targets and its ceilings (the table below).", {"power_cap_w": 700}, ""),
    "providers": (
        "The kernels to time: registry names, or entries with a label and options (below). The first is "
        "the default baseline.",
        ["gdpa_triton", "naive_eager"],
        "at least one entry; labels unique",
    ),
    "baseline": ("The provider label speedups are computed against.", "naive_eager", "a label of the config"),
    "modes": ("The passes timed: forward, backward (of a kept graph), or both.", ["fwd", "bwd"], "each mode once"),
    "timing": ("How each case is timed (the table below).", {"rep_ms": 1000}, ""),
    "correctness": ("The correctness gate every case passes before it is timed.", {"tolerance": 0.02}, ""),
    "power": ("NVML power sampling and the energy loop (GPU runs).", {"energy_loop_s": 1.0}, ""),
    "breakdown": ("The kernels one call launches, per case (docs/DESIGN.md §5).", {"enabled": True}, ""),
    "counters": ("Nsight Compute per kernel of selected cases, after the sweep.", {"only": "fwd/"}, ""),
    "bands": ("Selected cases' batches split into length bands, each band timed alone.", {"only": "fwd/"}, ""),
    "output_dir": (
        "Folder the run folders go under (relative: from the current folder).",
        "runs",
        "a path: no NUL, names of at most 255 bytes",
    ),
    "sets": (
        "The workload sets; every list-valued set field is a sweep axis.",
        [{"name": "tiny", "B": 4, "H": 2, "D": 16, "max_len": [24, 40]}],
        "at least one set",
    ),
    "hardware.target": ("The GPU the config was written for; informational.", "H200", ""),
    "hardware.gpu": ("Overrides the detected GPU name for the datasheet table.", "NVIDIA H200", ""),
    "hardware.power_cap_w": ("The power budget reports compare against (W).", 700, ""),
    "hardware.peak_tflops": (
        "Overrides the datasheet dense peak per dtype (TFLOP/s).",
        {"bf16": 989},
        "keys bf16, fp16, fp32; values > 0",
    ),
    "hardware.hbm_tb_s": ("Overrides the datasheet HBM bandwidth (TB/s).", 4.8, ""),
    "hardware.calibrate": ("Measure the GEMM and copy ceilings at the start of a GPU run.", True, ""),
    "hardware.calibrate_seconds": ("How long the sustained GEMM of the calibration runs (s).", 2.0, ""),
    "timing.warmup_ms": ("Warm-up budget before the timed samples (ms).", 25, ""),
    "timing.rep_ms": (
        "The timed window: samples are taken until they add up to this (ms), within [min_reps, max_reps].",
        1000,
        "",
    ),
    "timing.min_reps": ("The fewest timed samples.", 5, "<= max_reps"),
    "timing.max_reps": ("The most timed samples.", 2000, ">= min_reps"),
    "timing.flush_l2": ("Flush the L2 cache before every timed call (GPU).", True, ""),
    "timing.cuda_graph": (
        "Also time each case (and band) by CUDA-graph replay after its samples: its device time without the "
        "host work between calls (`cuda_graph.ms`, beside the event-timed median); a call that cannot be "
        "captured says why (`cuda_graph.error`).",
        True,
        "",
    ),
    "timing.case_timeout_s": (
        "A case still running this long after it started (batch, gate, compile, samples, power, views) is hung: "
        "its worker process is killed, the case recorded failed with the phase it was in, and a fresh worker "
        "goes on (s; enforced where cases run in worker processes; `run --case-timeout S` overrides it).",
        1800,
        "",
    ),
    "correctness.enabled": ("Run the gate (off: cases are timed unchecked).", True, ""),
    "correctness.tolerance": ("Largest relative Frobenius error of any tensor against the fp32 reference.", 0.02, ""),
    "correctness.max_check_seqs": ("Sequences checked: the longest, the shortest, an empty one, then random.", 16, ""),
    "power.enabled": ("Sample NVML power, clocks and throttle reasons (GPU runs).", True, ""),
    "power.period_ms": ("Sampling period of the NVML thread (ms).", 10, ""),
    "power.energy_loop_s": ("Seconds of back-to-back calls whose energy is measured (0: off).", 1.0, ""),
    "power.settle_s": ("Seconds the case runs before the energy window opens (uncounted).", 1.0, ""),
    "power.energy_loop_first": ("Run the energy loop before the timed samples instead of after.", False, ""),
    "power.pause_for_samples": (
        "Pause the sampler while the timed samples run, reading the clock between their chunks (false: sample "
        "through them).",
        True,
        "",
    ),
    "power.overhead_check": (
        "Case ids matching this regex are timed again with the sampler on, off and on.",
        "fwd/L=256/",
        "a Python regular expression",
    ),
    "breakdown.enabled": (
        "Profile the kernels of a call after each case's samples; null: on for GPU runs, off on the CPU.",
        True,
        "",
    ),
    "breakdown.calls": ("Calls profiled per case (after the uncounted warm-up).", 3, ""),
    "breakdown.warm_ms": (
        "Uncounted calls run back to back under the profiler first, for at least this long (ms).",
        200,
        "",
    ),
    "breakdown.trace": (
        "Keep the Kineto trace (Chrome trace JSON) of every profiled case (true) or of the cases a regex "
        "matches, as RUN_DIR/traces/<case id>-<hash>.json, openable in Perfetto (ui.perfetto.dev) or "
        "chrome://tracing; `kernels.trace` names it (a few MB each).",
        "fwd/",
        "true, false, or a Python regular expression matching at least one case id",
    ),
    "counters.only": ("Case ids this regex matches run under Nsight Compute (none: off).", "fwd/", SELECTS),
    "counters.keep": ("Keep the .ncu-rep under RUN_DIR/ncu/.", False, ""),
    "counters.timeout_s": ("Seconds the one ncu child may take for all the selected cases.", 1800, ""),
    "bands.only": ("Case ids this regex matches get their length bands timed (none: off).", "fwd/", SELECTS),
    "bands.edges": (
        "Band edges of min(Lq, Lk): bands [0, e1), [e1, e2), ..., [e_last, ∞); null: 64, 128, 256, ... up to "
        "the batch's longest.",
        [128, 512, 1024],
        "increasing positive integers",
    ),
    "providers[].name": ("The provider's registry name (the list below).", "gdpa_triton", "a registered provider"),
    "providers[].label": (
        "The name its cases carry (default: the name); two entries of one provider need two labels.",
        "gdpa_small_tiles",
        NAME_RULE,
    ),
    "providers[].options": (
        "Provider options, parsed when the config loads (GDPA providers: kernels/gdpa/options.py).",
        {"backend": "triton"},
        "what the provider accepts",
    ),
    "providers[].environment": (
        "Run this entry's cases in a worker process of their own environment (e.g. another Triton build); "
        "null: the harness's own. Its paths are checked, and the environment probed, when a run starts.",
        {"prepend_path": ["/tmp/fbtriton-site"]},
        "not with --isolation none or bench.run",
    ),
    "providers[].environment.python": (
        "Another interpreter (a venv made with --system-site-packages sees the harness's packages); `~` expanded, "
        "relative: the repository root's, links kept.",
        "~/venvs/fbtriton/bin/python",
        "an executable with torch and the harness's requirements",
    ),
    "providers[].environment.prepend_path": (
        "Site folders put first on the worker's PYTHONPATH (e.g. `pip install --target DIR fbtriton==3.6.1`: Meta's "
        "Triton fork installs as `triton`).",
        ["/tmp/fbtriton-site"],
        "existing folders",
    ),
    "sets[].name": ("Starts every case id of the set.", "set1", NAME_RULE),
    "sets[].B": ("Sequences per batch.", 1152, ""),
    "sets[].H": ("Query heads.", 4, "a multiple of Hkv"),
    "sets[].Hkv": ("Key/value heads (GQA); default H.", 2, "divides H"),
    "sets[].D": ("Head dimension.", 128, ""),
    "sets[].dtype": ("Element type of q, k, v.", "bf16", ""),
    "sets[].activation": (
        "The GDPA activation (softmax providers ignore it); a list sweeps.",
        "fast_gelu",
        "one of " + ", ".join(ACTIVATION_NAMES),
    ),
    "sets[].alpha": ("Scale of QKᵀ before the activation.", 1.0, "a finite number"),
    "sets[].qk_scale": ("Scale after the activation.", 1.0, "a finite number"),
    "sets[].causal": ("Causal mask (j <= i, top-left aligned).", False, ""),
    "sets[].max_len": ("The largest sequence length N the family draws; a list sweeps.", [256, 512], "integers >= 1"),
    "sets[].lengths": (
        "The length family and its parameters (below); a list-valued parameter sweeps.",
        {"family": "uniform_fill", "fill": [0.5, 1.0]},
        "a family of the list below",
    ),
    "sets[].kv": (
        "The Q/KV pairing rule and its parameters (below).",
        {"rule": "fixed_kv", "kv_len": 256},
        "a rule of the list below",
    ),
    "sets[].seed": ("Seed of the lengths and the tensors; a list sweeps.", 0, "integers in [0, 2**63 - 1]"),
    "sets[].sort_by_length": ("Order sequences by descending work Lq·Lk; a list sweeps.", False, ""),
    "sets[].modes": ("This set's modes (default: the top-level modes).", ["fwd"], "each mode once"),
    "sets[].providers": (
        "This set's providers (default: the top level's); a plain name reuses a top-level label.",
        ["gdpa_triton"],
        "at least one entry",
    ),
}

#: one example per length family and pairing rule (each must pass its registry's checks)
FAMILY_EXAMPLES = {
    "uniform_fill": {"fill": 0.5},
    "hstu_sl": {"fill": 1.0, "alpha": 1.8},
    "lognormal": {"preset": "ml-20m", "min_len": 1},
    "zipf": {"gamma": 2.0},
    "spike": {"p": 0.02, "base": "lognormal", "preset": "ml-20m"},
    "empirical": {"path": "lengths.txt"},
}
PAIRING_EXAMPLES = {
    "self": {},
    "fixed_kv": {"kv_len": 256},
    "target_history": {"max_targets": 16},
    "seeds": {"num_seeds": 4},
}


# ----------------------------------------------------------------------------------------------- text


def type_text(annotation: Any) -> str:
    """A field's type as a config writer reads it (`int or list of int`, `fwd, bwd or fwd_bwd`)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(map(str, args))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        parts = [type_text(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {type_text(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping (below)"
    return getattr(annotation, "__name__", str(annotation))


def bounds_text(field_info) -> str:
    words = []
    for m in field_info.metadata:
        for cls, sym in ((Gt, ">"), (Ge, ">="), (Lt, "<"), (Le, "<=")):
            if isinstance(m, cls):
                words.append(f"{sym} {_number(getattr(m, next(iter(cls.__dataclass_fields__))))}")
        if isinstance(m, MinLen) and m.min_length:
            words.append(f"at least {m.min_length} long")
        if isinstance(m, MaxLen):
            words.append(f"at most {m.max_length} long")
    return ", ".join(words)


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def default_text(field_info) -> str:
    if field_info.is_required():
        return "required"
    value = field_info.default_factory() if field_info.default_factory else field_info.default
    if value is PydanticUndefined or value is None:
        return "null"
    if isinstance(value, BaseModel):
        return "(below)"
    return _yaml(value)


def _yaml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return str(value)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def model_table(model: type[BaseModel], prefix: str) -> list[str]:
    lines = ["| field | type | default | allowed | example | what it does |", "|---|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        what, example, allowed = FIELD_DOCS[prefix + name]
        allowed = "; ".join(x for x in (bounds_text(info), allowed) if x) or "—"
        cells = [f"`{name}`", type_text(info.annotation), f"`{default_text(info)}`", allowed, f"`{_yaml(example)}`"]
        lines.append("| " + " | ".join(_cell(c) for c in [*cells, what]) + " |")
    return lines


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def registry_sections() -> list[str]:
    out = ["## Length families (`lengths: {family: ..., <parameters>}`)", ""]
    out += [
        "Every parameter may be a list: a sweep axis. `max_len` (N) bounds what a family draws.",
        "",
        "| family | parameter | default | allowed | example | what it is |",
        "|---|---|---|---|---|---|",
    ]
    for name, fam in FAMILIES.items():
        example = _yaml({"family": name, **FAMILY_EXAMPLES[name]})
        first = True
        for pname, p in fam.params.items():
            default = "required" if p.default is REQUIRED else _yaml(p.default if p.default is not None else "null")
            what = _first_paragraph(fam.sample.__doc__) if first else ""
            cells = [f"`{name}`" if first else "", f"`{pname}`", f"`{default}`", allowed_text(p.check)]
            cells += [f"`{example}`" if first else "", what]
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
            first = False
        if fam.open_params:
            out.append("| | (any) | | the base family's parameters | | forwarded to `base` |")
    out += ["", "## Q/KV pairing rules (`kv: {rule: ..., <parameters>}`)", ""]
    out += ["| rule | parameter | default | allowed | example | what it is |", "|---|---|---|---|---|---|"]
    meaning = {  # workloads.pairing's docstring lists each rule as "- `rule`: Lq = ..., Lk = ... (what for)"
        m.group(1): " ".join(m.group(2).split())
        for m in re.finditer(r"^- `(\w+)`:\s+(.+)$", pairing_module.__doc__ or "", re.M)
    }
    for rule, pairing in PAIRINGS.items():
        example = _yaml({"rule": rule, **PAIRING_EXAMPLES[rule]})
        what = _first_paragraph(pairing.pair.__doc__) or meaning.get(rule, "")
        specs = pairing.params or {"": None}
        for i, (pname, p) in enumerate(specs.items()):
            if p is None:
                cells = [f"`{rule}`", "—", "", "", f"`{example}`", what]
            else:
                default = "required" if p.default is REQUIRED else str(p.default)
                allowed = allowed_text(p.check) + (", or max_len" if p.default == "max_len" else "")
                cells = [f"`{rule}`" if i == 0 else "", f"`{pname}`", f"`{default}`", allowed]
                cells += [f"`{example}`", what] if i == 0 else ["", ""]
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return out


def provider_section() -> list[str]:
    out = ["## Providers (`providers: [name, ...]`)", "", "| name | semantics | what it runs |", "|---|---|---|"]
    built_in = []
    for name in provider_names():
        cls = provider_class(name)
        module = next((m for m in PROVIDER_MODULES if cls.__module__.startswith(m)), None)
        if module is not None:  # a module added through GDPA_BENCH_PROVIDERS is not part of the reference
            built_in.append((PROVIDER_MODULES.index(module), name, cls))
    for _, name, cls in sorted(built_in):  # module order, then name: not the order modules were imported
        out.append(f"| `{name}` | {cls.semantics} | {_cell(' '.join(cls.description.split()))} |")
    return out


#: (what it is, file name, its content, the family's parameters besides path, the lengths it gives)
EMPIRICAL_EXAMPLES = [
    (
        "A text file of integers, separated by whitespace, commas or newlines; `#` starts a comment (a `.csv` "
        "file without `column` / `user_column` is read this way too).",
        "lengths.txt",
        "# one length per user\n12 40 7\n3\n",
        {},
        [12, 40, 7, 3],
    ),
    (
        "A column of lengths in a CSV, TSV (`.tsv`) or Parquet (`.parquet`, `.pq`) table with a header row: "
        "`column` names it (a one-column Parquet file needs none).",
        "users.csv",
        "user,history_len\n1,12\n2,40\n3,0\n",
        {"column": "history_len"},
        [12, 40],
    ),
    (
        "An interaction log, one row per event: `user_column` names the user id, and each user's row count is "
        "one length (MovieLens ratings.csv with `user_column: userId` gives the histories the lognormal "
        "presets were fitted to).",
        "ratings.csv",
        "userId,movieId\n1,10\n1,11\n2,10\n1,12\n",
        {"user_column": "userId"},
        [3, 1],
    ),
]


def empirical_section() -> list[str]:
    out = ["## The empirical lengths file (`lengths: {family: empirical, path: ...}`)", ""]
    out += [
        "Relative paths are taken from the config file's folder. The file is read once per process; zero "
        "lengths are dropped, lengths above `max_len` are clipped to it (a truncated history), and each "
        "workload resamples the lengths with replacement from its seed. Digits must be ASCII: a token in "
        "another script (`٣`) is refused, not read as 3. Anything else — a missing or unreadable file, a "
        "folder or FIFO, an empty file, a missing column, a word, a fraction, a negative or out-of-range "
        "value — is one error line naming the file, the line or row, and what is allowed.",
        "",
    ]
    for what, name, content, params, lengths in EMPIRICAL_EXAMPLES:
        config = _yaml({"family": "empirical", "path": name, **params})
        out += [f"- {what} `lengths: {config}` with `{name}`:", "", "  ```", *[f"  {x}" for x in content.splitlines()]]
        out += ["  ```", "", f"  gives the lengths {', '.join(map(str, lengths))}.", ""]
    return out


def generate() -> str:
    out = [
        "# Config reference",
        "",
        "<!-- generated by `python -m bench.config.reference > docs/config-reference.md`; do not edit by hand -->",
        "",
        "A config is a YAML file (or, in `bench.run`, a dict with the same fields). Unknown fields are errors; "
        "a bad value is one line naming the file, the field and what is allowed (exit 2). Example configs: "
        "`configs/smoke.yaml` (CPU), `configs/h200.yaml`, `configs/b200.yaml`.",
        "",
    ]
    for title, model, prefix in MODELS:
        out += [f"## {title}", "", *model_table(model, prefix), ""]
    out += [*registry_sections(), "", *provider_section(), "", *empirical_section()]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = generate()
    if argv == ["--check"]:
        if DOC.is_file() and DOC.read_text(encoding="utf-8") == text:
            return 0
        print(f"{DOC}: out of date; regenerate: python -m bench.config.reference > {DOC}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
