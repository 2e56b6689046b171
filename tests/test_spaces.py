import pytest

from tau_env.spaces import MessageSpace, MessagesSpace, ScenarioSpace, ToolSchemasSpace, observation_space


def test_message_space_checks_structure():
    s = MessageSpace()
    assert s.contains({"role": "assistant", "content": "hi"})
    assert s.contains(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "1", "type": "function", "function": {"name": "x", "arguments": "{}"}}],
        }
    )
    assert not s.contains("hi")  # a string is accepted by step(), but is not an element of the space
    assert not s.contains({"role": "user", "content": "x"})
    assert not s.contains({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]})


def test_samples_are_members_and_seeded():
    for space in (
        MessageSpace(("a", "b")),
        MessagesSpace(),
        ToolSchemasSpace(),
        ScenarioSpace(),
        observation_space("agent"),
        observation_space("user"),
    ):
        space.seed(3)
        first = [space.sample() for _ in range(20)]
        assert all(space.contains(x) for x in first)
        space.seed(3)
        assert [space.sample() for _ in range(20)] == first


@pytest.mark.parametrize(
    "bad",
    [
        [{"role": "robot", "content": "x"}],
        [{"role": "tool", "content": "x"}],  # no tool_call_id
        [{"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "x", "arguments": {}}}]}],
        "not a list",
    ],
)
def test_messages_space_rejects(bad):
    assert not MessagesSpace().contains(bad)


def test_tool_schema_space():
    ok = {
        "type": "function",
        "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}},
    }
    assert ToolSchemasSpace().contains([ok])
    assert not ToolSchemasSpace().contains([{"type": "function", "function": {"name": "f"}}])


def test_observation_space_keys():
    assert set(observation_space("agent").spaces) == {"messages", "tools"}
    assert set(observation_space("user").spaces) == {"messages", "tools", "scenario"}
