import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tau_env import Task, load_tasks, save_tasks
from tau_env.error import TaskError

text = st.text(min_size=1, max_size=20)
task_strategy = st.builds(
    lambda i, reqs, facts, actions, flag: Task.model_validate(
        {"id": f"t{i}", "scenario": {"requests": reqs, "facts": facts}, "actions": actions, "expect_no_change": flag}
    ),
    st.integers(0, 10**6),
    st.lists(text, min_size=1, max_size=3),
    st.dictionaries(text, text, max_size=3),
    st.lists(
        st.fixed_dictionaries(
            {
                "name": text,
                "arguments": st.dictionaries(text, st.integers() | text, max_size=2),
                "requestor": st.sampled_from(["agent", "user"]),
            }
        ),
        max_size=4,
    ),
    st.booleans(),
)


@given(st.lists(task_strategy, max_size=5, unique_by=lambda t: t.id), st.sampled_from([".json", ".jsonl"]))
def test_save_load_roundtrip(tmp_path_factory, tasks, suffix):
    path = tmp_path_factory.mktemp("t") / f"tasks{suffix}"
    save_tasks(tasks, path)
    assert load_tasks(path) == tasks


def test_single_task_json(tmp_path):
    p = tmp_path / "one.json"
    p.write_text(json.dumps({"id": "a", "scenario": {"requests": ["hi"]}}))
    assert load_tasks(p)[0].id == "a"


@pytest.mark.parametrize(
    "content,match",
    [
        ("{", r"tasks.json: not readable JSON \(Expecting property name .* at line 1 column 2\)"),
        ('[{"id": "a"}]', "scenario"),
        ('[{"id": "a", "scenario": {"requests": []}}]', "requests"),
        ('[{"id": "a", "scenario": {"requests": ["x"]}, "bogus": 1}]', "bogus"),
        (
            '[{"id": "a", "scenario": {"requests": ["x"]}}, {"id": "a", "scenario": {"requests": ["y"]}}]',
            "share the id",
        ),
    ],
)
def test_bad_task_files(tmp_path, content, match):
    p = tmp_path / "tasks.json"
    p.write_text(content)
    with pytest.raises(TaskError, match=match):
        load_tasks(p)


def test_bad_jsonl_line_number(tmp_path):
    p = tmp_path / "tasks.jsonl"
    p.write_text('{"id": "a", "scenario": {"requests": ["x"]}}\n{oops\n')
    with pytest.raises(TaskError, match=r"tasks.jsonl:2: not readable JSON"):
        load_tasks(p)
    with pytest.raises(TaskError, match="Expected a task file"):
        load_tasks(tmp_path / "missing.json")
