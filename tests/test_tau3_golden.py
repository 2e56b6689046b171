"""tau3-banking replays match the public benchmark's own replays, action by action and table by table.

Reads the benchmark data and the golden replays from ../shared/data (skipped where absent).
"""

import json
from pathlib import Path

import pytest

import tau_env
from tau_env.domains.tau3_banking.retrieval import strip_timing

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DATA = SHARED / "tau3_banking"
GOLDEN = SHARED / "tau3_banking_golden"
pytestmark = pytest.mark.skipif(not (DATA.is_dir() and GOLDEN.is_dir()), reason="needs ../shared/data")

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


def test_every_task_replays_without_an_exception(domain):
    for task in domain.tasks:
        record = domain.replay_record(task)
        errors = [a for a in record["actions"] if a["error"]]
        assert not errors, (task.id, errors[:1])
