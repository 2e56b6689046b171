"""Results folders: settings checks on resume, the lock, validation of every record, any text."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tau_env
from tau_env import NoopAgent, OracleAgent, ScriptedUser, aevaluate, evaluate, say
from tau_env.error import InvalidOptionError, ResultsFolderError
from tau_env.harness import EpisodeResult, episode_seed
from tau_env.harness.results import LOCK_NAME, ResultsFolder, check_record, read_records

ROOT = Path(__file__).resolve().parent.parent
ENV = "harbor-bank-v0"
# noop fails the first and passes the other two: metrics that a miscounted record would change
IDS = ["lost_card_standard_shipping", "third_party_address_change_refused", "verification_failure_no_change"]
TRIALS = 2
PLAN = [(t, k) for k in range(TRIALS) for t in IDS]


def run(out, agent=NoopAgent, user=ScriptedUser, **kw):
    kw = {"task_ids": IDS, "trials": TRIALS, "out_dir": out, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped records are warned about; the tests check the counts
        return evaluate(ENV, agent, user, **kw)


def scores(metrics):
    """Everything but the timings."""
    return {k: v for k, v in metrics.items() if k != "time_to_done_s"}


def records(out):
    return [json.loads(x) for x in (Path(out) / "trajectories.jsonl").read_bytes().splitlines()]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A clean noop run: its folder, metrics and trajectory lines."""
    out = tmp_path_factory.mktemp("clean") / "run"
    r = run(out)
    assert 0 < r.metrics["pass@1"] < 1
    return out, scores(r.metrics), (out / "trajectories.jsonl").read_bytes().splitlines()


def copy_folder(src, lines: list[bytes]) -> Path:
    out = Path(tempfile.mkdtemp(dir=src.parent)) / "run"
    out.mkdir()
    shutil.copy(src / "config.json", out / "config.json")
    (out / "trajectories.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    return out


# ---------------------------------------------------------------- settings of the Python API


def _ray_evaluate(*args, **kw):
    from tau_env.harness.ray_backend import ray_evaluate

    return ray_evaluate(*args, **kw)


BAD_SETTINGS = [
    ({"trials": 0}, r"trials must be an int >= 1; got 0\."),
    ({"trials": -2}, r"trials must be an int >= 1; got -2\."),
    ({"trials": 1.5}, r"trials must be an int >= 1; got 1\.5\."),
    ({"trials": True}, r"trials must be an int >= 1; got True\."),
    ({"trials": "2"}, r"trials must be an int >= 1; got '2'\."),
    ({"seed": "1"}, r"seed must be an int; got '1'\."),
    ({"loop_limit": 0}, r"loop_limit must be an int >= 1 or None; got 0\."),
    ({"task_ids": IDS[0]}, r"task_ids must be a non-empty list of task ids \(None for every task\); got 'lost_"),
    ({"task_ids": []}, r"task_ids must be a non-empty list of task ids \(None for every task\); got \[\]\.$"),
    ({"task_ids": [1]}, r"task_ids must be a non-empty list of task ids \(None for every task\); got \[1\]\.$"),
    ({"trials": "x" * 10**6}, r"trials must be an int >= 1; got 'x{56}\.\.\.\.$"),
    ({"concurrency": 0}, r"concurrency must be an int >= 1; got 0\."),
    ({"concurrency": -4}, r"concurrency must be an int >= 1; got -4\."),
    ({"episode_retries": -1}, r"episode_retries must be an int >= 0; got -1\."),
    ({"episode_retries": 0.5}, r"episode_retries must be an int >= 0; got 0\.5\."),
]


@pytest.mark.parametrize("backend", ["evaluate", "aevaluate", "ray_evaluate"])
@pytest.mark.parametrize(("kw", "message"), BAD_SETTINGS)
def test_bad_run_settings_raise_invalid_option_and_write_nothing(tmp_path, backend, kw, message):
    if backend == "evaluate" and ("concurrency" in kw or "episode_retries" in kw):
        pytest.skip("evaluate has no such setting")
    call = {
        "evaluate": evaluate,
        "aevaluate": lambda *a, **k: asyncio.run(aevaluate(*a, **k)),
        "ray_evaluate": _ray_evaluate,  # checked before Ray is imported
    }[backend]
    with pytest.raises(InvalidOptionError, match=f"^{message}"):
        call(ENV, NoopAgent, ScriptedUser, out_dir=tmp_path / "run", **kw)
    assert not (tmp_path / "run").exists()


def test_loop_limit_none_and_a_task_named_twice_are_fine(tmp_path):
    r = run(tmp_path / "run", loop_limit=None, task_ids=iter([IDS[0], IDS[0], IDS[1]]), trials=1)
    assert [(x.task_id, x.trial) for x in r.results] == [(IDS[0], 0), (IDS[1], 0)]


# ---------------------------------------------------------------- where the folder is


def test_out_dir_that_is_a_file_under_a_file_or_unwritable_is_a_results_folder_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ResultsFolderError, match=f"^{re.escape(str(f))} is a file, not a folder"):
        run(f)
    with pytest.raises(ResultsFolderError, match=f"^Cannot use {re.escape(str(f / 'sub'))} as a results folder: "):
        run(f / "sub")
    with pytest.raises(ResultsFolderError, match=r"^Cannot use /proc/tau_env_nope/run as a results folder: .*--out"):
        run("/proc/tau_env_nope/run")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trajectories.jsonl").mkdir()  # a folder where the log goes
    with pytest.raises(ResultsFolderError, match=r"^Cannot use .*run as a results folder: "):
        run(tmp_path / "run")
    assert f.read_text() == "x"


