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
        "'verl', 'ray', 'trl', 'openai', 'pyarrow', 'httpx') if m in sys.modules]; print(heavy)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]"


def test_eval_with_model_servers_and_export_sft(tmp_path, capsys, monkeypatch):
    import pytest

    pytest.importorskip("openai")
    from tau_env.testing import FakeOpenAI, own_turns, seat_of, text, tool

    def script(req):
        n = own_turns(req)
        if seat_of(req) == "user":
            return text("I lost my debit card." if n == 0 else "Thanks ###STOP###")
        return tool("get_current_time", {}, call_id=f"c{n}") if n == 1 else text("Done.")

    monkeypatch.setenv("MY_KEY", "secret-value")
    out = tmp_path / "run"
    with FakeOpenAI(script) as server:
        args = ["eval", "--domain", "harbor-bank-v0", "--agent-model", "m-agent", "--agent-base-url", server.url,
                "--agent-api-key-env", "MY_KEY", "--user-model", "m-user", "--user-base-url", server.url,
                "--trials", "2", "--concurrency", "8", "--task", "lost_card_standard_shipping",
                "--task", "travel_notice_simple", "--cache", str(tmp_path / "cache.sqlite"), "--out", str(out),
                "--quiet"]
        assert main(args) == 0
    printed = capsys.readouterr().out
    assert "pass^2" in printed and "mean tokens" in printed
    config = (out / "config.json").read_text()
    assert "secret-value" not in config and '"api_key_env": "MY_KEY"' in config
    cfg = json.loads(config)
    assert cfg["agent"]["model"] == "m-agent" and cfg["user"]["model"] == "m-user"
    assert cfg["user_prompt_version"] and cfg["retrieval"] == "bm25" and cfg["tau_env_version"]
    assert cfg["agent"]["sampling"]["temperature"] == 0.0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["episodes"] == 4 and set(metrics["pass^k"]) == {"1", "2"}
    assert set(metrics["time_to_done_s"]) == {"50%", "90%", "100%"} and metrics["terminations"] == {"user_stop": 4}
    html = (out / "report.html").read_text()
    assert "lost_card_standard_shipping" in html and "<script" in html
    # teacher data: nothing succeeded with these scripted models, so no example...
    assert main(["export-sft", str(out), "--jsonl", str(tmp_path / "sft.jsonl")]) == 0
    assert (tmp_path / "sft.jsonl").read_text() == ""
    # ...and with the oracle every episode becomes one
    assert main(["eval", "--quiet", "--out", str(tmp_path / "oracle"), "--task", "lost_card_standard_shipping"]) == 0
    assert main(["export-sft", str(tmp_path / "oracle"), "--jsonl", str(tmp_path / "sft.jsonl")]) == 0
    ex = json.loads((tmp_path / "sft.jsonl").read_text())
    assert ex["task_id"] == "lost_card_standard_shipping" and len(ex["train"]) == len(ex["messages"])
    assert ex["messages"][0]["role"] == "system" and ex["train"][1] is False  # the env's greeting
    assert any(ex["train"]) and all(m["role"] == "assistant" for m, t in zip(ex["messages"], ex["train"]) if t)
    assert ex["tools"] and main(["export-sft", str(tmp_path / "oracle")]) == 2


def test_export_sft_parquet(tmp_path):
    import pytest

    pq = pytest.importorskip("pyarrow.parquet")
    assert main(["eval", "--quiet", "--out", str(tmp_path / "run"), "--task", "wire_preferred"]) == 0
    assert main(["export-sft", str(tmp_path / "run"), "--parquet", str(tmp_path / "sft.parquet"),
                 "--jsonl", str(tmp_path / "sft.jsonl")]) == 0
    table = pq.read_table(tmp_path / "sft.parquet")
    rows = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert table.num_rows == len(rows) > 0
    first = table.to_pylist()[0]
    assert json.loads(first["messages"]) == rows[0]["messages"] and first["train"] == rows[0]["train"]
