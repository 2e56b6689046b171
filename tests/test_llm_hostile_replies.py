"""Whatever message a server returns, an evaluation through LLMAgent records an episode: a message
without the shape of a chat completion message is the server's fault (an infrastructure error, never
scored), a well-shaped one with bad tool calls is the model's mistake (the env answers it)."""

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tau_env import TauEnv, aevaluate
from tau_env.error import InfrastructureError
from tau_env.llm import ChatClient, LLMAgent, LLMUser, parse_text_tool_calls, to_action
from tau_env.testing import FakeOpenAI, Reply, own_turns, seat_of, text
from tests.conftest import make_domain

DEEP = "<tool_call>" + "[" * 100_000


def test_a_text_tool_call_nested_too_deeply_is_a_malformed_call():
    rest, calls = parse_text_tool_calls("Sure. " + DEEP)
    assert rest == "Sure." and calls[0]["function"] == {"name": "", "arguments": "[" * 100_000}
    nested = "<tool_call>" + json.dumps({"name": "f", "arguments": {"a": 1}}) + "</tool_call>"
    assert parse_text_tool_calls(nested)[1][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}


@pytest.mark.parametrize(
    "message",
    [
        {"content": 5},
        {"content": [{"type": "text", "text": 5}]},
        {"tool_calls": 5},
        {"tool_calls": [{"function": None}]},
        5,
    ],
)
def test_to_action_refuses_a_message_of_the_wrong_shape(message):
    """For clients other than ChatClient (which refuses them itself)."""
    with pytest.raises(
        InfrastructureError, match=r"^The client returned a reply that is not a chat completion message: "
    ):
        to_action(message)


_AGENT = {"message": {}}


def _script(req):
    if seat_of(req) == "user":
        return text("Please restock the widget.") if own_turns(req) == 0 else text("Thanks! ###STOP###")
    return Reply(_AGENT["message"]) if own_turns(req) == 1 else text("All done.")


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI(_script) as s:
        yield s


def _evaluate(url, message):
    _AGENT["message"] = message
    agent = LLMAgent(ChatClient("agent-m", url, retries=0))
    user = LLMUser(ChatClient("user-m", url, retries=0))
    run = asyncio.run(aevaluate(lambda: TauEnv(make_domain()), agent, user, task_ids=["restock"], episode_retries=0))
    (result,) = run.results
    return result


@pytest.mark.parametrize(
    "message",
    [
        {"content": 5},
        {"content": float("nan")},
        {"content": [{"type": "text", "text": 5}]},
        {"content": {"a": 1}},
        {"tool_calls": 5},
        {"tool_calls": [{"function": None}]},
        {"tool_calls": [{"function": {"arguments": "{}"}}]},
    ],
)
def test_a_message_of_the_wrong_shape_is_an_infrastructure_error(server, message):
    result = _evaluate(server.url, message)
    assert result.termination_reason == "infrastructure_error"
    assert "returned a message that is not a chat completion message" in result.error


@pytest.mark.parametrize(
    "message",
    [
        {"content": DEEP},
        {"tool_calls": [{"id": 5, "function": {"name": "unlock_tool", "arguments": 5}}]},
        {"tool_calls": [{"function": {"name": "", "arguments": "[[["}}]},
        {"content": [{"type": "text", "text": "a"}, {"type": "image_url"}]},
    ],
)
def test_bad_tool_calls_in_a_well_shaped_message_are_the_models_mistake(server, message):
    result = _evaluate(server.url, message)
    assert result.termination_reason != "infrastructure_error", result.error


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_call = st.fixed_dictionaries(
    {},
    optional={
        "id": _json,
        "type": _json,
        "function": _json
        | st.fixed_dictionaries({}, optional={"name": _json | st.text(max_size=20), "arguments": _json}),
    },
)
# Objects only: FakeOpenAI sends a message object (a choice whose message is not one is tested in test_http_client).
_message = st.dictionaries(st.text(max_size=8), _json, max_size=3) | st.fixed_dictionaries(
    {},
    optional={
        "role": _json,
        "content": _json | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _json}), max_size=2),
        "reasoning_content": _json,
        "tool_calls": _json | st.lists(_call | _json, max_size=3),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_message)
def test_any_json_message_gives_a_recorded_episode(server, message):
    result = _evaluate(server.url, message)
    if result.termination_reason == "infrastructure_error":
        assert "returned a message that is not a chat completion message" in result.error