def test_a_disk_that_fills_up_mid_run_is_a_results_folder_error_and_releases_the_lock(tmp_path, monkeypatch):
    import errno

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ResultsFolderError, match=r"^Cannot use \S+ as a results folder: No space left on device\."):
        run(tmp_path / "run")
    monkeypatch.undo()
    assert not (tmp_path / "run" / LOCK_NAME).exists()
    assert run(tmp_path / "run").metrics["episodes"] == len(PLAN)


# ---------------------------------------------------------------- settings on resume


def test_an_oracle_folder_rerun_with_noop_is_refused_not_merged(tmp_path):
    out = tmp_path / "run"
    assert run(out, OracleAgent).metrics["pass@1"] == 1.0
    before = (out / "trajectories.jsonl").read_bytes()
    with pytest.raises(
        ResultsFolderError,
        match=r"^\S+ holds episodes of a run with other settings: "
        r'agent: "tau_env\.agents\.OracleAgent" in the folder, "tau_env\.agents\.NoopAgent" now\. '
        r"Pass --restart \(resume=False in Python\) to start over there, or another --out \(out_dir\)\.$",
    ):
        run(out, NoopAgent)
    assert (out / "trajectories.jsonl").read_bytes() == before
    assert not (out / LOCK_NAME).exists()
    fresh = run(out, NoopAgent, resume=False)
    assert fresh.metrics["pass@1"] == pytest.approx(2 / 3) and len(records(out)) == len(PLAN)


class OtherUser(ScriptedUser):
    pass


