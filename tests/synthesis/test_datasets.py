"""SFT and RL datasets: teacher rollouts through the harness, kept or dropped for the right reasons."""

from __future__ import annotations

import asyncio
import json

import pytest
from tau_env.synthesis.datasets import build_rl, build_sft, loop_problem

import tau_env
from tau_env import NoopAgent, OracleAgent, Policy, load_tasks, save_tasks
from tau_env.error import InvalidOptionError
from tau_env.harness import episode_seed
from tau_env.llm import ChatClient
from tau_env.testing import FakeOpenAI, text, tool

IDS = [
    "lost_card_standard_shipping",
    "damaged_card_standard_expedited",
    "refund_overdraft_standard_first",
    "travel_notice_simple",
]


@pytest.fixture(scope="module")
def harbor():
    return tau_env.make("harbor-bank-v0").domain


@pytest.fixture
def tasks_file(tmp_path, harbor):
    path = tmp_path / "tasks.jsonl"
    save_tasks([harbor.task(i) for i in IDS], path)
    return path


def first_request(body) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def oracle_script(harbor, plays):
    """An agent seat that plays, per task (found by its first request), ``plays[task_id](body)``."""
    by_request = {harbor.task(i).scenario.requests[0]: i for i in IDS}

    def script(body):
        return plays[by_request[first_request(body)]](body)

    return script


def chain(actions):
    def play(body):
        done = sum(1 for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls"))
        if done < len(actions):
            a = actions[done]
            return tool(a.name, a.arguments, call_id=f"c{done}")
        return text("All done. Anything else?")

    return play


def garbage(body):
    return text("Sorry, I cannot help with that today.")


def test_build_sft_keeps_successful_loop_free_episodes(tmp_path, tasks_file, harbor):
    acts = {i: harbor.task(i).actions for i in IDS}
    plays = {
        IDS[0]: chain(acts[IDS[0]]),
        IDS[1]: chain(acts[IDS[1]]),
        IDS[2]: garbage,
        IDS[3]: chain([acts[IDS[3]][0], acts[IDS[3]][0], *acts[IDS[3]][1:]]),  # one identical call twice
    }
    with FakeOpenAI(oracle_script(harbor, plays)) as server:
        stats = asyncio.run(
            build_sft(
                tasks_file, "harbor-bank-v0", tmp_path / "sft", agent={"model": "teacher", "base_url": server.url}
            )
        )
    assert stats["episodes"] == 4 and stats["successful"] == 3 and stats["kept"] == 2 and stats["examples"] == 2
    assert stats["dropped"] == {"failed": 1, "loop": 1, "too_many_calls": 0}
    lines = [json.loads(x) for x in (tmp_path / "sft" / "sft.jsonl").read_text().splitlines()]
    assert sorted(x["task_id"] for x in lines) == sorted(IDS[:2])
    for ex in lines:
        assert set(ex) == {"task_id", "trial", "reward", "messages", "tools", "train"}
        assert ex["reward"] == 1.0 and len(ex["train"]) == len(ex["messages"]) and any(ex["train"])
        assert any(m.get("tool_calls") for m in ex["messages"])
    assert json.loads((tmp_path / "sft" / "stats.json").read_text())["kept"] == 2
    # the same as tau-env export-sft on the kept episodes
    again = tmp_path / "again.jsonl"
    tau_env.sft.export(tmp_path / "sft" / "kept.jsonl", jsonl=again)
    assert again.read_text() == (tmp_path / "sft" / "sft.jsonl").read_text()


def test_build_sft_call_budget_and_resume(tmp_path, tasks_file):
    out = tmp_path / "sft"
    stats = asyncio.run(
        build_sft(tasks_file, "harbor-bank-v0", out, agent=OracleAgent, max_calls_factor=0.5, max_calls_extra=0)
    )
    assert stats["successful"] == 4 and stats["kept"] == 0 and stats["dropped"]["too_many_calls"] == 4
    stats = asyncio.run(build_sft(tasks_file, "harbor-bank-v0", out, agent=OracleAgent, trials=2))
    assert stats["episodes"] == 8 and stats["kept"] == 8  # the first trial's episodes were resumed, not rerun
    assert len((out / "sft.jsonl").read_text().splitlines()) == 8


def test_loop_problem_counts_identical_calls_with_identical_output():
    def ev(name, args, out, cid):
        return {
            "seat": "agent",
            "message": {"tool_calls": [{"id": cid, "function": {"name": name, "arguments": json.dumps(args)}}]},
            "tool_results": [{"tool_call_id": cid, "name": name, "content": out}],
        }

    ep = {"events": [ev("a", {"x": 1}, "ok", "1"), ev("a", {"x": 1}, "changed", "2")]}
    assert loop_problem(ep, 2, 3, 0) is None  # same call, another output: not a loop
    ep["events"].append(ev("a", {"x": 1}, "ok", "3"))
    assert loop_problem(ep, 2, 3, 0) == "loop"
    assert loop_problem({"events": ep["events"][:2]}, 0, 3, 1) == "too_many_calls"


class EveryOtherSeed(Policy):
    """The oracle on even episode seeds, a do-nothing agent on odd ones."""

    def reset(self, task=None, seed=None):
        self.inner = OracleAgent() if (seed or 0) % 2 == 0 else NoopAgent()
        self.inner.reset(task, seed)

    def __call__(self, obs):
        return self.inner(obs)


def expected_rate(task_id, rollouts, seed=0):
    return sum(episode_seed(seed, task_id, t) % 2 == 0 for t in range(rollouts)) / rollouts


def test_build_rl_band_with_builtin_policies(tmp_path, tasks_file):
    ids = IDS[:3]
    easy = asyncio.run(build_rl(tasks_file, "harbor-bank-v0", tmp_path / "easy", policy=OracleAgent, rollouts=4))
    assert easy["too_easy"] == 4 and easy["kept"] == 0
    assert (tmp_path / "easy" / "tasks.jsonl").read_text() == ""
    rows = [json.loads(x) for x in (tmp_path / "easy" / "stats.jsonl").read_text().splitlines()]
    assert [r["pass_rate"] for r in rows] == [1.0] * 4 and not any(r["kept"] for r in rows)
    hard = asyncio.run(build_rl(tasks_file, "harbor-bank-v0", tmp_path / "hard", policy=NoopAgent, rollouts=4))
    assert hard["too_hard"] == 4 and hard["kept"] == 0
    mixed = asyncio.run(build_rl(tasks_file, "harbor-bank-v0", tmp_path / "mixed", policy=EveryOtherSeed, rollouts=8))
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "mixed" / "stats.jsonl").read_text().splitlines())}
    for i in IDS:
        assert rows[i]["n"] == 8 and rows[i]["pass_rate"] == expected_rate(i, 8)
        assert rows[i]["kept"] == (0.1 <= expected_rate(i, 8) <= 0.9)
    kept = load_tasks(tmp_path / "mixed" / "tasks.jsonl")
    assert mixed["kept"] == len(kept) >= 3 and set(ids) & {t.id for t in kept}
    for t in kept:
        assert t.metadata["rollouts"] == {"n": 8, "passed": rows[t.id]["passed"], "pass_rate": rows[t.id]["pass_rate"]}
    # the kept file is an ordinary task file the domain plays
    tau_env.check_task(tau_env.make("harbor-bank-v0", tasks=str(tmp_path / "mixed" / "tasks.jsonl")).domain, kept[0].id)


