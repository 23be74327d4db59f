"""Test-only providers that fault like a kernel that breaks the GPU, on CPU (name this module in
GDPA_BENCH_PROVIDERS, with tests/ on PYTHONPATH).

A sticky CUDA error poisons the process: after it, every CUDA call of that process raises the same error.
`_poisoned` is this process's stand-in for its CUDA context: `test_sim_fault` sets it on the case whose
longest sequence is its option `fault_at` and raises CUDA's own text; from then on every call of either
provider here raises it too, as every CUDA call would. A fresh process starts clean. `sleep_s` makes each
call slow enough for a test to interrupt a run in flight. `test_sim_profiled_fault` faults only under a
profiler (the profiled phase, bench.profiling.later); `test_sim_hang` hangs (`hang_in`: gate, compile,
profiled).
"""

import time

from kernels.naive import NaiveEager
from kernels.registry import register

STICKY = "CUDA error: an illegal memory access was encountered"
_poisoned = False


def poisoned() -> bool:
    return _poisoned


def reset() -> None:
    """Clean the stand-in context (for a test that faults in its own process)."""
    global _poisoned
    _poisoned = False


class _Poisonable(NaiveEager):
    def parse_options(self, options: dict):
        unknown = sorted(set(options) - {"fault_at", "sleep_s"})
        if unknown:
            raise ValueError(f"{self.name}: unknown option {unknown[0]!r}; allowed: fault_at, sleep_s")
        return {"fault_at": options.get("fault_at"), "sleep_s": float(options.get("sleep_s", 0.0))}

    def forward(self, batch, spec):
        if _poisoned:
            raise RuntimeError(STICKY)
        time.sleep(self.options["sleep_s"])
        return super().forward(batch, spec)


@register
class SimulatedHealthy(_Poisonable):
    name = "test_sim_ok"
    description = "naive_eager that fails once this process is poisoned (tests only)"


@register
class SimulatedFault(_Poisonable):
    name = "test_sim_fault"
    description = "naive_eager that poisons the process on the case of max length `fault_at` (tests only)"

    def forward(self, batch, spec):
        global _poisoned
        if batch.max_q == self.options["fault_at"]:
            _poisoned = True
            raise RuntimeError(f"{STICKY}\nCUDA kernel errors might be asynchronously reported at some other API call")
        return super().forward(batch, spec)


@register
class SimulatedProfiledFault(_Poisonable):
    name = "test_sim_profiled_fault"
    description = "naive_eager that poisons the process under a profiler on the case of max length `fault_at` (tests)"

    def forward(self, batch, spec):
        global _poisoned
        import torch

        if batch.max_q == self.options["fault_at"] and torch.autograd.profiler._is_profiler_enabled:
            _poisoned = True
            raise RuntimeError(STICKY)
        return super().forward(batch, spec)


@register
class SimulatedHang(NaiveEager):
    """A kernel that deadlocks: on the case whose longest sequence is `hang_at` its call never returns (in the
    phase `hang_in`: the gate's call, the first call after the build, or a call under the profiler)."""

    name = "test_sim_hang"
    description = "naive_eager whose call sleeps forever at max length `hang_at` (tests only)"

    def parse_options(self, options: dict):
        unknown = sorted(set(options) - {"hang_at", "hang_in"})
        if unknown:
            raise ValueError(f"{self.name}: unknown option {unknown[0]!r}; allowed: hang_at, hang_in")
        return {"hang_at": options.get("hang_at"), "hang_in": options.get("hang_in", "gate")}

    def forward(self, batch, spec):
        if batch.max_q == self.options["hang_at"] and self._hangs_now():
            while True:
                time.sleep(3600)
        return super().forward(batch, spec)

    def _hangs_now(self) -> bool:
        """`gate`: at once (the gate's call comes first); `profiled`: only under a profiler (the profiled phase)."""
        import torch

        return self.options["hang_in"] == "gate" or (
            self.options["hang_in"] == "profiled" and torch.autograd.profiler._is_profiler_enabled
        )

    def build(self, batch, spec, mode):
        fn = super().build(batch, spec, mode)
        if batch.max_q != self.options["hang_at"] or self.options["hang_in"] != "compile":
            return fn

        def hang():
            while True:
                time.sleep(3600)

        return hang


@register
class SimulatedCrash(NaiveEager):
    """A kernel that takes its process down: on the case whose longest sequence is `crash_at` its call ends the
    process (`how`: abort — SIGABRT, as a failed assert in C code; segv — SIGSEGV, a bad pointer; exit —
    os._exit(7), as a library that calls exit)."""

    name = "test_sim_crash"
    description = "naive_eager whose call ends its process at max length `crash_at` (tests only)"

    def parse_options(self, options: dict):
        unknown = sorted(set(options) - {"crash_at", "how"})
        if unknown:
            raise ValueError(f"{self.name}: unknown option {unknown[0]!r}; allowed: crash_at, how")
        return {"crash_at": options.get("crash_at"), "how": options.get("how", "abort")}

    def forward(self, batch, spec):
        import os
        import signal

        if batch.max_q == self.options["crash_at"]:
            how = self.options["how"]
            if how == "exit":
                os._exit(7)
            sig = {"segv": signal.SIGSEGV, "term": signal.SIGTERM}.get(how, signal.SIGABRT)
            os.kill(os.getpid(), sig)  # term: a stop signal sent to this process alone (Slurm, an operator)
            time.sleep(5)
        return super().forward(batch, spec)


@register
class SimulatedStrayThread(NaiveEager):
    """A kernel library that leaves a non-daemon thread running (a pool it never shuts down)."""

    name = "test_sim_stray_thread"
    description = "naive_eager that starts a thread which never ends (tests only)"

    def forward(self, batch, spec):
        import threading

        if not any(t.name == "stray-pool" for t in threading.enumerate()):
            threading.Thread(target=lambda: time.sleep(3600), name="stray-pool").start()
        return super().forward(batch, spec)


@register
class SimulatedSwallow(NaiveEager):
    """A kernel whose library catches everything: a Ctrl-C that lands in its call is swallowed there (the case
    whose longest sequence is `swallow_at` sends itself SIGINT inside the call)."""

    name = "test_sim_swallow"
    description = "naive_eager that swallows a Ctrl-C landing in its call at max length `swallow_at` (tests only)"

    def parse_options(self, options: dict):
        return {"swallow_at": options.get("swallow_at")}

    def forward(self, batch, spec):
        import os
        import signal

        if batch.max_q == self.options["swallow_at"]:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1.0)
            except KeyboardInterrupt:
                pass
        return super().forward(batch, spec)