@pytest.mark.parametrize(
    ("key", "change"),
    [
        ("agent", {"agent": OracleAgent}),
        ("user", {"user": OtherUser}),
        ("seed", {"seed": 1}),
        ("tasks", {"task_ids": IDS[:2]}),
        ("max_steps", {"max_steps": 40}),
        ("retrieval", {"retrieval": "grep"}),
        ("loop_limit", {"loop_limit": 3}),
        ("model", {"config": {"model": "other"}}),
        ("strict_tools", {"strict_tools": False}),
        ("env", {"env": "factory"}),
        ("user_prompt_version", {"prompt": "tau_env-user-v0"}),
    ],
)
def test_resuming_with_another_identifying_setting_is_refused(tmp_path, monkeypatch, key, change):
    out = tmp_path / "run"
    run(out, trials=1)
    before = (out / "trajectories.jsonl").read_bytes()
    change = dict(change)
    if "prompt" in change:
        monkeypatch.setattr("tau_env.users.USER_PROMPT_VERSION", change.pop("prompt"))
    if change.get("env") == "factory":
        import tau_env

        change.pop("env")
        with pytest.raises(ResultsFolderError, match=rf"other settings: {key}: .*--restart"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                evaluate(lambda: tau_env.make(ENV), NoopAgent, ScriptedUser, task_ids=IDS, trials=1, out_dir=out)
    else:
        with pytest.raises(ResultsFolderError, match=rf"^\S+ holds episodes of a run with other settings: {key}: "):
            run(out, trials=1, **change)
    assert (out / "trajectories.jsonl").read_bytes() == before
    run(out, trials=1, resume=False, **{k: v for k, v in change.items()})  # the hint works


def test_more_or_fewer_trials_and_another_concurrency_may_resume(tmp_path):
    out = tmp_path / "run"
    run(out, trials=1)
    more = run(out, trials=3)
    assert [(r.task_id, r.trial) for r in more.results] == [(t, k) for k in range(3) for t in IDS]
    assert json.loads((out / "config.json").read_text())["resumed_episodes"] == 3
    fewer = run(out, trials=1)  # trials 1 and 2 are beyond this plan: skipped, reported, not counted
    assert fewer.metrics["episodes"] == 3 and len(records(out)) == 9
    assert json.loads((out / "config.json").read_text())["skipped_records"] == {"trial beyond the plan": 6}
    again = asyncio.run(aevaluate(ENV, NoopAgent, ScriptedUser, task_ids=IDS, trials=3, out_dir=out, concurrency=5))
    assert again.metrics["episodes"] == 9 and len(records(out)) == 9  # nothing ran again


def test_a_folder_with_episodes_but_no_readable_config_is_refused(tmp_path):
    out = tmp_path / "run"
    run(out)
    for broken in (None, b"{not json", b"[1, 2]", b"\xff"):
        if broken is None:
            (out / "config.json").unlink()
        else:
            (out / "config.json").write_bytes(broken)
        with pytest.raises(ResultsFolderError, match=r"holds episodes but no readable config\.json.*--restart"):
            run(out)
    assert run(out, resume=False).metrics["episodes"] == len(PLAN)


# ---------------------------------------------------------------- records


def test_each_kind_of_bad_record_is_skipped_and_counted(clean):
    src, metrics, lines = clean
    good = json.loads(lines[0])
    junk = [
        b"42",
        b"{}",
        b"[]",
        b"not json",
        b"\xff\xfe{}",
        json.dumps({**good, "extra": 1}).encode(),
        json.dumps({k: v for k, v in good.items() if k != "grade"}).encode(),
        json.dumps({**good, "trial": "0"}).encode(),
        json.dumps({**good, "reward": True}).encode(),
        json.dumps({**good, "reward": float("nan")}).encode(),
        json.dumps({**good, "usage": {"agent": 5}}).encode(),
        json.dumps({**good, "task_id": "nope"}).encode(),
        json.dumps({**good, "trial": 7, "seed": episode_seed(0, good["task_id"], 7)}).encode(),
        json.dumps({**good, "seed": good["seed"] + 1}).encode(),
        lines[0],
    ]
    out = copy_folder(src, lines + junk + [b'{"task_id": "torn'])
    (out / "trajectories.jsonl").write_bytes((out / "trajectories.jsonl").read_bytes()[:-1])  # no final newline
    with pytest.warns(UserWarning, match=r"trajectories\.jsonl: skipped 16 records: .*not an episode record"):
        r = evaluate(ENV, NoopAgent, ScriptedUser, task_ids=IDS, trials=TRIALS, out_dir=out)
    assert scores(r.metrics) == metrics
    assert json.loads((out / "config.json").read_text())["skipped_records"] == {
        "invalid JSON": 1,
        "invalid UTF-8": 1,
        "not an episode record": 9,
        "task not in this run": 1,
        "trial beyond the plan": 1,
        "seed not of this run": 1,
        "duplicate episode": 1,
        "torn last line": 1,
    }
    assert not (out / "trajectories.jsonl").read_bytes().endswith(b"torn")  # cut off


def test_check_record_accepts_what_the_harness_writes_and_names_what_is_wrong(clean):
    good = json.loads(clean[2][0])
    assert check_record(good) is None
    assert check_record(7) == "a JSON int, not an object"
    assert check_record({**good, "steps": -1}) == "steps is negative"
    assert check_record({**good, "reward": 2.0}) == "reward 2.0 is not in [0, 1]"
    assert check_record({**good, "events": [1]}).startswith("events is [1], not of type")
    assert check_record({**good, "termination_reason": "bogus"}) is None  # a caller's own reason (end_episode)
    assert check_record({**good, "reward": 0.0}) is None  # cut off: 0 whatever the grade
    for bad, why in NONSENSE:
        assert check_record({**good, **bad(good)}).startswith(why)


#: Records of the right top-level types that carry nonsense, and why each is refused.
NONSENSE = [
    (lambda g: {"termination_reason": ""}, "termination_reason is an empty string"),
    (lambda g: {"termination_reason": " "}, "termination_reason is an empty string"),
    (lambda g: {"grade": {"reward": "x", "diff": 5}}, 'grade reward "x" is not a number in [0, 1]'),
    (lambda g: {"grade": {**g["grade"], "reward": 2}}, "grade reward 2 is not a number in [0, 1]"),
    (lambda g: {"grade": {**g["grade"], "reward": True}}, "grade reward true is not a number in [0, 1]"),
    (lambda g: {"grade": {**g["grade"], "db_match": 1}}, "grade db_match 1 is not true or false"),
    (lambda g: {"grade": {**g["grade"], "differing_tables": [1]}}, "grade differing_tables [1] is not a list of names"),
    (lambda g: {"grade": {**g["grade"], "diff": 5}}, "grade diff 5 is not an object"),
    (lambda g: {"grade": {"reward": 1.0}}, "grade db_match (missing) is not true or false"),
    (lambda g: {"reward": 0.5}, "reward 0.5 is neither 0 nor the grade's reward "),
    (lambda g: {"reward": 1.0, "grade": {**g["grade"], "reward": 0.0}}, "reward 1.0 is neither 0 nor the grade's "),
    (lambda g: {"reward": 1.0, "grade": {}}, "reward 1.0 without a grade"),
    (lambda g: {"events": [{"step": "a", "seat": 5, "message": 7}]}, 'events[0] step "a" is not an int >= 1'),
    (lambda g: {"events": [{"step": 0, "seat": "agent", "message": {}}]}, "events[0] step 0 is not an int >= 1"),
    (lambda g: {"events": [{"step": 1, "seat": 5, "message": {}}]}, 'events[0] seat 5 is not "agent" or "user"'),
    (lambda g: {"events": [{"step": 1, "seat": "agent", "message": 7}]}, "events[0] message 7 is not an object"),
    (lambda g: {"events": [{"step": 1, "seat": "user"}]}, "events[0] message (missing) is not an object"),
    (lambda g: {"events": [{"step": 1, "seat": "user", "message": {}, "tool_results": 3}]},
     "events[0] tool_results 3 is not a list of objects"),
]  # fmt: skip


def _mutations(good: dict) -> list[dict]:
    """Copies of a record that are not valid episodes of the plan."""
    wrong = {str: 1, int: "1", float: "x", dict: [], list: {}}
    out = [{**good, "task_id": "nope"}, {**good, "task_id": "damaged_card_standard_expedited"}]
    out += [{**good, "trial": k, "seed": episode_seed(0, good["task_id"], k)} for k in (TRIALS, TRIALS + 3)]
    out += [{**good, "seed": good["seed"] ^ 1}, {**good, "unknown": None}, {**good, "reward": float("inf")}]
    out += [{**good, **bad(good)} for bad, _ in NONSENSE]  # the right types, nonsense inside
    for name, value in good.items():
        out.append({k: v for k, v in good.items() if k != name})
        kind = type(value) if value is not None else str
        out.append({**good, name: wrong[kind] if kind in wrong else [value]})
        out.append({**good, name: True})
    return out


corruption = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 100)),
    st.tuples(st.just("duplicate"), st.integers(0, 100), st.integers(0, 100)),
    st.tuples(st.just("insert"), st.integers(0, 100), st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))),
    st.tuples(
        st.just("insert"), st.integers(0, 100), st.sampled_from([b"0", b"-1.5", b"{}", b"[]", b"null", b'"x"', b"\xff"])
    ),
    st.tuples(st.just("mutate"), st.integers(0, 100), st.integers(0, 10_000), st.integers(0, 100)),
    st.tuples(st.just("bad_utf8"), st.integers(0, 100), st.integers(0, 10_000)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("nonsense"), st.integers(0, 100), st.integers(0, len(NONSENSE) - 1)),
)


