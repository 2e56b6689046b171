"""tau3-banking replays match the public benchmark's own replays, action by action and table by table.

Reads the benchmark data and the golden replays from ../shared/data (skipped where absent; failed
under CI, see ``tests.conftest.require_shared``).
"""

import json

import pytest

import tau_env
from tau_env.domains.tau3_banking.retrieval import strip_timing
from tests.conftest import TAU3_DATA as DATA
from tests.conftest import TAU3_GOLDEN as GOLDEN
from tests.conftest import needs_shared

pytestmark = needs_shared(DATA, GOLDEN)

GOLDEN_TASKS = sorted(p.stem for p in (GOLDEN / "tasks").glob("task_*.json")) if GOLDEN.is_dir() else []


@pytest.fixture(scope="module")
def domain():
    return tau_env.registry.load_domain("tau3-banking", data_dir=str(DATA))


@pytest.fixture(scope="module")
def initial_db():
    return json.loads((GOLDEN / "initial_db.json").read_text())


@pytest.mark.parametrize("task_id", GOLDEN_TASKS)
def test_replay_matches_golden(domain, initial_db, task_id):
    golden = json.loads((GOLDEN / "tasks" / f"{task_id}.json").read_text())
    record = domain.replay_record(domain.task(task_id))
    assert len(record["actions"]) == len(golden["actions"])
    for i, (ours, theirs) in enumerate(zip(record["actions"], golden["actions"])):
        assert (ours["name"], ours["requestor"]) == (theirs["name"], theirs["requestor"]), i
        assert strip_timing(ours["output"]) == strip_timing(theirs["output"]), f"action {i} ({theirs['name']})"
        assert ours["error"] == theirs["error"], f"action {i} ({theirs['name']})"
    expected = {t: golden["final_db"].get(t, initial_db[t]) for t in initial_db}
    for table, content in expected.items():
        assert record["final_db"][table]["data"] == content["data"], table
        assert list(record["final_db"][table]["data"]) == list(content["data"]), f"{table}: row order"
        assert record["final_db"][table]["notes"] == content["notes"], f"{table}: notes"


def test_all_97_tasks_replay_without_unexpected_errors(domain):
    """No exception anywhere, and error texts only where the benchmark's own data is defective."""
    errors = set()
    for task in domain.tasks:
        record = domain.replay_record(task)
        assert not [a for a in record["actions"] if a["error"]], task.id
        errors |= {(task.id, i) for i, a in enumerate(record["actions"]) if a["output"].startswith(("Error", "Failed"))}
    # documented in docs/tau3_banking.md: task_051's repeated request, task_083's missing argument
    assert errors == {("task_051", 17), ("task_083", 6), ("task_083", 7), ("task_083", 8), ("task_083", 9)}
    assert len(domain.tasks) == 97


def test_oracle_with_scripted_user_scores_one_on_database_tasks(domain):
    run = tau_env.evaluate(lambda: tau_env.TauEnv(domain), tau_env.OracleAgent, tau_env.ScriptedUser)
    db_tasks = {t.id for t in domain.tasks if "DB" in t.metadata["reward_basis"]}
    assert len(db_tasks) == 88
    assert {r.task_id for r in run.results if r.reward == 1.0} >= db_tasks


def test_do_nothing_agent_fails_every_task_that_writes(domain):
    run = tau_env.evaluate(lambda: tau_env.TauEnv(domain), tau_env.NoopAgent, tau_env.ScriptedUser)
    passed = {r.task_id for r in run.results if r.reward == 1.0}
    assert passed == {"task_004", "task_008", "task_012", "task_014"}  # transfer-only tasks: nothing to write


def test_every_task_passes_check_domain(domain):
    from tau_env.checker import domain_problems

    assert domain_problems(domain) == {}
