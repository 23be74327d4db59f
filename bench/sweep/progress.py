"""Progress in a terminal: one live tqdm bar, with each finished case printed above it (`tqdm.write`).

Printing with plain `print` while a bar is drawn leaves a copy of the bar behind on every line; writing
through the bar clears it, prints the line and redraws it once. Without a bar (`--no-progress`, the
shard workers whose stdout a parent reads) lines go to the plain log function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from tqdm import tqdm

from results.rates import rate


class Progress:
    def __init__(self, total: int, enabled: bool, log: Callable[[str], object] = print, file: IO | None = None):
        self.log = log
        self.bar = None
        if enabled:
            self.bar = tqdm(total=total, unit="case", dynamic_ncols=True, leave=True, file=file)
        self.file = file

    def write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=self.file)
        else:
            self.log(line)

    def started(self, case_id: str) -> None:
        if self.bar is not None:
            self.bar.set_description(case_id, refresh=False)

    def finished(self, line: str, counts: dict[str, int]) -> None:
        self.write(line)
        if self.bar is not None:
            self.bar.set_postfix(counts, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def format_rate(tflops: float | None) -> str:
    """A case's rate for a log line in the unit its size reads in (results.rates: 612.3 TFLOP/s on a GPU,
    1.728 MFLOP/s for an interpreted kernel on a CPU — the report's tables read the same), never a bare "0.0"."""
    if tflops is None:
        return "—"
    return rate(tflops)
