import json
import subprocess
import sys

from tau_env.cli import main


def test_list(capsys):
    assert main(["list"]) == 0
    assert "harbor-bank-v0" in capsys.readouterr().out


def test_eval_and_show(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["eval", "--quiet", "--out", str(out), "--agent", "noop"]) == 0
    printed = capsys.readouterr().out
    assert "pass@1" in printed and str(out) in printed
    assert (out / "metrics.json").exists() and (out / "summary.txt").exists()
    first = json.loads((out / "trajectories.jsonl").read_text().splitlines()[0])
    assert main(["show", str(out), "--limit", "1", "--failed"]) == 0
    shown = capsys.readouterr().out
    assert "== task" in shown and "reward 0.0" in shown and "database differs" in shown
    assert main(["show", str(out), "--task", first["task_id"]]) == 0
    assert first["task_id"] in capsys.readouterr().out


def test_check_one_task(capsys):
    from tau_env import registry

    task = registry.load_domain("harbor-bank-v0").tasks[0].id
    assert main(["check", "harbor-bank-v0", "--task", task]) == 0
    assert "pass every check" in capsys.readouterr().out


def test_errors_are_reported_not_raised(capsys, tmp_path):
    assert main(["check", "no-such-env"]) == 2
    assert "No environment 'no-such-env'" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "missing")]) == 2


def test_console_script_entry_point():
    r = subprocess.run([sys.executable, "-m", "tau_env.cli", "list"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "harbor-bank-v0" in r.stdout


def test_import_is_light():
    code = (
        "import sys, tau_env; heavy = [m for m in ('torch', 'sentence_transformers', 'transformers', 'vllm', "
        "'verl', 'ray', 'trl') if m in sys.modules]; print(heavy)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]"
