"""Which of a config's cases a command runs: `--only REGEX`, `--providers a,b` (labels), `--case-list`.

Shared by `run`, `list`, `profile`, `submit` and the Python API; a bad value is a one-line `UsageError`.
"""

from __future__ import annotations

from bench.config.cases import Case, select
from bench.config.models import LoadedConfig
from bench.errors import CLI, Spelling, UsageError
from kernels.registry import provider_names
from support.inputs import InputError, MiB, read_regular
from support.suggest import did_you_mean
from support.text import regex_error


def parse_labels(cfg: LoadedConfig, providers: str | list[str] | None, spelling: Spelling = CLI) -> list[str] | None:
    """`--providers a,b` as a list, each a provider label of the config (a registered provider the config does
    not name has no case to select: it is said so, not listed as allowed)."""
    if providers is None:
        return None
    wanted = [p.strip() for p in providers.split(",")] if isinstance(providers, str) else list(providers)
    allowed = list(cfg.providers)
    unknown = [p for p in wanted if p not in allowed]
    if unknown:
        known = " (a registered provider, but not one of this config's)" if unknown[0] in provider_names() else ""
        raise UsageError(
            f"{spelling.name('providers')}: unknown provider {unknown[0]!r}{known}; allowed: {', '.join(allowed)}"
            + did_you_mean(unknown[0], allowed)
        )
    return wanted


def select_cases(
    cfg: LoadedConfig, only: str | None, providers: str | list[str] | None, spelling: Spelling = CLI
) -> list[Case]:
    """The config's cases filtered by --only/--providers, with one-line errors for bad values (naming the
    options as `spelling` does: the command line's, or bench.run's keywords)."""
    labels = parse_labels(cfg, providers, spelling)
    if only:
        if (why := regex_error(only)) is not None:
            raise UsageError(f"{spelling.name('only')}: not a valid regular expression: {why}")
    cases = select(cfg.cases, only, labels)
    if not cases:
        raise UsageError(f"{cfg.path}: {_no_match(cfg, only, labels, spelling)}")
    return cases


def _no_match(cfg: LoadedConfig, only: str | None, labels: list[str] | None, spelling: Spelling) -> str:
    """Why nothing was selected, with what there is to choose from: `--providers gdpa,fa4` on a config
    without them said only "no case matches"."""
    given = [spelling.arg("only", only)] if only else []
    if labels is not None:
        given.append(spelling.arg("providers", ",".join(labels)))
    hints = []
    if labels is not None:
        hints.append(f"the config's providers: {', '.join(cfg.providers)}")
    if only and cfg.cases:
        hints.append(f"its case ids look like {cfg.cases[0].id!r} (`gdpa-bench list CONFIG` prints them)")
    return f"no case matches {' with '.join(given) or 'the selection'}" + "".join(f"; {h}" for h in hints)


def restrict_to_list(cfg: LoadedConfig, cases: list[Case], case_list: str) -> list[Case]:
    """The cases whose ids a `--case-list` file names (one per line: a shard's assignment)."""
    try:
        text = read_regular(case_list, kind="a file of case ids", max_bytes=64 * MiB, what=f"--case-list {case_list}")
    except InputError as exc:
        raise UsageError(str(exc)) from None
    wanted = {line for line in text.decode("utf-8", "replace").splitlines() if line.strip()}  # one id a line
    unknown = wanted - {c.id for c in cfg.cases}
    if unknown:
        raise UsageError(
            f"--case-list {case_list}: {len(unknown)} id(s) not in {cfg.path}, e.g. {sorted(unknown)[0]!r}"
        )
    cases = [c for c in cases if c.id in wanted]
    if not cases:
        raise UsageError(f"--case-list {case_list}: none of its cases matches --only/--providers")
    return cases
