import asyncio
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tau_env import NoopAgent, OracleAgent, ScriptedUser, TauEnv, aevaluate, evaluate, pass_hat_k, say
from tau_env.error import ResultsFolderError
from tau_env.harness import compute_metrics, episode_seed, format_metrics


def test_pass_hat_k_formula():
    # one task solved 2 of 4 times, one 4 of 4
    assert pass_hat_k([2, 4], [4, 4], 1) == pytest.approx((0.5 + 1) / 2)
    assert pass_hat_k([2, 4], [4, 4], 2) == pytest.approx((1 / 6 + 1) / 2)
    assert pass_hat_k([2, 4], [4, 4], 4) == pytest.approx(0.5)
    assert math.isnan(pass_hat_k([1], [1], 2))


@given(
    st.lists(st.tuples(st.integers(0, 8), st.integers(1, 8)).map(lambda t: (min(t), max(t))), min_size=1, max_size=6)
)
def test_pass_hat_k_is_monotone_and_bounded(tasks):
    c, n = zip(*tasks)
    vals = [pass_hat_k(c, n, k) for k in range(1, min(n) + 1)]
    assert all(0 <= v <= 1 for v in vals)
    assert all(a >= b - 1e-12 for a, b in zip(vals, vals[1:]))


def test_compute_metrics_standard_error():
    rows = [
        {"task_id": t, "reward": r, "termination_reason": "user_stop", "steps": 2, "tool_calls": 1, "tool_errors": 0}
        for t, r in [("a", 1), ("a", 0), ("b", 1), ("b", 1)]
    ]
    m = compute_metrics(rows)
    assert m["pass@1"] == 0.75 and m["trials"] == 2
    # per-task means 0.5 and 1.0: sd 0.3536 over 2 tasks -> s.e. 0.25
    assert m["pass@1_se"] == pytest.approx(0.25)
    assert m["pass^k"]["2"] == pytest.approx(0.5)
    assert "pass@1" in format_metrics(m, "t")


def test_episode_seeds_are_stable():
    # Pinned: the seeds of a published run must not change between versions, processes or hash salts.
    assert [episode_seed(0, "a", 0), episode_seed(0, "a", 1), episode_seed(7, "task_001", 3)] == [
        843680772,
        1104693125,
        2568991057,
    ]
    assert len({episode_seed(0, "a", k) for k in range(50)}) == 50