def _corrupt(lines: list[bytes], ops) -> bytes:
    lines = list(lines)
    torn = b""
    for op, *a in ops:
        n = len(lines)
        if op == "delete" and n:
            del lines[a[0] % n]
        elif op == "duplicate" and n:
            lines.insert(a[1] % (n + 1), lines[a[0] % n])
        elif op == "insert":
            lines.insert(a[0] % (n + 1), a[1])
        elif op == "mutate" and n:
            try:
                good = json.loads(lines[a[0] % n])
            except ValueError:
                continue
            if check_record(good) is None:
                bad = _mutations(good)
                lines.insert(a[2] % (n + 1), json.dumps(bad[a[1] % len(bad)]).encode())
        elif op == "bad_utf8" and n and lines[a[0] % n]:
            line = lines[a[0] % n]
            i = a[1] % len(line)
            lines.insert(a[0] % n, line[:i] + b"\xc3\x28" + line[i + 1 :])
        elif op == "nonsense" and n:  # right before the record it spoils: read first, it must be refused
            try:
                good = json.loads(lines[a[0] % n])
            except ValueError:
                continue
            if check_record(good) is None:
                lines.insert(a[0] % n, json.dumps({**good, **NONSENSE[a[1]][0](good)}).encode())
        elif op == "truncate":
            data = b"".join(x + b"\n" for x in lines) + torn
            data = data[: a[0] % (len(data) + 1)]
            lines, torn = data.split(b"\n")[:-1], data.split(b"\n")[-1]
    return b"".join(x + b"\n" for x in lines) + torn


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(corruption, max_size=8))
def test_random_corruptions_never_change_the_metrics_of_the_planned_episodes(clean, ops):
    src, metrics, lines = clean
    out = copy_folder(src, [])
    (out / "trajectories.jsonl").write_bytes(_corrupt(lines, ops))
    r = run(out)
    assert scores(r.metrics) == metrics
    assert [(x.task_id, x.trial) for x in r.results] == PLAN
    timeless = [{k: v for k, v in json.loads(x).items() if k != "duration_s"} for x in lines]
    assert [{k: v for k, v in x.to_dict().items() if k != "duration_s"} for x in r.results] == timeless
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kept, _ = read_records(out / "trajectories.jsonl", [(t, k, episode_seed(0, t, k)) for t, k in PLAN])
    assert [(x.task_id, x.trial) for x in kept] == PLAN  # the folder now holds each planned episode
    assert scores(run(out).metrics) == metrics  # and resuming it again runs nothing new
    assert not (out / LOCK_NAME).exists()


# ---------------------------------------------------------------- the lock


