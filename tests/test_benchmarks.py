"""Every benchmark script still runs, so none can rot unnoticed.

Each ``benchmarks/*.py`` script (found by glob; ``_``-prefixed modules are helpers, not benchmarks)
runs in a subprocess with ``--quick``: a smoke run of its code paths at tiny sizes. It must exit 0
and end its output with one JSON object. No figure is checked (timing belongs to the benchmarks).

The scripts read the tau3-banking data from ../shared/data/tau3_banking. A script that finds no
data (or, for the shell tool's, no bubblewrap) says so with ``{"skipped": ...}``; that is a skip
only where the data folder (or ``bwrap``) is really missing and the ``CI`` environment variable is
unset, the rule of the suites that need them. Under CI, or with what it needs present, it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TAU3_DATA, shared_missing

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_"))
TIMEOUT_S = 600  # per script: a hang fails instead of stalling the suite (loaded, --quick took over 180 s)


def test_benchmarks_are_found():
    assert REPO / "benchmarks" / "core.py" in SCRIPTS


@pytest.fixture(scope="module")
def data_missing() -> str | None:
    """Why the tau3 data is unusable (None if present); fails at once under CI (the suites' one rule)."""
    return shared_missing(TAU3_DATA / "documents", TAU3_DATA / "tasks")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_runs_quick(script: Path, data_missing: str | None, tmp_path: Path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "TAU_ENV_CACHE": str(tmp_path / "cache"),  # embeddings: no dependence on a warm user cache
    }
    p = subprocess.run(
        [sys.executable, str(script), "--quick"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert p.returncode == 0, f"{script.name} --quick exited {p.returncode}:\n{p.stderr[-4000:]}"
    lines = p.stdout.strip().splitlines()
    assert lines, f"{script.name} --quick printed nothing:\n{p.stderr[-4000:]}"
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        pytest.fail(f"{script.name} --quick: the last line of stdout is not JSON ({e}): {lines[-1][:300]!r}")
    assert isinstance(result, dict), f"{script.name} --quick: the last line is JSON but not an object"
    if "skipped" in result:
        why = str(result["skipped"])
        if not os.environ.get("CI"):
            if data_missing:
                pytest.skip(f"{script.name}: {why}")
            if "bubblewrap" in why and shutil.which("bwrap") is None:  # tests/test_tau3_shell.py's rule
                pytest.skip(f"{script.name}: {why}")
        where = "CI is set (.ci/run provides it)" if os.environ.get("CI") else "what it needs is here"
        pytest.fail(f"{script.name} --quick skipped its run ({why}) although {where}")
    assert len(lines) >= 2, f"{script.name} --quick printed its JSON line but no table"
    gone = [v for v in _strings(result) if os.path.isabs(v) and not os.path.exists(v)]
    assert not gone, f"{script.name} --quick names paths that do not exist after it exits: {gone[:5]}"


def _strings(value):
    """Every string in a JSON value."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value
