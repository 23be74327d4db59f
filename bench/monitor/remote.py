"""The parent's side of the sampler process (bench/monitor/child.py): start it, ask it, end it.

Every request waits for its reply, at most `REPLY_TIMEOUT_S` (an NVML call that hangs must not hang the
sweep): a child that does not answer in time, or has ended, is killed and reported (`SamplerGone`). The
requests are made only between timed regions (bench.monitor.sampler).
"""

from __future__ import annotations

import pickle
import select
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path

from bench.monitor.child import COLUMNS, HEADER, read_exactly, send
from support.text import one_line

CHILD = Path(__file__).with_name("child.py")
START_TIMEOUT_S = 30.0  # pynvml's import and nvmlInit; a cold driver can take seconds
REPLY_TIMEOUT_S = 10.0


class SamplerGone(RuntimeError):
    """The sampler process did not start, did not answer, or ended."""


class SamplerProcess:
    """One child sampling GPU `index` every `period_ms`; `nvml_spec` ("module:attr") a stand-in for pynvml."""

    def __init__(self, index: int, period_ms: float, nvml_spec: str | None = None):
        self._stderr = tempfile.TemporaryFile()
        args = [sys.executable, "-u", str(CHILD), str(int(index)), repr(float(period_ms))]
        try:
            self.proc = subprocess.Popen(
                [*args, *([nvml_spec] if nvml_spec else [])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                close_fds=True,
            )
        except OSError as exc:
            raise SamplerGone(f"the sampler process did not start: {one_line(exc)}") from None
        hello = self._reply(START_TIMEOUT_S)
        if not hello.get("available"):
            self.close()
            raise SamplerGone(f"NVML in the sampler process: {hello.get('unavailable_reason')}")

    def _reply(self, timeout: float) -> dict:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        head = read_exactly(fd, HEADER.size) if ready else None
        body = read_exactly(fd, HEADER.unpack(head)[0]) if head is not None else None
        if body is None:
            why = "did not answer in time" if not ready else "ended"
            self.kill()
            raise SamplerGone(f"the sampler process {why}{self._last_words()}")
        return pickle.loads(body)

    def _last_words(self) -> str:
        try:
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return f": {one_line(tail[-1])}" if tail else ""

    def ask(self, op: str, *args) -> dict:
        """Send one request; its reply, with the samples it carried as arrays (`columns`)."""
        if self.proc.poll() is not None:
            raise SamplerGone(f"the sampler process ended (exit {self.proc.returncode}){self._last_words()}")
        try:
            send(self.proc.stdin, (op, *args))
        except (BrokenPipeError, OSError) as exc:
            self.kill()
            raise SamplerGone(f"the sampler process ended: {one_line(exc)}") from None
        reply = self._reply(REPLY_TIMEOUT_S)
        columns = {}
        for name, code in COLUMNS:
            col = array(code)
            col.frombytes(reply["samples"][name])
            columns[name] = col
        reply["columns"] = columns
        return reply

    def close(self) -> dict | None:
        """Ask the child to end (its last reply: the samples not pulled yet); kill it if it does not."""
        last = None
        if self.proc.poll() is None:
            try:
                last = self.ask("quit")
                self.proc.stdin.close()
                self.proc.wait(timeout=REPLY_TIMEOUT_S)
            except (SamplerGone, OSError, ValueError, subprocess.TimeoutExpired):
                self.kill()
        self._stderr.close()
        return last

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