def test_a_second_run_on_a_folder_in_use_is_refused_and_the_lock_goes_with_the_run(tmp_path):
    out = tmp_path / "run"
    seen = []

    class Nested(NoopAgent):
        def __call__(self, obs):
            if not seen:
                with pytest.raises(ResultsFolderError, match=r"^\S+ is in use by another run \(process \d+\)") as e:
                    run(out)
                seen.append(str(e.value))
            return super().__call__(obs)

    assert run(out, Nested, trials=1).metrics["episodes"] == 3 and seen
    assert f"(process {os.getpid()})" in seen[0] and not (out / LOCK_NAME).exists()

    class Crash(NoopAgent):
        def __call__(self, obs):
            raise RuntimeError("policy bug")

    with pytest.raises(RuntimeError, match="policy bug"):
        run(out, Crash, trials=1, resume=False)
    assert not (out / LOCK_NAME).exists()
    assert run(out, trials=1).metrics["episodes"] == 3  # released on the exception


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_the_refusal_names_a_holder_that_has_locked_but_not_yet_written_its_pid(tmp_path):
    # the holder takes the lock, then writes its pid: a run refused in between waits a moment for the pid
    import fcntl

    out = tmp_path / "run"
    out.mkdir()
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    writer = threading.Timer(0.15, lambda: os.write(fd, b"4242\n"))
    writer.start()
    try:
        with pytest.raises(ResultsFolderError, match=r"^\S+ is in use by another run \(process 4242\)"):
            run(out)
    finally:
        writer.join()
        os.close(fd)
    assert run(out, trials=1).metrics["episodes"] == 3  # a lock file left with no holder does not block


GATED = """
import sys, time, pathlib
from tau_env import NoopAgent, ScriptedUser, evaluate
from tau_env.error import ResultsFolderError
out = pathlib.Path(sys.argv[1])
class Gate(NoopAgent):
    def __call__(self, obs):
        (out.parent / f"started-{{__import__('os').getpid()}}").touch()
        deadline = time.time() + 60
        while not (out.parent / "go").exists() and time.time() < deadline:
            time.sleep(0.01)
        return super().__call__(obs)
try:
    evaluate("{env}", Gate, ScriptedUser, task_ids={ids}, trials={trials}, out_dir=out)
except ResultsFolderError as e:
    print(e)
    sys.exit(3)
"""


def test_two_processes_started_at_once_on_one_folder(tmp_path):
    script = tmp_path / "gated.py"
    script.write_text(GATED.format(env=ENV, ids=IDS, trials=TRIALS))
    out = tmp_path / "run"
    start = lambda: subprocess.Popen(  # noqa: E731
        [sys.executable, str(script), str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    procs = [start(), start()]
    deadline = time.time() + 60
    while time.time() < deadline and not (
        any(p.poll() is not None for p in procs) and list(tmp_path.glob("started-*"))
    ):
        time.sleep(0.02)
    (tmp_path / "go").touch()
    outs = [p.communicate(timeout=60) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 3], outs
    refused = next(o for p, o in zip(procs, outs) if p.returncode == 3)[0]
    assert re.match(r"^\S+ is in use by another run \(process \d+\)", refused)
    assert sorted((r["task_id"], r["trial"]) for r in records(out)) == sorted(PLAN)
    assert len(list(tmp_path.glob("started-*"))) == 1  # only one of them ran episodes


def test_a_killed_run_leaves_no_lock_behind(tmp_path):
    script = tmp_path / "gated.py"
    script.write_text(GATED.format(env=ENV, ids=IDS, trials=TRIALS))
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], cwd=ROOT)
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob("started-*")):
        time.sleep(0.02)
    assert (out / LOCK_NAME).exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert run(out).metrics["episodes"] == len(PLAN)  # the lock file is there, but nobody holds it


# ---------------------------------------------------------------- any text


def canon(x):
    """``x`` as JSON reads it back: a pair of surrogate code points is the character it encodes."""
    return json.loads(json.dumps(x))


any_text = st.text(st.characters(blacklist_categories=()), max_size=30)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=any_text, arg=any_text, note=any_text)
def test_any_model_text_is_held_faithfully_by_every_file(tmp_path_factory, text, arg, note):
    class Talker:
        """Says ``text``, then calls a tool with ``arg`` (as a JSON string and as a dict), then stops."""

        def __init__(self):
            self.n = 0

        def __call__(self, obs):
            self.n += 1
            if self.n > 2:
                return {"role": "assistant", "content": "Goodbye " + text}
            args = json.dumps({"query": arg}, ensure_ascii=self.n == 1) if self.n == 1 else {"query": arg}
            call = {"id": f"c{self.n}", "type": "function", "function": {"name": "find_customer", "arguments": args}}
            return {"role": "assistant", "content": text, "tool_calls": [call]}

    out = tmp_path_factory.mktemp("text") / "run"
    r = evaluate(ENV, Talker, ScriptedUser, task_ids=IDS[:1], out_dir=out, config={"note": note, note: "key"})
    (record,) = records(out)
    assert record == canon(r.results[0].to_dict())
    config = json.loads((out / "config.json").read_bytes())
    assert config["note"] == canon(note) and config[canon(note)] == "key"
    assert json.loads((out / "metrics.json").read_bytes()) == canon(r.metrics)
    (out / "summary.txt").read_text(encoding="utf-8")
    html = (out / "report.html").read_text(encoding="utf-8")
    payload = re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S).group(1)
    assert "</" not in payload and "<!--" not in payload
    assert json.loads(payload)["episodes"][0]["events"] == record["events"]


