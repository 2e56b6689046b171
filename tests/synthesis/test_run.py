"""The run folder: settings identity, the lock, torn lines, atomic writes, the index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from tau_env.synthesis.errors import SynthesisError
from tau_env.synthesis.run import RunFolder

SETTINGS = {"domain": "harbor-bank-v0", "loader": {}, "seed": 0, "backend": "template"}


def test_create_writes_settings_and_reopens(tmp_path):
    with RunFolder.create(tmp_path / "r", SETTINGS) as run:
        assert run.settings["domain"] == "harbor-bank-v0"
        assert "tau_env_version" in run.settings
    saved = json.loads((tmp_path / "r" / "run.json").read_text())
    assert saved["seed"] == 0 and saved["backend"] == "template"
    with RunFolder.open(tmp_path / "r") as run:
        assert run.settings == saved
    assert not (tmp_path / "r" / ".synth.lock").exists()  # released


def test_open_missing_folder_says_what_to_pass(tmp_path):
    with pytest.raises(SynthesisError, match="does not exist"):
        RunFolder.open(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SynthesisError, match="no run.json"):
        RunFolder.open(tmp_path / "empty")


def test_create_on_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SynthesisError, match="is a file"):
        RunFolder.create(tmp_path / "f", SETTINGS)


@pytest.mark.parametrize(
    "change, key",
    [
        ({"domain": "tau3-banking"}, "domain"),
        ({"loader": {"data_dir": "elsewhere"}}, "loader"),
        ({"seed": 1}, "seed"),
        ({"backend": {"model": "m", "base_url": "http://x/v1"}}, "backend"),
    ],
)
def test_identity_mismatch_names_the_key(tmp_path, change, key):
    RunFolder.create(tmp_path / "r", SETTINGS).close()
    with pytest.raises(SynthesisError, match=rf"{key}: .* in the folder, .* now") as e:
        RunFolder.create(tmp_path / "r", {**SETTINGS, **change})
    others = {"domain", "loader", "seed", "backend"} - {key}
    assert not any(f"{k}:" in str(e.value) for k in others)
    with pytest.raises(SynthesisError, match=key):
        RunFolder.open(tmp_path / "r", {**SETTINGS, **change}, lock=False)


def test_same_identity_resumes_and_records_new_keys(tmp_path):
    RunFolder.create(tmp_path / "r", {"domain": "harbor-bank-v0", "loader": {}}).close()  # graphs: no seed yet
    with RunFolder.create(tmp_path / "r", {**SETTINGS, "quiet": True}) as run:
        assert run.settings["seed"] == 0 and run.settings["quiet"] is True
    with pytest.raises(SynthesisError, match="seed"):
        RunFolder.create(tmp_path / "r", {**SETTINGS, "seed": 3})


def test_backend_transport_is_not_identity(tmp_path):
    a = {**SETTINGS, "backend": {"model": "m", "base_url": "http://a/v1"}}
    b = {**SETTINGS, "backend": {"model": "m", "base_url": "http://b/v1"}}
    RunFolder.create(tmp_path / "r", a).close()
    RunFolder.create(tmp_path / "r", b).close()


def test_lock_refuses_a_second_process(tmp_path):
    path = tmp_path / "r"
    with RunFolder.create(path, SETTINGS):
        code = textwrap.dedent(
            f"""
            from tau_env.synthesis.run import RunFolder
            from tau_env.synthesis.errors import SynthesisError
            try:
                RunFolder.open({str(path)!r})
            except SynthesisError as e:
                print("REFUSED", e)
            else:
                print("OPENED")
            """
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
        assert out.startswith("REFUSED") and f"process {os.getpid()}" in out
        # the same process may open it again (a stage inside a stage), sharing the lock
        with RunFolder.open(path) as again:
            assert again.settings["domain"] == "harbor-bank-v0"
        assert (path / ".synth.lock").exists()  # still held by the outer opener
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("OPENED")


def test_append_read_ids(tmp_path):
    with RunFolder.create(tmp_path / "r", SETTINGS) as run:
        assert run.read("plans.jsonl") == []
        assert run.append("plans.jsonl", [{"id": "p1"}, {"id": "p2", "x": "é\u2028"}]) == 2
        assert run.append("plans.jsonl", []) == 0
        run.append("plans.jsonl", [{"id": "p3"}, {"other": 1}])
        assert [r.get("id") for r in run.read("plans.jsonl")] == ["p1", "p2", "p3", None]
        assert run.read("plans.jsonl")[1]["x"] == "é\u2028"
        assert run.ids("plans.jsonl") == {"p1", "p2", "p3"}
        assert run.ids("plans.jsonl", key="other") == {1}
        with pytest.raises(SynthesisError, match="JSON object"):
            run.append("plans.jsonl", [["not", "a", "dict"]])  # type: ignore[list-item]


def test_torn_last_line_is_skipped_then_cut(tmp_path):
    with RunFolder.create(tmp_path / "r", SETTINGS) as run:
        run.append("tasks.jsonl", [{"id": "a"}])
        with open(tmp_path / "r" / "tasks.jsonl", "ab") as f:
            f.write(b'{"id": "b", "act')  # a kill mid-write
        with pytest.warns(UserWarning, match="torn last line"):
            assert run.read("tasks.jsonl") == [{"id": "a"}]
        with pytest.warns(UserWarning, match="cut off a torn"):
            run.append("tasks.jsonl", [{"id": "c"}])
        assert run.read("tasks.jsonl") == [{"id": "a"}, {"id": "c"}]
        # a whole record that lost only its newline is kept
        with open(tmp_path / "r" / "tasks.jsonl", "ab") as f:
            f.write(b'{"id": "d"}')
        run.append("tasks.jsonl", [{"id": "e"}])
        assert run.ids("tasks.jsonl") == {"a", "c", "d", "e"}


def test_damaged_middle_line_raises(tmp_path):
    with RunFolder.create(tmp_path / "r", SETTINGS) as run:
        (tmp_path / "r" / "x.jsonl").write_bytes(b'{"id": 1}\nnot json\n{"id": 2}\n')
        with pytest.raises(SynthesisError, match="line 2 is not a JSON object"):
            run.read("x.jsonl")


def test_write_json_is_atomic_and_refuses_links(tmp_path):
    with RunFolder.create(tmp_path / "r", SETTINGS) as run:
        run.write_json("graphs/a.json", {"x": [1, 2]})
        assert run.read_json("graphs/a.json") == {"x": [1, 2]}
        assert run.read_json("missing.json", {"d": 1}) == {"d": 1}
        # a failing write leaves the old content and no temporary file
        with pytest.raises(TypeError):
            run.write_bytes("graphs/a.json", object())  # type: ignore[arg-type]
        assert run.read_json("graphs/a.json") == {"x": [1, 2]}
        assert sorted(p.name for p in (tmp_path / "r" / "graphs").iterdir()) == ["a.json"]
        victim = tmp_path / "victim.json"
        victim.write_text("{}")
        os.symlink(victim, tmp_path / "r" / "link.json")
        with pytest.raises(SynthesisError, match="symbolic link"):
            run.write_json("link.json", {"y": 1})
        with pytest.raises(SynthesisError, match="symbolic link"):
            run.read("link.json")
        assert victim.read_text() == "{}"
        (tmp_path / "r" / "bad.json").write_text("{nope")
        with pytest.raises(SynthesisError, match="not valid JSON"):
            run.read_json("bad.json")
        for bad in ("../out.json", "/abs.json", ""):
            with pytest.raises(SynthesisError, match="relative path"):
                run.file(bad)


def test_stages(tmp_path):
    with RunFolder.create(tmp_path / "r", SETTINGS) as run:
        run.record_stage("tasks", {"round": 0, "planned": 10, "accepted": 7})
        run.record_stage("compose", {"planned": 5})
        assert [s["stage"] for s in run.stages()] == ["tasks", "compose"]
        (t,) = run.stages("tasks")
        assert t["accepted"] == 7 and t["time"]


def _task(tid, actions, **prov):
    return {
        "id": tid,
        "scenario": {"requests": ["hi"]},
        "actions": actions,
        "metadata": {"synthesis": {"plan": {"template": "tpl", "outcome": "success"}, **prov}},
    }


def test_index_builds_tables(tmp_path):
    sqlite_utils = pytest.importorskip("sqlite_utils")
    with RunFolder.create(tmp_path / "r", SETTINGS) as run:
        run.write_json(
            "graphs/tool_graph.json",
            {"nodes": [{"name": "w1", "kind": "write"}, {"name": "r1", "kind": "read"}], "edges": []},
        )
        a1 = [{"name": "r1", "arguments": {}}, {"name": "w1", "arguments": {"x": 1}}]
        run.append("tasks.jsonl", [_task("t1", a1, failure_mode="multi_doc"), _task("t2", a1)])
        run.append("composite.jsonl", [_task("c1", a1 + a1, components=["t1", "t2"])])
        run.append("candidates.jsonl", [{"task": _task("t3", a1)}, _task("t1", a1)])
        run.record_stage("tasks", {"round": 0, "planned": 3})
        run.write_json("llm_usage.json", {"roles": {"wording": {"calls": 4, "prompt_tokens": 40}}})
        db = sqlite_utils.Database(run.index())
        rows = {r["id"]: r for r in db["tasks"].rows}
        assert set(rows) == {"t1", "t2", "c1", "t3"}
        assert rows["t1"]["accepted"] == 1 and rows["t3"]["accepted"] == 0
        assert rows["c1"]["kind"] == "composite" and rows["c1"]["n_actions"] == 4
        assert json.loads(rows["t1"]["write_tools"]) == ["w1"]
        assert rows["t1"]["failure_mode"] == "multi_doc" and rows["t1"]["template"] == "tpl"
        assert rows["t1"]["chain_signature"] == rows["t2"]["chain_signature"] != rows["c1"]["chain_signature"]
        assert [r["stage"] for r in db["stages"].rows] == ["tasks"]
        assert list(db["llm_calls"].rows)[0]["calls"] == 4
    with RunFolder.create(tmp_path / "empty", SETTINGS) as run:
        db = sqlite_utils.Database(run.index())
        assert set(db.table_names()) == {"tasks", "stages", "llm_calls"} and db["tasks"].count == 0


def test_progress_is_silent_when_quiet(tmp_path):
    with RunFolder.create(tmp_path / "r", {**SETTINGS, "quiet": True}) as run:
        bar = run.progress("tasks", 3)
        assert bar.disable
        bar.update(3)
        bar.close()


def test_domain_loads_with_loader_settings(tmp_path):
    with RunFolder.create(tmp_path / "r", SETTINGS) as run:
        assert run.domain() is run.domain()
        assert run.domain().tasks


def test_rewrite_replaces_records_atomically(tmp_path):
    with RunFolder.create(tmp_path / "r", SETTINGS) as run:
        run.append("tasks.jsonl", [{"id": "a"}, {"id": "b"}, {"id": "c"}])
        run.rewrite("tasks.jsonl", [r for r in run.read("tasks.jsonl") if r["id"] != "b"])
        assert run.ids("tasks.jsonl") == {"a", "c"}
        run.append("tasks.jsonl", [{"id": "d"}])
        assert [r["id"] for r in run.read("tasks.jsonl")] == ["a", "c", "d"]


def test_none_settings_are_not_given(tmp_path):
    RunFolder.create(tmp_path / "r", SETTINGS).close()
    with RunFolder.create(tmp_path / "r", {**SETTINGS, "seed": None, "backend": None}) as run:
        assert run.settings["seed"] == 0 and run.settings["backend"] == "template"
    with RunFolder.open(tmp_path / "r", expect={"domain": "harbor-bank-v0", "seed": 0}) as run:
        assert run.settings["domain"] == "harbor-bank-v0"


def test_threads_append_whole_lines(tmp_path):
    import threading

    with RunFolder.create(tmp_path / "r", SETTINGS) as run:

        def writer(k):
            for i in range(20):
                run.append("v.jsonl", [{"id": f"{k}-{i}", "pad": "x" * 5000}, {"id": f"{k}-{i}b"}])

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        recs = run.read("v.jsonl")
        assert len(recs) == 160 and len(run.ids("v.jsonl")) == 160
