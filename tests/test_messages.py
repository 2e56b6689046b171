import json

import pytest

from tau_env import assistant_message, call, say, tool_call
from tau_env.error import InvalidActionError
from tau_env.messages import MAX_ID_LENGTH, clip, escape_surrogates, is_end_message, normalize_action, parse_tool_calls


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


def _calls(*tool_calls, used=()):
    msg = normalize_action({"role": "assistant", "tool_calls": list(tool_calls)})
    return msg, parse_tool_calls(msg, "call_3", used)


def _fn(name="f", arguments="{}", **extra):
    return {"function": {"name": name, "arguments": arguments}, **extra}


def test_tool_call_ids_are_unique_in_the_episode():
    used = {"a", "call_3_1"}
    long_id = "x" * (MAX_ID_LENGTH + 1)
    _, calls = _calls(
        _fn(id="k"),  # kept
        _fn(id="k"),  # duplicate in the message -> call_3_1, taken earlier in the episode -> call_3_1_2
        _fn(id="a"),  # used by an earlier call of the episode
        _fn(id=""),
        _fn(id=7),
        _fn(id=long_id),
        _fn(id="\ud83d"),  # kept, escaped
        _fn(id="call_3_7"),  # a sent id that a later fallback would take: the fallback moves on
        _fn(),
        used=used,
    )
    ids = [c.id for c in calls]
    assert ids == ["k", "call_3_1_2", "call_3_2", "call_3_3", "call_3_4", "call_3_5", "\\ud83d", "call_3_7", "call_3_8"]
    assert len(set(ids)) == len(ids) and not set(ids) & used


def test_lone_surrogates_are_escaped_in_text_and_refused_in_arguments():
    assert escape_surrogates("ok \ud83d!") == "ok \\ud83d!" and escape_surrogates("🙂") == "🙂"
    assert normalize_action("hi \udc00")["content"] == "hi \\udc00"
    parts = {"role": "assistant", "content": [{"type": "text", "text": "\ud83d"}], "reasoning_content": "\ud83d"}
    assert normalize_action(parts) == {"role": "assistant", "content": "\\ud83d", "reasoning_content": "\\ud83d"}
    msg, calls = _calls(
        _fn("get", '{"x": "\\ud83d"}'),  # JSON escape of a lone surrogate
        _fn("get", '{"x": "\ud83d"}'),  # the raw character
        _fn("get", {"items": ["ok", {"name": "\udfff"}]}),  # nested in a dict argument
        _fn("get", '{"a": {"b\\ud800": 1}}'),  # in a key
        _fn("get", '{"x": "\\\\ud83d"}'),  # an escaped backslash: plain text, fine
        _fn("get\ud83d", "{}"),  # in the name: escaped (and then an unknown tool)
        _fn("get", '{"x": "\\ud83d\\ude00"}'),  # a proper pair is one emoji: fine
    )
    assert [c.error for c in calls[:4]] == [
        "Argument 'x' is not valid Unicode text (it holds a lone surrogate, e.g. half of an emoji). Send UTF-8 text.",
        "Argument 'x' is not valid Unicode text (it holds a lone surrogate, e.g. half of an emoji). Send UTF-8 text.",
        "Argument 'items[1].name' is not valid Unicode text (it holds a lone surrogate, e.g. half of an emoji). "
        "Send UTF-8 text.",
        "Argument name 'b\\ud800' is not valid Unicode text (it holds a lone surrogate, e.g. half of an emoji). "
        "Send UTF-8 text.",
    ]
    assert calls[4].arguments == {"x": "\\ud83d"} and calls[6].arguments == {"x": "😀"}
    assert calls[5].name == "get\\ud83d" and calls[5].error is None
    json.dumps(msg, ensure_ascii=False).encode("utf-8")  # the record is writable as UTF-8
    assert json.loads(msg["tool_calls"][1]["function"]["arguments"]) == {"x": "\ud83d"}  # and faithful


def _deep(n):
    d = {}
    for _ in range(n):
        d = {"a": d}
    return d


@pytest.mark.parametrize(
    "arguments,why",
    [
        ({"x": b"bytes"}, "Object of type bytes is not JSON serializable"),
        ({"x": {1, 2}}, "Object of type set is not JSON serializable"),
        ({(1, 2): "x"}, "keys must be str, int, float, bool or None, not tuple"),
        ({"x": object()}, "Object of type object is not JSON serializable"),
        ({"x": 10**5000}, "Exceeds the limit (4300 digits)"),
        ({"x": _deep(100_000)}, "they nest too deeply"),
        ([1, 2], None),
        (b"{}", None),
        (5, None),
    ],
)
def test_arguments_json_cannot_encode_are_the_models_error(arguments, why):
    msg, (c,) = _calls(_fn("get", arguments))
    assert c.arguments is None
    if why is None:
        assert c.error == f"Arguments of 'get' must be a JSON object string, got {type(arguments).__name__}."
    else:
        assert c.error.startswith(f"Arguments of 'get' cannot be encoded as JSON ({why}")
        assert c.error.endswith("). Send a JSON object.")
    text = msg["tool_calls"][0]["function"]["arguments"]
    assert isinstance(text, str) and len(text) < 20_000  # a bounded, escaped text form
    json.dumps(msg, ensure_ascii=False).encode("utf-8")


def test_dict_arguments_are_what_their_json_text_says():
    msg, (c,) = _calls(_fn("get", {"n": 1, "t": (1, 2), 3: "k", "f": float("nan")}))
    text = msg["tool_calls"][0]["function"]["arguments"]
    assert text == '{"n": 1, "t": [1, 2], "3": "k", "f": NaN}'
    assert c.arguments.keys() == {"n", "t", "3", "f"} and c.arguments["t"] == [1, 2]


@pytest.mark.parametrize(
    "text,why",
    [("1" * 5000, "Exceeds the limit"), ('{"a":' * 100_000, "it nests too deeply"), ("{", "Expecting property name")],
)
def test_argument_text_that_does_not_parse(text, why):
    _, (c,) = _calls(_fn("get", text))
    assert c.error.startswith(f"Arguments of 'get' are not valid JSON ({why}") and c.arguments is None


def test_echoed_model_text_is_clipped():
    assert clip("abc") == "abc" and clip("a" * 81) == "a" * 80 + "... (81 characters)"
    _, (c,) = _calls(_fn("n" * 10**6, "{"))
    assert c.error.startswith("Arguments of '" + "n" * 80 + "... (1000000 characters)' are not valid JSON")
    for bad in (10**5000, [[[]]] * 3, "x"):
        with pytest.raises(InvalidActionError, match=r"^Expected (role 'assistant'|tool_calls\[0\] to be a dict)") as e:
            normalize_action({"role": bad} if bad != "x" else {"role": "assistant", "tool_calls": [10**5000]})
        assert len(str(e.value)) < 400