@given(text=any_text)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_folder_writes_text_the_env_did_not_clean_and_reads_it_back(tmp_path_factory, text):
    out = tmp_path_factory.mktemp("raw")
    plan = [("t" + text, 0, 1)]
    grade = {"reward": 1.0, "db_match": True, "differing_tables": [text], "diff": {text: text}}
    events = [{"step": 1, "seat": "agent", "message": {"content": text}}]
    ep = EpisodeResult("t" + text, 0, 1, 1.0, "r" + text, 2, 0, 0, grade, events, 0.0, {}, text, {})
    folder = ResultsFolder(out, {"note": text}, plan, resume=True)
    try:
        folder.episode(ep)
        folder.finish({"per_task": {text: 1}}, text, [ep.to_dict()], text)
    finally:
        folder.close()
    again = ResultsFolder(out, {"note": text}, plan, resume=True)
    again.close()
    assert [canon(r.to_dict()) for r in again.previous] == [canon(ep.to_dict())]
    for name in ("trajectories.jsonl", "config.json", "metrics.json", "summary.txt", "report.html"):
        (out / name).read_bytes().decode("utf-8")  # valid UTF-8, every one


def _strict(text):
    """JSON as a browser's ``JSON.parse`` reads it: no NaN or Infinity."""

    def bad(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=bad)


def test_the_report_keeps_script_breaking_text_and_nan_inside_its_data(tmp_path):
    from tau_env import report

    nasty = "</script><!--<script>alert(1)</SCRIPT>\u2028__TITLE__ __DATA__ \ud83d"
    ep = {"task_id": nasty, "trial": 0, "reward": 0.0, "events": [{"message": {"content": nasty}}], "error": nasty}
    metrics = {"pass@1": float("nan"), "pass^k": {"1": float("inf")}, "per_task": {nasty: 1}}
    html = report.write(tmp_path / "r.html", [ep], metrics, title=nasty).read_text(encoding="utf-8")
    payload = re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S).group(1)
    assert "<" not in payload
    data = _strict(payload)
    assert data["episodes"][0]["events"][0]["message"]["content"] == nasty
    assert data["metrics"]["pass@1"] == "nan" and data["metrics"]["pass^k"] == {"1": "inf"}
    assert html.count("</script>") == 2 and "&lt;/script&gt;" in html  # the title is escaped
    assert "__TITLE__ __DATA__" in html.split("</title>")[0]  # and no slot is filled inside another


# ---------------------------------------------------------------- a policy's identity on resume


class _Refuses(OracleAgent):
    def __call__(self, obs):
        return say("I refuse")


_Refuses.__name__ = _Refuses.__qualname__ = "OracleAgent"  # the same class name as the oracle


class _Says:
    def __init__(self, text="bye"):
        self.text = text

    def __call__(self, obs):
        return say(self.text)


def test_a_policy_is_known_by_module_and_class_not_its_class_name_alone(tmp_path):
    out = tmp_path / "run"
    run(out, OracleAgent)
    with pytest.raises(
        ResultsFolderError,
        match=r'^\S+ holds episodes of a run with other settings: agent: "tau_env\.agents\.OracleAgent" in the '
        r'folder, "\S*test_results_folder\.OracleAgent" now\. Pass --restart',
    ):
        run(out, _Refuses)
    assert json.loads((out / "config.json").read_text())["agent"] == "tau_env.agents.OracleAgent"


def test_a_factory_is_known_by_its_bound_arguments(tmp_path):
    out = tmp_path / "run"
    run(out, functools.partial(_Says, "a"))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["agent"] == f"{_Says.__module__}._Says from {_Says.__module__}._Says('a')"
    for other in (functools.partial(_Says, "b"), functools.partial(_Says, text="a"), _Says):
        with pytest.raises(ResultsFolderError, match=r"^\S+ holds episodes of a run with other settings: agent: "):
            run(out, other)
    assert run(out, functools.partial(_Says, "a")).metrics["episodes"] == len(PLAN)  # the same: resumed

    out2 = tmp_path / "closure"

    def says(text):
        return lambda: _Says(text)

    run(out2, says("a"))
    assert json.loads((out2 / "config.json").read_text())["agent"].endswith(".says.<locals>.<lambda>('a')")
    with pytest.raises(ResultsFolderError, match=r"^\S+ holds episodes of a run with other settings: agent: "):
        run(out2, says("b"))


def test_a_folder_that_names_policies_by_class_alone_is_refused_with_the_reason(tmp_path):
    out = tmp_path / "run"
    run(out, OracleAgent)
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, "agent": "OracleAgent", "user": "ScriptedUser"}))
    with pytest.raises(
        ResultsFolderError,
        match=r'^\S+ holds episodes of a run with other settings: agent: "OracleAgent" in the folder, '
        r'"tau_env\.agents\.OracleAgent" now; user: .*\. \(Earlier versions of tau_env named a policy by its '
        r"class alone; .*cannot be resumed\.\) Pass --restart",
    ):
        run(out, OracleAgent)


# ---------------------------------------------------------------- only regular files of its own

OWN = [LOCK_NAME, "config.json", "trajectories.jsonl", "metrics.json", "summary.txt", "report.html"]


