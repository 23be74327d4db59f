"""The stages of a split plan run at once: each on a CUDA stream of its own, joined back to the caller's.

A plan of several launches (plan.py: e.g. Triton over the sequences shorter than 1024, Hopper over the rest)
ran them one after the other on the caller's stream, so each launch's tail — the last wave, where most SMs
idle while a few CTAs finish — was paid in full, once per stage. On the H200's log-normal 2048 forward
(docs/example-h200-production, 2026-12-03) the split plan's two launches took 0.604 ms where the kernels of
its four length bands, each band run alone by the op (its own plan), add up to 0.531: part of that gap is the
launches' tails and the gap between them, which running the stages at once can win back (the other stage's
CTAs fill the SMs a tail leaves idle). Measured since (an H100, 2026-12-06, docs/experiments/split_stages_gpu.py;
kernels/gdpa/PERF.md "The split forward taken apart"): at once is within 0.9% of in order on every split forward
plan of the production sets, and both are their stages alone summed — the Hopper stage's CTAs fill every SM, so the
other stage's CTAs wait for its tail; that gap came from the bands' own plans, not the tails. At once stays the
default: it costs nothing measurable and keeps the stages' order out of the caller's way.

How: the outputs are made once, before any stage (every backend writes exactly its band's rows of them and
nothing else: backends.py), the side streams wait for the caller's stream (the inputs and the outputs'
allocation are ordered before them), the stage with the most work goes first on a side stream, the rest
follow on the others and on the caller's stream, and the caller's stream waits for every side stream before
the call returns. So to the caller the pass is one stream-ordered operation, as before: memory the caller
frees afterwards is reused only after every stage is done, and a CUDA graph capture sees the fork and the
join (side streams that wait on the capturing stream are captured with it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

_SIDE: dict[int, list[torch.cuda.Stream]] = {}  # device index -> side streams, made once and reused


def applies(device: torch.device) -> bool:
    """Streams exist on CUDA devices only: elsewhere (the CPU interpreter) the stages run in band order."""
    return device.type == "cuda"


def side_streams(device: torch.device, n: int) -> list[torch.cuda.Stream]:
    """`n` side streams of `device` (created on first use, kept for the process)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    streams = _SIDE.setdefault(index, [])
    while len(streams) < n:
        streams.append(torch.cuda.Stream(device=index))
    return streams[:n]


def run_concurrently(device: torch.device, launches: Sequence[Callable[[], object]]) -> None:
    """Run `launches` (each enqueues one stage into outputs made before) at once: the first on a side
    stream, each next one on another, the last on the caller's stream; the caller's stream then waits for
    every side stream. Order them heaviest first: the first launched takes the SMs first."""
    main = torch.cuda.current_stream(device)
    sides = side_streams(device, len(launches) - 1)
    try:
        for side, launch in zip(sides, launches[:-1], strict=True):
            side.wait_stream(main)
            with torch.cuda.stream(side):
                launch()
        launches[-1]()
    finally:
        # joined even when a stage raised: a side stream's kernels may still write outputs the caller's stream
        # frees with the error, and a later allocation there would be overwritten (the op-entry review)
        for side in sides:
            main.wait_stream(side)
