"""The tau3-banking pack as a user meets it: loading, errors, the env, and the discovery edge cases."""

import json
import warnings

import pytest
from pettingzoo.test import api_test

import tau_env
from tau_env import call, say
from tau_env.error import DomainError, InvalidOptionError
from tests.conftest import TAU3_DATA as DATA
from tests.conftest import TAU3_GOLDEN, needs_tau3_data, require_shared

REFERENCE = TAU3_GOLDEN / "tool_reference.json"
needs_data = needs_tau3_data
#: The benchmark's tools that can write and then raise; their writes stay, as in the benchmark.
WRITE_THEN_RAISE = {"file_credit_card_transaction_dispute_4829", "deposit_check_3847", "get_card_last_4_digits"}


def test_missing_data_dir_says_what_to_do(monkeypatch):
    monkeypatch.delenv("TAU3_BANKING_DATA", raising=False)
    with pytest.raises(DomainError, match="pass data_dir=PATH .* or set TAU3_BANKING_DATA"):
        tau_env.make("tau3-banking")


def test_malformed_data_dir_lists_what_is_missing(tmp_path):
    (tmp_path / "db.json").write_text("{}")
    (tmp_path / "documents").mkdir()
    with pytest.raises(DomainError, match=r"missing tasks/, prompts/"):
        tau_env.make("tau3-banking", data_dir=str(tmp_path))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "prompts").mkdir()
    with pytest.raises(DomainError, match="holds no task_"):
        tau_env.make("tau3-banking", data_dir=str(tmp_path))
    (tmp_path / "tasks" / "task_001.json").write_text("{not json")
    with pytest.raises(DomainError, match="task_001.json: not readable JSON"):
        tau_env.make("tau3-banking", data_dir=str(tmp_path))


@needs_data
def test_env_var_and_unknown_retrieval(monkeypatch):
    monkeypatch.setenv("TAU3_BANKING_DATA", str(DATA))
    env = tau_env.make("tau3-banking")
    assert len(env.domain.tasks) == 97 and len(env.domain.documents) == 698
    with pytest.raises(
        InvalidOptionError, match=r"^make\('tau3-banking', retrieval='bm52'\): Unknown retrieval configuration 'bm52'"
    ):
        tau_env.make("tau3-banking", retrieval="bm52")


@pytest.fixture(scope="module")
def env():
    require_shared(DATA)
    return tau_env.make("tau3-banking", data_dir=str(DATA), retrieval="no_knowledge")


@pytest.fixture(scope="module")
def reference():
    return json.loads(REFERENCE.read_text())


def _agent(env, name, **args):
    env.step(call(name, **args))
    return env.observe("agent")["messages"][-1]["content"]


def _user(env, name, **args):
    if env.agent_selection != "user":
        env.step(say("go ahead"))
    env.step(call(name, **args))
    out = env.observe("user")["messages"][-1]["content"]
    env.step(say("ok"))
    return out


def test_schemas_match_the_benchmark(env, reference):
    env.reset(options={"task_id": "task_001"})
    assert env.observe("agent")["tools"] == reference["agent_base_tools_openai_schema"]
    # As in the benchmark, the user seat has only the tools its task lists (task_001: one), in toolkit order.
    for task_id in ("task_001", "task_015"):
        env.reset(options={"task_id": task_id})
        allowed = env.task.metadata["user_tools"]
        want = [s for s in reference["user_tools_openai_schema"] if s["function"]["name"] in allowed]
        assert want and env.observe("user")["tools"] == want


def test_discovery_edge_cases(env, reference):
    ref = reference["edge_case_outputs"]
    env.reset(options={"task_id": "task_001"})
    env.step(say("hi"))
    digest = env.db_digest()
    assert _agent(env, "unlock_discoverable_agent_tool", agent_tool_name="no_such_tool_1234") == ref["unlock_unknown"]
    assert _agent(env, "call_discoverable_agent_tool", agent_tool_name="no_such_tool_1234") == ref["call_unknown"]
    assert (
        _agent(
            env, "call_discoverable_agent_tool", agent_tool_name="freeze_debit_card_3892", arguments='{"card_id": "x"}'
        )
        == ref["call_not_unlocked"]
    )
    _agent(env, "unlock_discoverable_agent_tool", agent_tool_name="freeze_debit_card_3892")
    assert (
        _agent(env, "call_discoverable_agent_tool", agent_tool_name="freeze_debit_card_3892", arguments="{bad")
        == ref["call_bad_json"]
    )
    assert (
        _agent(env, "give_discoverable_user_tool", discoverable_tool_name="apply_for_credit_card")
        == ref["give_unknown"]
    )
    assert (
        _agent(env, "give_discoverable_user_tool", discoverable_tool_name="get_referral_link", arguments="{bad")
        == ref["give_bad_json"]
    )
    assert (
        _agent(env, "give_discoverable_user_tool", discoverable_tool_name="get_referral_link", arguments='{"foo": 1}')
        == ref["give_unexpected_param"]
    )
    assert _agent(env, "list_discoverable_agent_tools") == ref["list_agent_tools_empty"]
    assert _agent(env, "get_current_time") == ref["get_current_time"]
    assert _agent(env, "transfer_to_human_agents", summary="s", reason="bogus") == ref["transfer_invalid_reason"]
    assert _agent(env, "get_user_information_by_id", user_id="nobody") == ref["get_user_by_id_missing"]
    assert _agent(env, "change_user_email", user_id="nobody", new_email="a@b") == ref["change_email_missing_user"]
    env.reset(options={"task_id": "task_015"})  # a task whose user has call_discoverable_user_tool
    env.step(say("hi"))
    assert (
        _user(
            env,
            "call_discoverable_user_tool",
            discoverable_tool_name="deposit_check_3847",
            arguments='{"account_id": "a", "check_amount": 5}',
        )
        == ref["user_call_not_given"]
    )
    assert (
        _user(env, "call_discoverable_user_tool", discoverable_tool_name="submit_referral") == ref["user_call_unknown"]
    )
    assert (
        _user(
            env, "call_discoverable_user_tool", discoverable_tool_name="get_referral_link", arguments='{"user_id": "u"}'
        )
        == ref["user_call_missing_param"]
    )
    assert (
        _user(
            env,
            "call_discoverable_user_tool",
            discoverable_tool_name="get_referral_link",
            arguments='{"user_id": "u", "card_name": "c", "z": 1}',
        )
        == ref["user_call_unexpected_param"]
    )
    # No task gives its user list_discoverable_user_tools (the benchmark offers a user only the tools
    # its task lists); its text, through the toolbox with the tool made active:
    ctx = env.domain.context(env.db, env.task, env.toolbox)
    ctx.active["user"].add("list_discoverable_user_tools")
    assert env.toolbox.call(ctx, "user", "list_discoverable_user_tools", {}).content == ref["list_user_tools_empty"]
    assert env.db_digest() == digest  # none of these changed the database


