from typing import Literal

import pytest

from tau_env import TauEnv, ToolError, tool
from tau_env.error import ToolDefinitionError
from tau_env.tools import ArgumentError, Toolbox, parse_docstring


@tool(kind="write")
def sample(
    ctx,
    name: str,
    count: int = 1,
    ratio: float = 0.5,
    flag: bool = False,
    color: Literal["red", "blue"] = "red",
    tags: list[str] | None = None,
    note: str | None = None,
) -> str:
    """Do a sample thing.

    More detail that is still description.

    Args:
        name: The name.
        count: How many,
            over two lines.
        ratio: A ratio.
        flag: A flag.
        color: A colour.
        tags: Some tags.
        note: Optional note.
    """
    return "ok"


def test_schema_from_signature_and_docstring():
    fn = sample.schema["function"]
    assert fn["name"] == "sample"
    assert fn["description"] == "Do a sample thing.\n\nMore detail that is still description."
    props = fn["parameters"]["properties"]
    assert props["name"] == {"type": "string", "description": "The name."}
    assert props["count"] == {"type": "integer", "description": "How many, over two lines."}
    assert props["color"]["enum"] == ["red", "blue"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "description": "Some tags."}
    assert fn["parameters"]["required"] == ["name"]
    assert sample.kind == "write" and sample.side == "agent"


@pytest.mark.parametrize(
    "args,match",
    [
        ({}, "Missing required argument 'name' for tool 'sample' \\(string\\)"),
        ({"name": 3}, "Argument 'name' must be a string, got integer 3"),
        ({"name": "x", "count": "2"}, "Argument 'count' must be an integer, got string \"2\""),
        ({"name": "x", "count": 2.5}, "must be an integer, got number 2.5"),
        ({"name": "x", "count": True}, "must be an integer, got boolean true"),
        ({"name": "x", "ratio": "a"}, "must be a number"),
        ({"name": "x", "ratio": float("inf")}, "finite"),
        ({"name": "x", "flag": 1}, "must be true or false"),
        ({"name": "x", "color": "green"}, 'must be one of "red", "blue"; got "green"'),
        ({"name": "x", "color": "rde"}, 'Did you mean "red"'),
        ({"name": "x", "tags": "a"}, "must be an array"),
        ({"name": "x", "tags": [1]}, r"Argument 'tags\[0\]' must be a string"),
        ({"name": "x", "nmae": 1}, "Unexpected argument 'nmae' for tool 'sample'.*Did you mean \"name\""),
        ({"name": "x" * 9000}, "too long"),
        ({"name": "x", "count": 10**30}, "out of range"),
    ],
)
def test_validation_errors_say_what_and_how(args, match):
    with pytest.raises(ArgumentError, match=match):
        sample.validate(args)


def test_validation_normalizes_and_fills_defaults():
    out = sample.validate({"name": "x", "count": 4.0, "ratio": 2, "note": None})
    assert out == {"name": "x", "count": 4, "ratio": 2.0, "flag": False, "color": "red", "tags": None, "note": None}
    assert type(out["count"]) is int and type(out["ratio"]) is float


def test_definition_errors():
    with pytest.raises(ToolDefinitionError, match="add a docstring"):
        tool(lambda ctx, a: a)
    with pytest.raises(ToolDefinitionError, match="needs a type hint"):

        @tool
        def f(ctx, a):
            """Doc.

            Args:
                a: A.
            """

    with pytest.raises(ToolDefinitionError, match="document parameter 'b'"):

        @tool
        def g(ctx, b: int):
            """Doc."""

    with pytest.raises(ToolDefinitionError, match="unsupported parameter type"):

        @tool
        def h(ctx, c: complex):
            """Doc.

            Args:
                c: C.
            """

    with pytest.raises(ToolDefinitionError, match="only agent tools can be discoverable"):

        @tool(side="user", discoverable=True)
        def i(ctx):
            """Doc."""

    with pytest.raises(ToolDefinitionError, match="Two tools are named"):
        Toolbox([sample, sample])


def test_parse_docstring_sections():
    desc, args = parse_docstring("""Summary line.

    Args:
        a (int): First.
        b: Second
            continued.

    Returns:
        Something.
    """)
    assert desc == "Summary line."
    assert args == {"a": "First.", "b": "Second continued."}


