"""docs/config-reference.md cannot drift from what a config accepts (issue 25): it is what
`python -m bench.config.reference` generates from the models and registries, every model field is
documented (and nothing else), every example loads, and README links it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from bench.config import reference as ref
from bench.config.models import load_config
from workloads import FAMILIES, PAIRINGS, check_family_params, check_pairing_params, load_lengths

ROOT = Path(__file__).resolve().parents[1]
BASE = {
    "device": "cpu",
    "providers": ["naive_eager", "gdpa_triton"],
    "modes": ["fwd"],
    "sets": [{"name": "s", "B": 4, "H": 4, "D": 16, "dtype": "fp32", "max_len": 8}],
}


def test_the_committed_reference_is_what_the_models_generate():
    assert ref.DOC.read_text(encoding="utf-8") == ref.generate(), "regenerate: python -m bench.config.reference"


def test_every_field_is_documented_and_every_entry_is_a_field():
    fields = {prefix + name for _, model, prefix in ref.MODELS for name in model.model_fields}
    assert fields == set(ref.FIELD_DOCS), fields ^ set(ref.FIELD_DOCS)
    for key, (what, _, _) in ref.FIELD_DOCS.items():
        assert what.strip().endswith(".") and len(what) > 10, key
        assert f"`{key.rsplit('.', 1)[-1]}`" in ref.DOC.read_text(encoding="utf-8"), key


def _with(key: str, example) -> dict:
    cfg = copy.deepcopy(BASE)
    if key.startswith("providers[]."):
        field = key.removeprefix("providers[].")
        outer, _, inner = field.partition(".")  # a field of a mapping inside the entry (environment.python)
        value = {inner: example} if inner else example
        cfg["providers"] = [{"name": "gdpa_triton", outer: value} if field != "name" else {"name": example}]
    elif key.startswith("sets[]."):
        cfg["sets"][0][key.removeprefix("sets[].")] = example
    elif "." in key:
        section, field = key.split(".")
        cfg[section] = {field: example}
    else:
        cfg[key] = example
    return cfg


@pytest.mark.parametrize("key", sorted(ref.FIELD_DOCS))
def test_every_example_loads(key):
    load_config(_with(key, ref.FIELD_DOCS[key][1]))


def test_every_family_and_pairing_rule_has_a_valid_example():
    assert set(ref.FAMILY_EXAMPLES) == set(FAMILIES) and set(ref.PAIRING_EXAMPLES) == set(PAIRINGS)
    for family, params in ref.FAMILY_EXAMPLES.items():
        if family != "empirical":  # its file is checked below
            check_family_params(family, params, max_len=1024)
    for rule, params in ref.PAIRING_EXAMPLES.items():
        check_pairing_params(rule, params)


def test_the_empirical_examples_give_the_lengths_they_show(tmp_path):
    for _, name, content, params, lengths in ref.EMPIRICAL_EXAMPLES:
        (tmp_path / name).write_text(content)
        assert load_lengths(tmp_path / name, **params).tolist() == lengths, name


def test_readme_links_the_reference():
    assert "docs/config-reference.md" in (ROOT / "README.md").read_text()
