"""The shipped Harbor Bank domain meets its contract: size, coverage, and every task solvable."""

import pytest

import tau_env
from tau_env import NoopAgent, OracleAgent, ScriptedUser, evaluate
from tau_env.checker import domain_problems


@pytest.fixture(scope="module")
def bank():
    return tau_env.registry.load_domain("harbor-bank-v0")


def test_size_and_tool_mix(bank):
    tools = bank.toolbox("bm25").tools.values()
    agent = [t for t in tools if t.side == "agent"]
    user = [t for t in tools if t.side == "user"]
    assert len(bank.documents) >= 60
    assert len(agent) >= 15 and sum(t.discoverable for t in agent) >= 5
    assert len(user) >= 2 and any(t.handover for t in user) and any(not t.handover for t in user)
    assert len(bank.tasks) >= 40


def test_task_coverage(bank):
    tasks = bank.tasks
    assert sum(len(t.required_documents) >= 3 for t in tasks) >= 5
    assert sum(len(t.scenario.requests) >= 2 for t in tasks) >= 4
    tags = [tag for t in tasks for tag in t.tags]
    for needed in ("implicit_order", "unverified_claim", "multi_request", "handover", "transfer_human"):
        assert tags.count(needed) >= 2, needed
    assert any(a.requestor == "user" and a.name == "approve_wire_in_app" for t in tasks for a in t.actions)


def test_rules_span_documents(bank):
    """Discoverable tool names live in documents, and decisive rules are split across documents."""
    texts = {d.id: d.text for d in bank.documents}
    for t in bank.toolbox("bm25").tools.values():
        if t.discoverable or t.handover:
            assert any(t.name in x for x in texts.values()), t.name


def test_every_task_passes_check_domain(bank):
    assert domain_problems(bank) == {}


def test_oracle_scores_one_on_every_task(bank):
    run = evaluate("harbor-bank-v0", OracleAgent, ScriptedUser)
    assert run.metrics["pass@1"] == 1.0, [r.task_id for r in run.results if r.reward < 1]


def test_do_nothing_scores_zero_on_every_write_task(bank):
    run = evaluate("harbor-bank-v0", NoopAgent, ScriptedUser)
    for r in run.results:
        expected = 1.0 if bank.task(r.task_id).expect_no_change else 0.0
        assert r.reward == expected, r.task_id


def test_readme_example_runs():
    """The README's Python example, as written."""
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(import tau_env\n.*?)```", readme, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own README
    assert scope["env"].episode_reward == 1.0


def test_reset_state_equals_each_tasks_image(bank):
    """Episodes start by rolling back and applying the task's initial state; that must equal s0's image."""
    env = tau_env.make("harbor-bank-v0")
    for task in bank.tasks:
        env.reset(options={"task_id": task.id})
        image_db = tau_env.EpisodeDB(bank.schema, bank.image(task))
        assert env.db.table_digests() == image_db.table_digests() == image_db.recompute_digests(), task.id
        image_db.close()


def test_incremental_digests_after_oracle_episodes(bank):
    env = tau_env.make("harbor-bank-v0")
    for task in bank.tasks[:20]:
        tau_env.run_episode(env, OracleAgent(), ScriptedUser(), task.id)
        assert env.db.table_digests() == env.db.recompute_digests(), task.id
