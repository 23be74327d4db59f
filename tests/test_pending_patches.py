"""The changes waiting for the H200 (docs/experiments/pending/*.patch) still apply to the tree: a patch that no longer
applies is lost work the next device session would find only on the machine. Each is checked alone against this
checkout (or found already applied: prepare_h200_session.sh --pending applies them), nothing is written."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATCHES = sorted((ROOT / "docs/experiments/pending").glob("*.patch"))


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize("patch", PATCHES, ids=[p.name for p in PATCHES])
def test_the_pending_patch_applies_to_the_tree(patch):
    def check(*flags):
        return subprocess.run(["git", "apply", "--check", *flags, str(patch)], cwd=ROOT, capture_output=True, text=True)

    run = check()
    assert run.returncode == 0 or check("-R").returncode == 0, f"{patch.name} no longer applies: {run.stderr[:500]}"
