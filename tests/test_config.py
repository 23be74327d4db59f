"""Config validation: every bad input is one line naming the file and the field, exit code 2."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.cli.parser import main
from bench.config.models import load_config
from bench.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

GOOD = """
name: t
device: cpu
providers: [naive_eager]
modes: [fwd]
sets:
  - name: s
    B: 2
    H: 2
    D: 16
    dtype: fp32
    max_len: [8, 16]
    lengths: {family: uniform_fill, fill: [0.5, 1.0]}
    kv: {rule: fixed_kv}
"""


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_good_config_expands_sweep(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    ids = [c.id for c in cfg.cases]
    assert ids == [
        "s/fwd/L=8/fill=0.5/naive_eager",
        "s/fwd/L=8/fill=1.0/naive_eager",
        "s/fwd/L=16/fill=0.5/naive_eager",
        "s/fwd/L=16/fill=1.0/naive_eager",
    ]
    w = cfg.cases[2].workload
    assert w.rule_params == {"kv_len": 16}  # fixed_kv defaults to the max length (peer set 1)
    assert cfg.model.baseline == "naive_eager"


@pytest.mark.parametrize("config", ["b200.yaml", "h200.yaml", "smoke.yaml", "ci.yaml", "production.yaml"])
def test_shipped_configs_load(config):
    cfg = load_config(ROOT / "configs" / config)
    assert cfg.cases


def test_b200_reproduces_peer_benchmark():
    cfg = load_config(ROOT / "configs" / "b200.yaml")
    m = cfg.model
    assert m.hardware.power_cap_w == 750
    assert set(m.modes) == {"fwd", "bwd", "fwd_bwd"}
    set1, set2 = m.sets
    for s in (set1, set2):
        assert (s.B, s.H, s.D, s.dtype, s.activation) == (1152, 4, 128, "bf16", "fast_gelu")
        assert s.max_len == [256, 512, 1024, 2048]
    assert set1.lengths == {"family": "uniform_fill", "fill": [0.5, 1.0]}
    assert set2.kv == {"rule": "fixed_kv", "kv_len": 256}
    shapes = {c.workload.name for c in cfg.cases}
    assert len(shapes) == 12  # the 12 peer shapes
    assert "set1/L=1024/fill=1.0" in shapes and "set2/L=2048" in shapes
    assert load_config(ROOT / "configs" / "h200.yaml").model.hardware.power_cap_w == 700


BAD = [
    ("unknown key", GOOD.replace("name: t\n", "name: t\nbogus: 1\n"), "bogus: unknown field"),
    ("unknown nested key", GOOD.replace("    B: 2\n", "    B: 2\n    Bee: 3\n"), "sets.s.Bee: unknown field"),
    ("wrong type", GOOD.replace("    B: 2\n", "    B: two\n"), "sets.s.B"),
    ("non-positive", GOOD.replace("    B: 2\n", "    B: 0\n"), "sets.s.B: Input should be greater than 0"),
    ("bad max_len", GOOD.replace("max_len: [8, 16]", "max_len: [8, -1]"), "sets.s.max_len"),
    (
        "unknown activation",
        GOOD.replace("    dtype: fp32\n", "    dtype: fp32\n    activation: swish\n"),
        "unknown activation 'swish'; allowed: raw",
    ),
    ("unknown provider", GOOD.replace("[naive_eager]", "[naive_eager, flashy]"), "unknown provider 'flashy'; allowed:"),
    ("unknown mode", GOOD.replace("modes: [fwd]", "modes: [fwd, sideways]"), "modes.1"),
    ("fill above 1", GOOD.replace("fill: [0.5, 1.0]", "fill: [0.5, 1.5]"), "fill"),
    ("fill zero", GOOD.replace("fill: [0.5, 1.0]", "fill: 0"), "fill"),
    ("heads", GOOD.replace("    H: 2\n", "    H: 3\n    Hkv: 2\n"), "H (3) must be a multiple of Hkv (2)"),
    ("unknown family", GOOD.replace("uniform_fill", "gaussian"), "gaussian"),
    ("unknown rule", GOOD.replace("rule: fixed_kv", "rule: sideways"), "sideways"),
    ("unknown dtype", GOOD.replace("dtype: fp32", "dtype: fp8"), "sets.s.dtype"),
    ("not yaml", "a: [1, 2\n", "not valid YAML"),
    ("not a mapping", "- 1\n- 2\n", "top level must be a mapping"),
]


@pytest.mark.parametrize("label,text,expected", BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_one_clear_line(tmp_path, capsys, label, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert "\n" not in msg
    assert str(path) in msg
    assert expected in msg, msg
    # and through the CLI: exit 2, the same line, no traceback
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


def test_missing_config_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert "nope.yaml: config file not found" in err


def test_bad_cli_options(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    assert main(["run", str(path), "--providers", "nosuch"]) == 2
    assert "--providers: unknown provider 'nosuch'" in capsys.readouterr().err
    assert main(["run", str(path), "--only", "(unclosed"]) == 2
    assert "--only: not a valid regular expression" in capsys.readouterr().err
    assert main(["run", str(path), "--only", "matches-nothing"]) == 2
    assert "no case matches" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    assert "no results.json" in capsys.readouterr().err


def test_cli_bad_input_subprocess_has_no_traceback(tmp_path):
    path = write(tmp_path, GOOD.replace("B: 2", "B: -3"))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "sets.s.B" in proc.stderr


# ------------------------------------------------------------------------------- provider entries


def test_provider_entries_with_labels_and_options(tmp_path):
    import tests_support_providers  # noqa: F401  (registers test_tunable)

    text = GOOD.replace(
        "providers: [naive_eager]",
        """providers:
  - naive_eager
  - {name: test_tunable, label: tunable_x2, options: {scale: 2}}