def test_python_type_errors_read_as_the_benchmarks(env):
    env.reset(options={"task_id": "task_001"})
    env.step(say("hi"))
    out = _agent(env, "get_user_information_by_id", user_id="x", extra=1)
    assert out == "Error: KnowledgeTools.get_user_information_by_id() got an unexpected keyword argument 'extra'"
    assert _agent(env, "no_such_tool") == "Error: Tool 'no_such_tool' not found."
    assert _agent(env, "get_user_information_by_id", user_id='a"b') == (
        "Error: Invalid JSON: Expecting ',' delimiter: line 1 column 16 (char 15)"
    )


def test_discoverable_tools_callable_by_name_without_logging(env):
    """As in the benchmark: a direct call skips the unlock check and the call log."""
    env.reset(options={"task_id": "task_001"})
    env.step(say("hi"))
    tools = [t["function"]["name"] for t in env.observe("agent")["tools"]]
    assert "example_agent_tool_0000" not in tools
    assert _agent(env, "example_agent_tool_0000") == "Example tool executed successfully."
    assert env.db.conn.execute('SELECT count(*) FROM "agent_discoverable_tools"').fetchone()[0] == 0


def test_pettingzoo_api_test_on_tau3(env):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(tau_env.make("tau3-banking", data_dir=str(DATA), max_steps=30), num_cycles=100)


def test_unlock_and_give_texts_match_the_benchmark_for_every_tool(env, reference):
    env.reset(options={"task_id": "task_001"})
    env.step(say("hi"))
    for name, text in reference["unlock_outputs"].items():
        assert _agent(env, "unlock_discoverable_agent_tool", agent_tool_name=name) == text, name
    for name, text in reference["give_outputs_no_arguments"].items():
        assert _agent(env, "give_discoverable_user_tool", discoverable_tool_name=name) == text, name
    assert len(reference["unlock_outputs"]) == 44


def test_llm_style_garbage_never_escapes_and_failed_calls_change_nothing(env):
    """Random calls to every tau3 tool, with hostile and ill-typed arguments, through env.step."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tau_env.domains.tau3_banking import interface

    names = [s["function"]["name"] for s in interface.AGENT_SCHEMAS] + list(interface.DISCOVERABLE_AGENT)
    junk = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**6), 10**6),
        st.floats(allow_nan=False),
        st.text(max_size=30),
        st.sampled_from(['"', "\\", "{", "'; DROP TABLE users; --", "1e999"]),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    )

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        name=st.sampled_from(names),
        args=st.dictionaries(
            st.sampled_from(
                ["user_id", "card_id", "account_id", "amount", "agent_tool_name", "arguments", "query", "reason", "pin"]
            ),
            junk,
            max_size=4,
        ),
        inner=st.booleans(),
    )
    def run(name, args, inner):
        env.reset(options={"task_id": "task_001"})
        env.step(say("hi"))
        if inner and name in interface.DISCOVERABLE_AGENT:
            _agent(env, "unlock_discoverable_agent_tool", agent_tool_name=name)
            action = call("call_discoverable_agent_tool", agent_tool_name=name, arguments=json.dumps(args, default=str))
        else:
            action = call(name, **args)
        before = env.db_digest()
        env.step(action)
        result = env.trajectory[-1]["tool_results"][0]
        if result["error"]:
            assert result["content"].startswith("Error")
            # Only the tools that write and then raise in the benchmark keep a write on error
            # (docs/tau3_banking.md, defects table; tests/test_tau3_write_then_raise.py).
            if name not in WRITE_THEN_RAISE:
                assert env.db_digest() == before

    run()
