"""Write a copy of a config with some fields changed, for a run that must fit a time budget.

    python docs/experiments/derive_config.py configs/production.yaml runs/production-fast.yaml \
        timing.rep_ms=500 power.settle_s=0.5 power.energy_loop_s=0.5

Each change is `dotted.key=value` (the value read as YAML: numbers, lists, null); missing sections are
created, and a misspelt key fails when the copy is loaded (the config models refuse unknown fields). The
copy keeps the original's `name`, and its description says what changed; the run's meta records the copy's
path and content. Relative paths inside the config resolve from the copy's folder: use it for configs
without relative paths, or write the copy beside the original.
"""

from __future__ import annotations

import sys

import yaml


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: derive_config.py CONFIG OUT [dotted.key=value ...]", file=sys.stderr)
        return 2
    source, target, changes = argv[0], argv[1], argv[2:]
    with open(source) as fh:
        data = yaml.safe_load(fh)
    for change in changes:
        dotted, _, text = change.partition("=")
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        if not isinstance(node, dict):
            print(f"derive_config: {dotted}: not a mapping in {source}", file=sys.stderr)
            return 2
        node[leaf] = yaml.safe_load(text)
    data["description"] = f"{data.get('description', '')} [derived: {' '.join(changes)}]"
    with open(target, "w") as fh:
        yaml.safe_dump(data, fh, sort_keys=False)
    print(f"{target}: {source} with {' '.join(changes) or 'no changes'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
