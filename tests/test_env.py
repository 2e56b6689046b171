import warnings

import pytest
from pettingzoo.test import api_test, seed_test

import tau_env
from tau_env import OracleAgent, ScriptedUser, TauEnv, call, run_episode, say
from tau_env.error import EpisodeOverError, InvalidActionError, InvalidOptionError, ResetNeeded, UnknownTaskError


def test_pettingzoo_api_test_on_shipped_domain():
    env = tau_env.make("harbor-bank-v0", max_steps=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # api_test warns that text observations are not numpy arrays
        api_test(env, num_cycles=300)


def test_pettingzoo_seed_test_on_shipped_domain():
    seed_test(lambda: tau_env.make("harbor-bank-v0", max_steps=60), num_cycles=100)


def test_api_and_seed_tests_on_tiny_domain(domain):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(TauEnv(domain), num_cycles=200)
    seed_test(lambda: TauEnv(domain), num_cycles=50)


def test_reset_picks_task_from_seed_and_options(env):
    picks = set()
    for seed in range(20):
        env.reset(seed=seed)
        picks.add(env.task.id)
        env.reset(seed=seed)
        again = env.task.id
        env.reset(seed=seed)
        assert env.task.id == again
    assert len(picks) > 1
    env.reset(options={"task_id": "confirm"})
    assert env.task.id == "confirm" and env.agent_selection == "user"
    env.reset(options={"task_index": 0})
    assert env.task.id == "restock"
    with pytest.raises(UnknownTaskError, match="no task 'confrim'.*Did you mean \"confirm\""):
        env.reset(options={"task_id": "confrim"})
    with pytest.warns(UserWarning, match="ignores unknown options"):
        env.reset(options={"taskid": "x"})


def test_observations_show_each_seat_its_own_view(env):
    env.reset(options={"task_id": "restock"})
    obs = env.observe("user")
    assert obs["messages"][0]["role"] == "system" and "Please restock the widget." in obs["messages"][0]["content"]
    assert obs["scenario"]["requests"] == ["Please restock the widget."]
    assert [t["function"]["name"] for t in obs["tools"]] == []  # the hand-over tool is not active yet
    env.step(say("Restock the widget please"))
    assert env.agent_selection == "agent"
    env.step(call("get_item", item_id="widget"))  # a tool call keeps the turn
    assert env.agent_selection == "agent"
    agent_obs = env.observe("agent")
    assert agent_obs["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_2_0",
        "name": "get_item",
        "content": "widget: 3",
    }
    assert "get_item" in [t["function"]["name"] for t in agent_obs["tools"]]
    assert "secret_restock_1234" not in [t["function"]["name"] for t in agent_obs["tools"]]
    env.step(say("Done."))
    user_msgs = env.observe("user")["messages"]
    assert all(m["role"] != "tool" and not m.get("tool_calls") for m in user_msgs)  # user never sees tool calls
    assert user_msgs[-1] == {"role": "user", "content": "Done."}  # the agent speaks as "user" in the user's chat
    assert env.observation_space("user").contains(env.observe("user"))
    assert env.observation_space("agent").contains(env.observe("agent"))


def test_unlock_adds_tool_schema(env):
    env.reset(options={"task_id": "restock"})
    env.step(say("hi"))
    env.step(call("unlock_tool", tool_name="secret_restock_1234"))
    assert "secret_restock_1234" in [t["function"]["name"] for t in env.observe("agent")["tools"]]


def test_user_stop_terminates_and_grades(env):
    env.reset(options={"task_id": "restock"})
    env.step(say("restock please"))
    env.step(call("unlock_tool", tool_name="secret_restock_1234"))
    env.step(call("secret_restock_1234", item_id="widget"))
    env.step(say("done"))
    env.step(say("thanks ###STOP###"))
    assert all(env.terminations.values()) and env.termination_reason == "user_stop"
    assert env.rewards == {"agent": 1.0, "user": 1.0}
    assert env.infos["agent"]["grade"]["db_match"] is True
    with pytest.raises(EpisodeOverError, match="step\\(None\\)"):
        env.step(say("more"))
    for _ in env.agent_iter():
        env.step(None)
    assert env.agents == []


def test_failure_info_explains_diff(env):
    env.reset(options={"task_id": "restock"})
    env.step(say("restock please"))
    env.step(call("add_stock", item_id="widget", qty=1))
    env.step(say("done"))
    env.step(say("###STOP###"))
    grade = env.infos["user"]["grade"]
    assert env.rewards["agent"] == 0.0 and grade["differing_tables"] == ["items", "log"]
    assert grade["diff"]["items"]["changed_rows"]["widget"]["qty"] == {"expected": 100, "actual": 4}
    assert grade["diff"]["log"]["missing_rows"][0]["text"] == "restock widget"


def test_transfer_terminates_and_budget_truncates(domain):
    env = TauEnv(domain, max_steps=3)
    env.reset(options={"task_id": "nothing"})
    env.step(say("hi"))
    env.step(call("transfer_to_human", summary="x"))
    assert env.termination_reason == "transfer" and all(env.terminations.values())
    assert env.rewards["agent"] == 1.0  # nothing to change, nothing changed
    env.reset(options={"task_id": "nothing"})
    for _ in range(3):
        env.step(say("hi"))
    assert all(env.truncations.values()) and env.termination_reason == "max_steps"
    assert env.rewards["agent"] == 0.0  # a cut-off conversation is not a success
    assert env.infos["agent"]["grade"]["db_match"] is True


def test_caller_errors_raise(domain):
    env = TauEnv(domain)
    with pytest.raises(ResetNeeded, match=r"^Call reset\(\) before step\(\)\.$"):
        env.step(say("x"))
    env.reset()
    with pytest.raises(InvalidActionError, match=r"^Expected an assistant message dict .*, got int: 123\. Build one"):
        env.step(123)
    with pytest.raises(InvalidOptionError, match="^max_steps must be an integer of at least 1"):
        TauEnv(domain, max_steps=0)
    with pytest.raises(InvalidOptionError, match="^Unknown retrieval configuration 'bm52'"):
        TauEnv(domain, retrieval="bm52")


def test_model_errors_become_tool_messages(env):
    env.reset(options={"task_id": "restock"})
    env.step(say("hi"))
    d0 = env.db_digest()
    env.step(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "a", "function": {"name": "add_stock", "arguments": "{oops"}},
                {"id": "b", "function": {"name": "nope", "arguments": "{}"}},
                {"id": "c", "function": {"name": "add_stock", "arguments": '{"item_id": "widget", "qty": "5"}'}},
            ],
        }
    )
    tail = env.observe("agent")["messages"][-3:]
    assert [m["tool_call_id"] for m in tail] == ["a", "b", "c"]
    assert all(m["content"].startswith("Error: ") for m in tail)
    assert env.db_digest() == d0 and env.agent_selection == "agent"


