"""Ctrl-C or SIGTERM in the first seconds of `python -m bench` / `gdpa-bench` — the torch import, the
config load — ends the process with 128 + the signal and one line, never a traceback (issue 25).

Each process is signalled once its first instruction has run: bench.__main__ installs the guard, which
the test sees as SIGTERM turning up in /proc/PID/status's caught-signal mask, then waits a delay that
lands in the torch import (the first ~1-2 s), in the config load, or later.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONSOLE_SCRIPT = "import sys; from bench.__main__ import entry; sys.exit(entry())"  # what pip's wrapper runs
DELAYS = (0.0, 0.05, 0.2, 0.5, 1.0, 2.0)


def _guarded(pid: int, timeout: float = 60.0) -> bool:
    """True once the process catches SIGTERM (the guard is installed); False if it ended first."""
    deadline = time.monotonic() + timeout
    bit = 1 << (signal.SIGTERM - 1)
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
        if int(caught, 16) & bit:
            return True
        time.sleep(0.002)
    return False


def _inherited_ignore(sig: signal.Signals) -> str | None:
    """Why `sig` cannot be tested here: the suite was started with it ignored (`nohup pytest &`, a
    background job of a non-interactive shell) — an ignored signal stays ignored in every child, as
    bench.signals.guard_startup keeps it, so the child would not stop."""
    if signal.getsignal(sig) is signal.SIG_IGN:
        return f"{sig.name} is inherited as ignored (a `nohup ... &` start): the children cannot receive it"
    return None


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the signal mask from /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_starting_is_one_line_and_128_plus_the_signal(sig, tmp_path):
    if why := _inherited_ignore(sig):
        pytest.skip(why)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    runs = []
    for k, delay in enumerate(DELAYS):
        how = ["-m", "bench"] if (k + sig) % 2 else ["-c", CONSOLE_SCRIPT]
        cmd = [sys.executable, *how, "list", str(ROOT / "configs" / "smoke.yaml")]
        popen = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runs.append((sig, delay, popen))

    def signal_when_guarded(sig, delay, p) -> None:  # each process on its own clock
        if _guarded(p.pid):
            time.sleep(delay)
            p.send_signal(sig)

    threads = [threading.Thread(target=signal_when_guarded, args=run) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    for sig, delay, p in runs:
        out, err = p.communicate(timeout=120)
        where = (signal.Signals(sig).name, delay)
        assert "Traceback" not in err + out, (where, err[-2000:])
        if p.returncode == 0:  # `list` finished before the signal (a fast machine, the longest delay)
            assert delay == DELAYS[-1], (where, err)
            continue
        assert p.returncode == 128 + sig, (where, p.returncode, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"interrupted ({signal.Signals(sig).name})"), (where, lines)


def _run_module(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    """`python -m` a module made of `body` (the way `python -m bench` runs), with the guard installed."""
    (tmp_path / "ending.py").write_text(
        "import atexit, os, signal, sys, time\n"
        "from bench.sweep.signals import command_started, guard_exit, guard_startup\n"
        "guard_startup()\ncommand_started()\n" + body
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "ending"]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def test_an_interrupt_that_left_an_exec_does_not_turn_the_status_into_sigint(tmp_path):
    """CPython ends a `python -m` process with SIGINT when a KeyboardInterrupt once left an `exec` of a
    string (as one raised inside dataclasses' or pydantic's import-time exec does), even though the
    command caught it and returned 130: what the CI machine saw as returncode -2."""
    p = _run_module(
        tmp_path,
        (
            "try:\n    exec('raise KeyboardInterrupt')\n"
            "except KeyboardInterrupt:\n    print('interrupted (SIGINT)', file=sys.stderr)\n"
            "guard_exit(130)\nsys.exit(130)\n"
        ),
    )
    assert (p.returncode, p.stderr.strip()) == (130, "interrupted (SIGINT)")


@pytest.mark.skipif(_inherited_ignore(signal.SIGINT) is not None, reason="SIGINT inherited as ignored")
def test_a_signal_while_the_process_ends_is_one_line_and_128_plus_the_signal(tmp_path):
    """An exit handler that runs after the command (as torch's and multiprocessing's do) takes the signal."""
    p = _run_module(
        tmp_path,
        (
            "print('the output', flush=False)\n"
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(10)))\n"
            "guard_exit(0)\nsys.exit(0)\n"
        ),
    )
    assert (p.returncode, p.stdout, p.stderr) == (130, "the output\n", "interrupted (SIGINT) while exiting\n")


def test_without_a_signal_the_process_ends_with_the_commands_status_and_its_output(tmp_path):
    p = _run_module(tmp_path, "sys.stdout.write('kept')\nguard_exit(3)\nsys.exit(3)\n")
    assert (p.returncode, p.stdout, p.stderr) == (3, "kept", "")


def _a_class_whose_set_name_is_interrupted():
    """What pydantic's import hit on CI (2026-12-05, Python 3.11): a KeyboardInterrupt raised inside a
    descriptor's `__set_name__` while a class body is created comes out as RuntimeError (3.12 and later
    keep the KeyboardInterrupt and add a note)."""

    class Interrupted:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    type("LazyLocalNamespace", (), {"data": Interrupted()})


def _an_extension_whose_init_is_interrupted():
    """What numpy's import hit on CI (2026-12-02): the interrupt inside an extension's initialisation."""
    raise ImportError("initialization failed")


@pytest.mark.parametrize(
    "broken",
    [_an_extension_whose_init_is_interrupted, _a_class_whose_set_name_is_interrupted],
    ids=["import", "set_name"],
)
def test_an_error_a_signal_caused_is_the_signal_and_without_one_stays_an_error(broken, monkeypatch, capsys):
    """A KeyboardInterrupt can surface as another error, by where it landed: with a signal recorded it is
    that signal's one line and 128 + it; with none, the error is the error it is (a broken install)."""
    from types import SimpleNamespace

    from bench.cli import parser
    from bench.sweep import signals

    fake = SimpleNamespace(parse_args=lambda argv: SimpleNamespace(runs_kernels=False, handler=lambda a: broken()))
    monkeypatch.setattr(parser, "build_parser", lambda: fake)
    monkeypatch.setattr(signals._entry, "signum", int(signal.SIGTERM))
    assert parser.main(["list"]) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip() == "interrupted (SIGTERM)"
    monkeypatch.setattr(signals._entry, "signum", None)
    with pytest.raises((ImportError, RuntimeError)):
        parser.main(["list"])
