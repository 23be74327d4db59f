"""The NVML sampler as a process of its own (docs/DESIGN.md §5): `python bench/monitor/child.py INDEX PERIOD_MS
[NVML_SPEC]`, started and spoken to by bench.monitor.remote.

Why a process: a sampler thread in the interpreter that makes the timed calls takes the GIL every period,
and a call whose host time is close to its GPU time waits for it (on the H200 the same kernel timed p20
0.244 ms and p80 0.343 ms with the thread running, issue 31). Here the reads run in another interpreter;
the timed process only talks to it between its timed regions.

It runs as a plain script, not `-m bench...`: it loads bench/monitor/nvml.py by path, so it never imports the
harness (no torch, no pandas): it starts in tens of milliseconds and holds a few MB.

Protocol: requests on stdin, replies on stdout, each a pickled object behind its 8-byte length. A request
is a tuple (op, *args); every reply is a dict with the samples taken since the last reply (`samples`: the
columns as array bytes), `sampling` and `error`. Ops: `start` / `stop` sampling, `energy` (bool: read the
energy counter with each sample), `pull`, `quit`. The first reply, unasked, says whether NVML opened
(`available`, `unavailable_reason`). End of stdin (the parent gone, however it ended) ends the process;
SIGINT and SIGTERM are ignored, so Ctrl-C of the sweep cannot lose the samples not yet pulled.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import pickle
import select
import signal
import struct
import sys
import time
from array import array
from pathlib import Path

HEADER = struct.Struct("<Q")
# the sampler's columns and their array type codes (bench.monitor.sampler keeps the same arrays)
COLUMNS = (("t", "d"), ("power", "d"), ("sm", "i"), ("mem", "i"), ("temp", "i"), ("mask", "q"))
COLUMNS += (("energy", "q"), ("energy_t", "d"))


def send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def read_exactly(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int):
    """The next message on `fd`, or None at its end."""
    head = read_exactly(fd, HEADER.size)
    if head is None:
        return None
    body = read_exactly(fd, HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def load_nvml_module():
    """bench/monitor/nvml.py, loaded by path (its only import of the project is support.text)."""
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    spec = importlib.util.spec_from_file_location("gdpa_bench_monitor_nvml", Path(__file__).with_name("nvml.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resolve(spec: str | None):
    """None: pynvml (NvmlDevice imports it); "module:attr": a stand-in (tests), called when callable."""
    if not spec:
        return None
    module, _, attr = spec.partition(":")
    obj = getattr(importlib.import_module(module), attr)
    return obj() if callable(obj) else obj


class Sampler:
    def __init__(self, nvml_module, index: int, period_ms: float, spec: str | None):
        self.dev = nvml_module.NvmlDevice(index, resolve(spec))
        self.missing = nvml_module.MISSING
        self.one_line = importlib.import_module("support.text").one_line  # on the path nvml.py needed
        self.period = period_ms / 1000.0
        self.sampling, self.energy, self.error = False, False, None
        self.next_t = time.monotonic()
        self.columns = {name: array(code) for name, code in COLUMNS}

    def sample(self) -> None:
        dev = self.dev
        try:
            power = dev.read_power_w()
        except Exception as exc:  # the power read failing stops sampling, as the thread does
            self.error = f"NVML power read failed: {self.one_line(exc, type_name=False)}"
            self.sampling = False
            return
        t = time.monotonic()
        row = [t, power, dev.read_sm_clock(), dev.read_mem_clock(), dev.read_temperature(), dev.read_reason_mask()]
        energy, t_energy = self.missing, math.nan
        if self.energy:
            t_before = time.monotonic()
            energy = dev.read_energy_mj()
            t_energy = 0.5 * (t_before + time.monotonic())
        for (name, _), v in zip(COLUMNS, [*row, energy, t_energy], strict=True):
            self.columns[name].append(v)

    def reply(self, **extra) -> dict:
        out = {name: col.tobytes() for name, col in self.columns.items()}
        for col in self.columns.values():
            del col[:]
        return {"samples": out, "sampling": self.sampling, "error": self.error, **extra}

    def handle(self, msg) -> bool:
        """Act on one request; False when the process should end."""
        op, *args = msg
        if op == "start":  # as a thread started again would: sample afresh, the last failure forgotten
            self.sampling, self.error, self.next_t = True, None, time.monotonic()
        elif op == "stop":
            self.sampling = False
        elif op == "energy":
            self.energy = bool(args[0])
        return op != "quit"

    def due(self) -> float | None:
        """Seconds until the next sample (None: not sampling)."""
        return max(0.0, self.next_t - time.monotonic()) if self.sampling else None

    def tick(self) -> None:
        self.sample()
        self.next_t += self.period
        if self.next_t < time.monotonic():  # fell behind: skip the missed slots
            self.next_t = time.monotonic()


def serve(index: int, period_ms: float, spec: str | None) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    out, fd = sys.stdout.buffer, sys.stdin.fileno()
    sampler = Sampler(load_nvml_module(), index, period_ms, spec)
    send(out, {"available": sampler.dev.available, "unavailable_reason": sampler.dev.unavailable_reason})
    alive = True
    while alive:
        wait = sampler.due()
        ready, _, _ = select.select([fd], [], [], wait)
        if ready:
            msg = receive(fd)
            if msg is None:
                break  # the parent is gone
            alive = sampler.handle(msg)
            send(out, sampler.reply())
        elif sampler.sampling:
            sampler.tick()
    sampler.dev.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))