def _refused(name, kind):
    return rf"^Cannot use \S+ as a results folder: {re.escape(name)} there is {kind}, not a regular file, .*--out"


@pytest.mark.parametrize("resume", [True, False])
@pytest.mark.parametrize("name", OWN)
def test_a_symlinked_file_in_the_folder_is_refused_before_anything_is_written(clean, tmp_path, name, resume):
    src, _, lines = clean
    out = copy_folder(src, lines[:2])
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious\npartial line")  # a torn "last line": resume would cut it
    (out / name).unlink(missing_ok=True)
    (out / name).symlink_to(outside)
    before = {p.name: p.read_bytes() for p in out.iterdir() if not p.is_symlink()}
    with pytest.raises(ResultsFolderError, match=_refused(name, "a symbolic link")):
        run(out, resume=resume)
    assert outside.read_bytes() == b"precious\npartial line"
    assert {p.name: p.read_bytes() for p in out.iterdir() if not p.is_symlink()} == before


@pytest.mark.parametrize("name", OWN)
def test_a_fifo_or_folder_in_the_folder_is_refused_without_blocking(clean, name):
    src, _, lines = clean
    for kind, make in (("a FIFO", os.mkfifo), ("a folder", os.mkdir)):
        out = copy_folder(src, lines[:2])  # a valid config.json: resume would read trajectories.jsonl
        (out / name).unlink(missing_ok=True)
        make(out / name)
        errors = []

        def go(out=out, errors=errors):
            try:
                run(out)
            except ResultsFolderError as e:
                errors.append(str(e))

        t = threading.Thread(target=go, daemon=True)
        t.start()
        t.join(120)  # a generous guard against hanging the suite, not a speed check
        assert not t.is_alive(), f"evaluate blocked on {kind} {name}"
        assert len(errors) == 1 and re.match(_refused(name, kind), errors[0])


def test_a_link_made_during_the_run_is_refused_when_written(clean, tmp_path):
    src, _, lines = clean
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious")
    plan = [(t, k, episode_seed(0, t, k)) for t, k in PLAN]
    folder = ResultsFolder(tmp_path / "run", {"x": 1}, plan, resume=True)
    try:
        (tmp_path / "run" / "metrics.json").symlink_to(outside)
        with pytest.raises(ResultsFolderError, match=_refused("metrics.json", "a symbolic link")):
            folder.finish({}, "s", [], "t")
    finally:
        folder.close()
    assert outside.read_bytes() == b"precious"


def test_the_folder_itself_may_be_a_link_to_a_folder(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    r = run(tmp_path / "link", task_ids=IDS[:1], trials=1)
    assert r.metrics["episodes"] == 1 and (real / "metrics.json").is_file()


# ---------------------------------------------------------------- what the runners are given

_ENV_MSG = r"env must be a registered id or a zero-argument factory of envs; got "
_SEAT_MSG = (
    r" must be a policy \(a function of the observation, or an object with __call__ or aact\), "
    r"a policy class or a zero-argument factory of policies; got "
)
_OUT_MSG = (
    r"out_dir must be a folder path \(a non-empty str or os\.PathLike; the current folder is '\.'\) or None; got "
)
BAD_INPUTS = [
    ({"env": 5}, _ENV_MSG + r"5\.$"),
    ({"env": None}, _ENV_MSG + r"None\.$"),
    ({"env": lambda x: x}, _ENV_MSG + r"<function "),
    ({"env": "make"}, None),  # a TauEnv instance: see below
    ({"agent": None}, "agent" + _SEAT_MSG + r"None\.$"),
    ({"agent": 5}, "agent" + _SEAT_MSG + r"5\.$"),
    ({"user": "ScriptedUser"}, "user" + _SEAT_MSG + r"'ScriptedUser'\.$"),
    ({"out_dir": 5}, _OUT_MSG + r"5\.$"),
    ({"out_dir": ""}, _OUT_MSG + r"''\.$"),
    ({"out_dir": "  "}, _OUT_MSG + r"'  '\.$"),
    ({"out_dir": b"run"}, _OUT_MSG + r"b'run'\.$"),
    ({"out_dir": "a\0b"}, _OUT_MSG + r"'a\\x00b'\.$"),
    ({"out_dir": "run\ud800"}, _OUT_MSG + r"'run\\ud800'\.$"),
    ({"config": 5}, r"config must be a dict of extra config\.json entries with str keys, or None; got 5\.$"),
    ({"config": {(1,): 2}}, r"config must be a dict of extra config\.json entries with str keys, or None; got "),
    ({"resume": "yes"}, r"resume must be True or False; got 'yes'\.$"),
    ({"resume": 1}, r"resume must be True or False; got 1\.$"),
    ({"progress": "x"}, r"progress must be True or False; got 'x'\.$"),
    ({"progress": None}, r"progress must be True or False; got None\.$"),
]


@pytest.mark.parametrize("backend", ["evaluate", "aevaluate", "ray_evaluate"])
@pytest.mark.parametrize(("kw", "message"), BAD_INPUTS)
def test_bad_runner_inputs_raise_invalid_option_and_write_nothing(tmp_path, monkeypatch, backend, kw, message):
    monkeypatch.chdir(tmp_path)
    call = {
        "evaluate": evaluate,
        "aevaluate": lambda *a, **k: asyncio.run(aevaluate(*a, **k)),
        "ray_evaluate": _ray_evaluate,  # checked before Ray is imported
    }[backend]
    args = {"env": ENV, "agent": NoopAgent, "user": ScriptedUser, "out_dir": tmp_path / "run", **kw}
    if args["env"] == "make":
        args["env"] = tau_env.make(ENV)
        message = (
            r"env must be a registered id or a zero-argument factory of envs; got a TauEnv instance \(each episode "
            r"needs an env of its own\): pass its id, or a factory such as lambda: tau_env\.make\(\.\.\.\)\.$"
        )
    with pytest.raises(InvalidOptionError, match=f"^{message}"):
        call(args.pop("env"), args.pop("agent"), args.pop("user"), task_ids=IDS[:1], **args)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("backend", "kw", "message"),
    [
        ("evaluate", {"concurrency": 0}, r"concurrency is a setting of aevaluate and ray_evaluate, not of evaluate"),
        ("evaluate", {"episode_retries": 1}, r"episode_retries is a setting of aevaluate and ray_evaluate, not of "),
        ("evaluate", {"chunk_size": 4}, r"chunk_size is a setting of ray_evaluate, not of evaluate; call ray_eval"),
        ("aevaluate", {"address": "auto"}, r"address is a setting of ray_evaluate, not of aevaluate; call ray_eval"),
    ],
)
def test_a_setting_of_another_runner_is_named_as_such(tmp_path, backend, kw, message):
    call = {"evaluate": evaluate, "aevaluate": lambda *a, **k: asyncio.run(aevaluate(*a, **k))}[backend]
    with pytest.raises(InvalidOptionError, match=f"^{message}"):
        call(ENV, NoopAgent, ScriptedUser, out_dir=tmp_path / "run", **kw)
    assert not (tmp_path / "run").exists()