def test_snapshot_restore_and_fork(env):
    env.reset(options={"task_id": "restock"})
    env.step(say("restock please"))
    env.step(call("unlock_tool", tool_name="secret_restock_1234"))
    snap = env.snapshot()
    digest_at_snapshot = env.db_digest()
    fork = env.fork()
    env.step(call("secret_restock_1234", item_id="widget"))
    assert env.db_digest() != fork.db_digest()
    # the fork continues from the snapshot point with the same unlocked tools
    fork.step(call("secret_restock_1234", item_id="widget"))
    assert env.db_digest() == fork.db_digest()
    env.restore(snap)
    assert env.num_steps == 2 and "secret_restock_1234" in env.active_tools("agent")
    assert env.db_digest() == digest_at_snapshot  # restore brought the old state back
    env.restore(snap)  # a snapshot is reusable
    env.step(call("add_stock", item_id="widget", qty=1))
    env.restore(snap)
    assert env.observe("agent")["messages"][-1]["content"].startswith("Tool unlocked")


def test_two_seeded_runs_give_identical_trajectories(domain):
    def play(seed):
        env = TauEnv(domain)
        r = run_episode(env, tau_env.RandomAgent(), ScriptedUser(), seed=seed)
        return r.events, r.reward, env.db_digest()

    for seed in (0, 1, 7):
        assert play(seed) == play(seed)


def test_oracle_and_scripted_user_solve_tiny_tasks(domain):
    env = TauEnv(domain)
    for t in domain.tasks:
        r = run_episode(env, OracleAgent(), ScriptedUser(), t.id)
        assert r.reward == 1.0, (t.id, r.grade)


def test_render_and_context_manager(domain):
    with TauEnv(domain, render_mode="ansi") as env:
        env.reset(options={"task_id": "restock"})
        env.step(say("hello there"))
        assert "hello there" in env.render()
    env.close()  # closing twice is fine
    with pytest.raises(InvalidOptionError, match="^render_mode must be one of"):
        TauEnv(domain, render_mode="rgb")


def test_untouched_tables_reuse_the_tasks_diff_and_callers_cannot_change_it():
    """A table the episode left as it started gets the task's cached diff: the same as computed afresh,
    and a fresh copy each time (changing one grade's diff does not change the next)."""
    from tau_env.db import diff_rows

    env = tau_env.make("harbor-bank-v0")
    task_id = "lost_card_standard_shipping"
    grades = []
    for _ in range(2):
        env.reset(options={"task_id": task_id})
        env.step(tau_env.say("###STOP###"))  # nothing done: every table the task changes is untouched
        grades.append(env.infos["agent"]["grade"])
        for table in grades[0]["diff"]:
            grades[0]["diff"][table]["missing_rows"] = "tampered"
    assert grades[0]["differing_tables"] and grades[0]["differing_tables"] == grades[1]["differing_tables"]
    target = env.domain.grader.target(env.task)
    start = env.domain.start_db(env.task)
    for table in grades[1]["differing_tables"]:
        fresh = diff_rows(env.domain.schema.tables[table], start.rows(table), target.rows[table])
        assert fresh and fresh == grades[1]["diff"][table]
    start.close()


@pytest.mark.parametrize("strict", [False, True])
def test_tool_calls_past_the_cap_are_not_run(domain, monkeypatch, strict):
    from tau_env.env import MAX_TOOL_CALLS
    from tau_env.messages import assistant_message, tool_call

    env = TauEnv(domain, strict_tools=strict)
    env.reset(options={"task_id": "restock"})
    env.step(say("hi"))
    ran = []
    real = env.toolbox.call
    monkeypatch.setattr(env.toolbox, "call", lambda *a, **k: ran.append(a) or real(*a, **k))
    n = MAX_TOOL_CALLS + 3
    env.step(assistant_message(None, [tool_call("get_item", {"item_id": "widget"}) for _ in range(n)]))
    assert len(ran) == MAX_TOOL_CALLS  # the calls past the cap never reach a tool
    results = env.trajectory[-1]["tool_results"]
    assert len(results) == n and env.num_steps == 2 == len(env.trajectory)  # counted and recorded
    assert [r["content"] for r in results[:MAX_TOOL_CALLS]] == ["widget: 3"] * MAX_TOOL_CALLS
    too_many = (
        f"Error: Too many tool calls in one message ({n}; at most {MAX_TOOL_CALLS}). Send fewer calls per message."
    )
    assert all(r["content"] == too_many and r["error"] for r in results[MAX_TOOL_CALLS:])
    tool_msgs = [m for m in env.observe("agent")["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == n and tool_msgs[-1]["content"] == too_many  # every call is answered
    env.close()
