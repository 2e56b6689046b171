import pytest

from tau_env import assistant_message, call, say, tool_call
from tau_env.error import InvalidActionError
from tau_env.messages import is_end_message, normalize_action, parse_tool_calls


def test_helpers_build_openai_messages():
    msg = call("get_item", item_id="w")
    assert msg == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"type": "function", "function": {"name": "get_item", "arguments": '{"item_id": "w"}'}}],
    }
    assert say("hi") == {"role": "assistant", "content": "hi"}
    assert tool_call("x", '{"a": 1}', id="c1")["id"] == "c1"
    assert assistant_message("t", [])["content"] == "t"


@pytest.mark.parametrize(
    "bad,match",
    [
        (42, "Expected an assistant message dict"),
        (None, "Expected an assistant message dict"),
        ({"role": "user", "content": "x"}, "Expected role 'assistant'"),
        ({"role": "assistant", "content": 5}, "content"),
        ({"role": "assistant", "tool_calls": "x"}, "'tool_calls' to be a list"),
        ({"role": "assistant", "tool_calls": [3]}, r"tool_calls\[0\]"),
        ({"role": "assistant", "content": [{"type": "image"}]}, "content part"),
    ],
)
def test_normalize_rejects_non_messages(bad, match):
    with pytest.raises(InvalidActionError, match=match):
        normalize_action(bad)


def test_normalize_accepts_strings_parts_and_sdk_objects():
    assert normalize_action("hello") == {"role": "assistant", "content": "hello"}
    parts = {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert normalize_action(parts)["content"] == "ab"

    class SdkMessage:  # shaped like openai's ChatCompletionMessage
        def model_dump(self, exclude_none=False):
            return {"role": "assistant", "content": "x", "reasoning_content": "thinking"}

    assert normalize_action(SdkMessage()) == {"role": "assistant", "content": "x", "reasoning_content": "thinking"}


def test_parse_tool_calls_marks_model_errors_and_fills_ids():
    msg = normalize_action(
        {
            "role": "assistant",
            "tool_calls": [
                {"function": {"name": "a", "arguments": "{bad"}},
                {"id": "k", "function": {"name": "b", "arguments": "[1]"}},
                {"function": {"arguments": "{}"}},
                {"function": {"name": "c", "arguments": {"x": 1}}},
                {"function": {"name": "d"}},
            ],
        }
    )
    calls = parse_tool_calls(msg, "call_7")
    assert [c.id for c in calls] == ["call_7_0", "k", "call_7_2", "call_7_3", "call_7_4"]
    assert "not valid JSON" in calls[0].error
    assert "must be a JSON object" in calls[1].error
    assert "Malformed tool call" in calls[2].error
    assert calls[3].arguments == {"x": 1} and calls[3].error is None
    assert calls[4].arguments == {}
    # the message is rewritten in canonical form, ready for a chat template
    assert all(tc["type"] == "function" and isinstance(tc["function"]["arguments"], str) for tc in msg["tool_calls"])


def test_end_markers():
    assert is_end_message("thanks ###STOP###") == "###STOP###"
    assert is_end_message("###TRANSFER###") == "###TRANSFER###"
    assert is_end_message("no marker") is None
    assert is_end_message(None) is None
