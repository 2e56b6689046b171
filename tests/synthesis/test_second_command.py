"""A second ``tau-env synth tasks`` on a run folder another process is running (before that run's
first verdict) is refused and changes nothing: it must not take the folder for a first try that
produced nothing and clear it (it deleted the running run's run.json)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.pipeline import _open


def test_a_refused_second_command_leaves_the_running_runs_folder_alone(tmp_path):
    run = tmp_path / "R"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from tau_env.synthesis.run import RunFolder\n"
            f"f = RunFolder.create({str(run)!r}, {{'domain': 'harbor-bank-v0', 'seed': 0}})\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = (run / "run.json").read_text()
        for seed in (0, 7):  # the same settings, and other ones (which would otherwise be a "fresh start")
            with pytest.raises(SynthesisError, match="in use by another synthesis run|other settings"):
                _open(run, "harbor-bank-v0", None, None, seed, True)
            assert (run / "run.json").read_text() == before
        assert json.loads(before)["seed"] == 0
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    _open(run, "harbor-bank-v0", None, None, 7, True).close()  # free, nothing produced: a fresh start
    assert json.loads((run / "run.json").read_text())["seed"] == 7