def test_make_keywords_with_an_env_factory_are_refused(tmp_path):
    with pytest.raises(
        InvalidOptionError,
        match=r"^Keywords for make \(max_steps, retrieval\) apply only to a registered id; env is a factory: give ",
    ):
        evaluate(lambda: tau_env.make(ENV), NoopAgent, ScriptedUser, max_steps=3, retrieval="grep")


_LEAF = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4)
_NESTED = st.recursive(_LEAF, lambda inner: st.dictionaries(st.sampled_from("abc"), inner, max_size=3), max_leaves=6)


@given(old=st.dictionaries(st.sampled_from(["agent", "seed", "x"]), _NESTED, max_size=3), edits=st.data())
def test_a_refused_resume_names_the_nested_setting_that_differs(old, edits):
    """Each phrase names a dotted path whose values differ in the two configs (so two agents whose
    descriptions differ in one field name that field), and none is said when they are the same."""
    from tau_env.harness.results import _identity, differences

    new = json.loads(json.dumps(old))
    if isinstance(new.get("agent"), dict) and new["agent"]:
        new["agent"][edits.draw(st.sampled_from(sorted(new["agent"])))] = edits.draw(_LEAF)
    elif edits.draw(st.booleans()):
        new["seed"] = edits.draw(_LEAF)

    def at(cfg, path):
        for part in path.split("."):
            if not isinstance(cfg, dict) or part not in cfg:
                return "(missing)"
            cfg = cfg[part]
        return cfg

    said = differences(old, new)
    assert bool(said) == (_identity(old) != _identity(new))
    for phrase in said:
        path = phrase.split(": ", 1)[0]
        assert at(_identity(old), path) != at(_identity(new), path)
        assert not (isinstance(at(_identity(old), path), dict) and isinstance(at(_identity(new), path), dict))


@pytest.mark.parametrize(
    "content, named",
    [
        (b'{"model_type": "llama", "vocab_size": 300}', "a model's (model_type)"),
        (b'{"name": "my-project", "version": 3}', "not a results record"),
        (b"[1, 2]", "not a results record"),
        (b"\xff not json", "not a results record"),
    ],
)
@pytest.mark.parametrize("resume", [True, False])
def test_a_folder_whose_config_json_is_someone_elses_is_refused_and_left_as_it_was(tmp_path, content, named, resume):
    # e.g. --out at a model folder: the run's record replaced the model's config.json, and --restart
    # (resume=False) must not make the folder ours either
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_bytes(content)
    (out / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(ResultsFolderError, match=re.escape(f"holds a config.json that is {named}, not tau_env's")):
        run(out, resume=resume)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert (out / "config.json").read_bytes() == content


def test_a_folder_of_ours_is_still_ours_after_a_rerun_and_a_restart(tmp_path):
    out = tmp_path / "run"
    key = ("pass@1", "episodes", "per_task")
    first = {k: run(out).metrics[k] for k in key}
    assert first["episodes"] == len(PLAN)
    assert {k: run(out).metrics[k] for k in key} == first
    assert {k: run(out, resume=False).metrics[k] for k in key} == first