def test_build_rl_through_a_model_server_spreads_pass_rates(tmp_path, tasks_file, harbor):
    acts = {i: harbor.task(i).actions for i in IDS}

    def by_seed(i):
        def play(body):
            return chain(acts[i])(body) if body.get("seed", 0) % 2 == 0 else garbage(body)

        return play

    plays = {IDS[0]: chain(acts[IDS[0]]), IDS[1]: garbage, IDS[2]: by_seed(IDS[2]), IDS[3]: by_seed(IDS[3])}
    with FakeOpenAI(oracle_script(harbor, plays)) as server:
        client = ChatClient("policy", server.url)
        stats = asyncio.run(build_rl(tasks_file, "harbor-bank-v0", tmp_path / "rl", policy=client, rollouts=6))
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "rl" / "stats.jsonl").read_text().splitlines())}
    assert rows[IDS[0]]["why"] == "too_easy" and rows[IDS[1]]["why"] == "too_hard"
    for i in IDS[2:]:
        assert rows[i]["pass_rate"] == expected_rate(i, 6)
    assert stats["kept"] == sum(0.1 <= expected_rate(i, 6) <= 0.9 for i in IDS[2:]) >= 1


def test_bad_settings(tmp_path, tasks_file):
    with pytest.raises(InvalidOptionError, match="band"):
        asyncio.run(build_rl(tasks_file, "harbor-bank-v0", tmp_path, policy=OracleAgent, band=(0.9, 0.1)))
    with pytest.raises(InvalidOptionError, match="rollouts"):
        asyncio.run(build_rl(tasks_file, "harbor-bank-v0", tmp_path, policy=OracleAgent, rollouts=0))
    with pytest.raises(InvalidOptionError, match="model"):
        asyncio.run(build_sft(tasks_file, "harbor-bank-v0", tmp_path, agent={"base_url": "http://127.0.0.1:1/v1"}))