def test_evaluate_writes_results(domain, tmp_path):
    run = evaluate(lambda: TauEnv(domain), OracleAgent, ScriptedUser, trials=2, out_dir=tmp_path / "run")
    assert run.metrics["pass@1"] == 1.0 and run.metrics["pass^k"] == {"1": 1.0, "2": 1.0}
    lines = (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 6 and {json.loads(x)["task_id"] for x in lines} == {"restock", "confirm", "nothing"}
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["episodes"] == 6
    assert "pass@1" in (tmp_path / "run" / "summary.txt").read_text()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["trials"] == 2


def test_noop_fails_write_tasks(domain):
    run = evaluate(lambda: TauEnv(domain), NoopAgent, ScriptedUser)
    assert {r.task_id: r.reward for r in run.results} == {"restock": 0.0, "confirm": 0.0, "nothing": 1.0}


def test_async_matches_sync_and_accepts_async_policies(domain):
    class AsyncOracle(OracleAgent):
        async def aact(self, obs):
            await asyncio.sleep(0)
            return self(obs)

    sync = evaluate(lambda: TauEnv(domain), OracleAgent, ScriptedUser, trials=2, seed=3)
    run = asyncio.run(aevaluate(lambda: TauEnv(domain), AsyncOracle, ScriptedUser, trials=2, seed=3, concurrency=4))
    assert [(r.task_id, r.trial, r.seed, r.reward, r.events) for r in run.results] == [
        (r.task_id, r.trial, r.seed, r.reward, r.events) for r in sync.results
    ]


def test_evaluate_rejects_unknown_task(domain):
    from tau_env.error import UnknownTaskError

    with pytest.raises(UnknownTaskError, match=r"^Domain 'tiny' has no task 'nope' \(3 tasks\)\.$"):
        evaluate(lambda: TauEnv(domain), OracleAgent, ScriptedUser, task_ids=["nope"])


def test_ray_backend_gives_the_same_metrics_as_the_local_one(tmp_path):
    ray = pytest.importorskip("ray")
    from tau_env.harness.ray_backend import ray_evaluate

    local = evaluate("harbor-bank-v0", OracleAgent, ScriptedUser, trials=2, seed=4, out_dir=tmp_path / "local")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        dist = ray_evaluate(
            "harbor-bank-v0", OracleAgent, ScriptedUser, trials=2, seed=4, out_dir=tmp_path / "ray", chunk_size=20
        )
        # The same results-folder rules as the local backends: other settings are refused ...
        with pytest.raises(
            ResultsFolderError,
            match=r'other settings: agent: "tau_env\.agents\.OracleAgent" in the folder, "tau_env\.agents\.Noop',
        ):
            ray_evaluate("harbor-bank-v0", NoopAgent, ScriptedUser, trials=2, seed=4, out_dir=tmp_path / "ray")
        # ... and bad or duplicated records are skipped on resume, each planned episode counted once.
        one = tmp_path / "one"
        ids = ["lost_card_standard_shipping"]
        ray_evaluate("harbor-bank-v0", OracleAgent, ScriptedUser, task_ids=ids, trials=1, out_dir=one)
        with open(one / "trajectories.jsonl", "ab") as f:
            f.write(b"{}\n" + (one / "trajectories.jsonl").read_bytes().splitlines()[0] + b"\n")
        with pytest.warns(UserWarning, match="skipped 2 records"):
            more = ray_evaluate("harbor-bank-v0", OracleAgent, ScriptedUser, task_ids=ids, trials=2, out_dir=one)
        assert [(r.task_id, r.trial) for r in more.results] == [(ids[0], 0), (ids[0], 1)]
        assert json.loads((one / "config.json").read_text())["resumed_episodes"] == 1
    finally:
        ray.shutdown()
    strip = lambda m: {k: v for k, v in m.items() if k != "time_to_done_s"}  # noqa: E731
    assert strip(dist.metrics) == strip(local.metrics)
    assert [(r.task_id, r.trial, r.seed, r.reward, r.events) for r in dist.results] == [
        (r.task_id, r.trial, r.seed, r.reward, r.events) for r in local.results
    ]
    assert sorted((tmp_path / "ray").iterdir()) == [
        tmp_path / "ray" / f
        for f in ("config.json", "metrics.json", "report.html", "summary.txt", "trajectories.jsonl")
    ]


# ---------------------------------------------------------------- the loop rule never crashes


def _cycle():
    d = {}
    d["self"] = d
    return d


def _deep(n):
    x = []
    for _ in range(n):
        x = [x]
    return x


_odd_values = st.one_of(
    st.none(),
    st.integers(),
    st.just(10**5000),
    st.floats(),
    st.text(),
    st.binary(max_size=5),
    st.builds(_cycle),
    st.builds(_deep, st.just(100_000)),
    st.tuples(st.integers()),
    st.dictionaries(st.tuples(st.integers()), st.integers(), min_size=1, max_size=2),
)
_odd_functions = st.one_of(
    _odd_values,
    st.fixed_dictionaries({"name": _odd_values, "arguments": _odd_values}),
    st.fixed_dictionaries({"name": st.sampled_from(["get_item", "add_stock"]), "arguments": _odd_values}),
)


class _Repeats:
    """An agent that sends ``action`` ``times`` times, then says goodbye."""

    def __init__(self, action, times):
        self.action, self.times, self.n = action, times, 0

    def __call__(self, obs):
        self.n += 1
        return self.action if self.n <= self.times else say("bye")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_odd_functions, st.integers(1, 3))
def test_malformed_tool_calls_never_stop_the_run(domain, function, times):
    # env.step turns these into tool errors; the loop rule (which compares actions) must not raise on them
    action = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "x", "type": "function", "function": function}],
    }
    run = evaluate(
        lambda: TauEnv(domain, max_steps=8), lambda: _Repeats(action, times), ScriptedUser, task_ids=["nothing"]
    )
    [r] = run.results
    assert r.tool_calls >= 1 and r.tool_errors >= 1


@pytest.mark.parametrize("function", [None, "get_item", {"name": "get_item", "arguments": {(1, 2): 3}}, _cycle()])
def test_repeated_malformed_calls_count_as_a_loop(domain, function):
    action = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "x", "type": "function", "function": function}],
    }
    run = evaluate(
        lambda: TauEnv(domain, max_steps=30),
        lambda: _Repeats(action, 10),
        ScriptedUser,
        task_ids=["nothing"],
        loop_limit=3,
    )
    [r] = run.results
    assert r.termination_reason == "loop" and r.tool_calls == 3