def test_toolbox_rolls_back_failures_and_reads(env):
    env.reset(options={"task_id": "restock"})
    d0 = env.db_digest()
    assert env.call_tool("agent", "sneaky_read", {"item_id": "widget"}).content == "read"
    assert env.db_digest() == d0  # a read tool cannot change the state, even if it tries
    r = env.call_tool("agent", "half_write", {"item_id": "widget"})
    assert r.error and r.content == "Error: failed after writing" and env.db_digest() == d0
    r = env.call_tool("agent", "buggy_write", {"item_id": "widget"})
    assert r.error and r.internal_error and "failed internally (KeyError)" in r.content
    assert env.db_digest() == d0
    with TauEnv(env.domain, strict_tools=True) as strict:
        strict.reset(options={"task_id": "restock"})
        with pytest.raises(KeyError, match=r"^'missing'$"):  # the bug itself, not a wrapper
            strict.call_tool("agent", "buggy_write", {"item_id": "widget"})
        assert strict.db_digest() == d0
    r = env.call_tool("agent", "add_stock", {"item_id": "widget", "qty": 2})
    assert not r.error and r.wrote and env.db_digest() != d0


def test_discoverable_and_handover_activation(env):
    env.reset(options={"task_id": "restock"})
    assert "secret_restock_1234" not in env.active_tools("agent")
    r = env.call_tool("agent", "secret_restock_1234", {"item_id": "widget"})
    assert r.error and "Unknown tool 'secret_restock_1234'" in r.content
    r = env.call_tool("agent", "unlock_tool", {"tool_name": "secret_restock_123"})
    assert r.error and "No tool named 'secret_restock_123' can be unlocked" in r.content
    r = env.call_tool("agent", "unlock_tool", {"tool_name": "secret_restock_1234"})
    assert not r.error and "Tool: secret_restock_1234" in r.content
    assert "secret_restock_1234" in env.active_tools("agent")
    # user tools: hidden from the user until handed over; the agent cannot call them at all
    assert env.call_tool("user", "confirm_in_app", {"code": "A"}).error
    assert env.call_tool("agent", "confirm_in_app", {"code": "A"}).error
    assert env.call_tool("user", "hand_over_tool", {"tool_name": "confirm_in_app"}).error  # agent-only
    assert not env.call_tool("agent", "hand_over_tool", {"tool_name": "confirm_in_app"}).error
    assert not env.call_tool("user", "confirm_in_app", {"code": "A"}).error


def test_unknown_tool_suggests(env):
    env.reset(options={"task_id": "restock"})
    r = env.call_tool("agent", "get_iten", {})
    assert r.error and 'Did you mean "get_item"' in r.content


def test_tool_error_is_not_a_tau_env_error():
    from tau_env.error import Error

    assert not issubclass(ToolError, Error)


# --- echoed model text is clipped; results are valid Unicode ---------------------------------------
def test_long_model_text_is_clipped_in_error_messages(env):
    import json

    from tau_env import call

    env.reset(options={"task_id": "restock"})
    env.step("hi")
    huge = "get_itemm" + "x" * 10_000_000
    env.step({"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": huge, "arguments": "{}"}}]})
    content = env.trajectory[-1]["tool_results"][0]["content"]
    assert content.startswith("Error: Unknown tool '" + huge[:80] + "... (10000009 characters)'. Available tools: ")
    assert len(content) < 1000
    env.step(call("get_item", item_id="widget", **{"k" * 5000: 1}))
    content = env.trajectory[-1]["tool_results"][0]["content"]
    assert content.startswith("Error: Unexpected argument '" + "k" * 60 + "... (5000 characters)' for tool 'get_item'")
    env.step(call("unlock_tool", tool_name="s" * 5000))
    content = env.trajectory[-1]["tool_results"][0]["content"]
    assert content == f"Error: No tool named '{'s' * 80}... (5000 characters)' can be unlocked. Tool names are " + (
        "written in the documents; search them and copy the exact name."
    )
    env.step(call("get_item", item_id="x" * 9000))
    assert "is too long (9000 characters; at most 8192)" in env.trajectory[-1]["tool_results"][0]["content"]
    json.dumps(env.trajectory, ensure_ascii=False).encode("utf-8")


def test_tool_output_with_lone_surrogates_is_escaped(domain):
    from tau_env import Domain, TauEnv, call

    @tool
    def echo(ctx, text: str) -> str:
        """Echo a text, broken.

        Args:
            text: Anything.
        """
        if text == "raise":
            raise ToolError("bad \udcff input")
        return text + "\ud800"

    env = TauEnv(
        Domain(
            **{
                **{f: getattr(domain, f) for f in ("name", "schema", "seed", "documents", "policy", "tasks")},
                "tools": [*domain.tools, echo],
            }
        )
    )
    env.reset(options={"task_id": "nothing"})
    env.step("hi")
    env.step(call("echo", text="ok"))
    env.step(call("echo", text="raise"))
    results = [e["tool_results"][0]["content"] for e in env.trajectory[1:]]
    assert results == ["ok\\ud800", "Error: bad \\udcff input"]