baseline: tunable_x2""",
    )
    text = text.replace(
        "    kv: {rule: fixed_kv}\n",
        """    kv: {rule: fixed_kv}
  - name: t
    B: 2
    H: 2
    D: 16
    dtype: fp32
    max_len: 8
    providers: [tunable_x2, {name: test_tunable, label: tunable_x3, options: {scale: 3}}, test_tunable]
""",
    )
    cfg = load_config(write(tmp_path, text))
    assert cfg.model.baseline == "tunable_x2"
    assert list(cfg.providers) == ["naive_eager", "tunable_x2", "tunable_x3", "test_tunable"]
    assert cfg.providers["tunable_x3"].options == {"scale": 3} and cfg.providers["tunable_x3"].name == "test_tunable"
    ids = [c.id for c in cfg.cases]
    assert "s/fwd/L=8/fill=0.5/tunable_x2" in ids and "t/fwd/L=8/tunable_x3" in ids and "t/fwd/L=8/test_tunable" in ids
    case = next(c for c in cfg.cases if c.id == "t/fwd/L=8/tunable_x3")
    assert (case.label, case.provider.name, case.provider.options) == ("tunable_x3", "test_tunable", {"scale": 3})
    from bench.config.selection import select_cases

    picked = select_cases(cfg, None, "tunable_x2,tunable_x3")
    assert {c.label for c in picked} == {"tunable_x2", "tunable_x3"}


PROVIDER_ERRORS = [
    (
        "bad option",
        "providers: [naive_eager, {name: test_tunable, options: {speed: 9}}]",
        "providers.1.options: test_tunable: unknown option 'speed'; allowed: scale",
    ),
    (
        "options on a provider without any",
        "providers: [{name: naive_eager, options: {x: 1}}]",
        "providers.0.options: naive_eager: takes no options, got 'x'",
    ),
    (
        "duplicate label",
        "providers: [naive_eager, {name: test_tunable, label: naive_eager}]",
        "providers.1: the label 'naive_eager' is used twice",
    ),
    ("label with a slash", "providers: [{name: naive_eager, label: a/b}]", "providers.0.label: label 'a/b'"),
    ("unknown key in an entry", "providers: [{name: naive_eager, lable: x}]", "providers.0.lable: unknown field"),
    ("unknown provider in an entry", "providers: [{name: flashy, label: f}]", "providers.0: unknown provider 'flashy'"),
    (
        "baseline not a label",
        "providers: [naive_eager]\nbaseline: reference",
        "baseline: 'reference' is not one of the config's providers; allowed: naive_eager",
    ),
]


@pytest.mark.parametrize("label,providers,expected", PROVIDER_ERRORS, ids=[e[0] for e in PROVIDER_ERRORS])
def test_bad_provider_entry_is_one_line_at_load(tmp_path, capsys, label, providers, expected):
    import tests_support_providers  # noqa: F401

    path = write(tmp_path, GOOD.replace("providers: [naive_eager]", providers))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(exc.value) == f"{path}: {expected}" or (str(exc.value).startswith(f"{path}: {expected}")), exc.value
    assert main(["run", str(path)]) == 2
    assert expected in capsys.readouterr().err


def test_set_label_redefined_with_other_options(tmp_path):
    import tests_support_providers  # noqa: F401

    text = GOOD.replace("providers: [naive_eager]", "providers: [{name: test_tunable, label: tt, options: {scale: 2}}]")
    text = text.replace(
        "    kv: {rule: fixed_kv}\n",
        "    kv: {rule: fixed_kv}\n    providers: [{name: test_tunable, label: tt, options: {scale: 5}}]\n",
    )
    with pytest.raises(
        ConfigError, match=r"sets\.s\.providers\.0: the label 'tt' is already defined with other options"
    ):
        load_config(write(tmp_path, text))


def test_config_as_a_dict_is_validated_like_yaml(tmp_path):
    import yaml

    data = yaml.safe_load(GOOD)
    cfg = load_config(data)
    assert [c.id for c in cfg.cases] == [c.id for c in load_config(write(tmp_path, GOOD)).cases]
    assert str(cfg.path) == "<config dict>" and cfg.name == "t" and cfg.data == data
    data["sets"][0]["B"] = 0
    with pytest.raises(ConfigError) as exc:
        load_config(data)
    assert str(exc.value) == "<config dict>: sets.s.B: Input should be greater than 0"


def test_duplicate_keys_are_refused_but_yaml_merge_keys_may_override(tmp_path):
    # a key twice, even inside one flow mapping, is a mistake PyYAML would resolve silently (the last wins)
    dup = GOOD.replace("    B: 2\n", "    B: 2\n    lengths: {family: uniform_fill, fill: 1.0, fill: 0.5}\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: not valid YAML \(line 9\): the key 'fill' appears twice"):
        load_config(write(tmp_path, dup.replace("    lengths: {family: uniform_fill, fill: [0.5, 1.0]}\n", "")))
    # `<<: *anchor` then an explicit key is YAML's way to override: allowed
    merged = GOOD.replace("    kv: {rule: fixed_kv}\n", "    kv:\n      <<: &kv {rule: fixed_kv}\n      rule: self\n")
    cfg = load_config(write(tmp_path, merged, "m.yaml"))
    assert cfg.cases[0].workload.rule == "self"


def test_power_settle_default_and_bounds(tmp_path):
    assert load_config(write(tmp_path, GOOD)).model.power.settle_s == 1.0
    with pytest.raises(ConfigError, match=r"power\.settle_s"):
        load_config(write(tmp_path, GOOD + "power: {settle_s: -1}\n"))
