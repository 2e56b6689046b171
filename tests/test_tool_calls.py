"""Every outcome of a tool call and its one savepoint; the tools package keeps the old module's names."""

import logging
import sqlite3
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tau_env.tools
from tau_env import ToolError
from tau_env.db import EpisodeDB, Schema, build_image, savepoint
from tau_env.tools import ArgumentError, Toolbox, ToolContext, raw_tool, tool

# --- one savepoint for every outcome of a call ---------------------------------------------------


def _conn() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (x INTEGER)")
    return conn


def _rows(conn: sqlite3.Connection) -> list[int]:
    return [r[0] for r in conn.execute("SELECT x FROM t ORDER BY x")]


def _no_savepoint_left(conn: sqlite3.Connection, name: str = "tau_call") -> bool:
    try:
        conn.execute(f"RELEASE {name}")
    except sqlite3.OperationalError as e:
        return str(e) == f"no such savepoint: {name}"
    return False


def test_savepoint_keeps_rolls_back_and_nests():
    conn = _conn()
    with savepoint(conn):
        conn.execute("INSERT INTO t VALUES (1)")
    with savepoint(conn, keep=False):
        conn.execute("INSERT INTO t VALUES (2)")
    with pytest.raises(RuntimeError, match="^boom$"):
        with savepoint(conn):
            conn.execute("INSERT INTO t VALUES (3)")
            raise RuntimeError("boom")
    with pytest.raises(KeyboardInterrupt):
        with savepoint(conn):
            conn.execute("INSERT INTO t VALUES (4)")
            raise KeyboardInterrupt
    with savepoint(conn) as sp:  # a failure reported as a value: the block sets keep itself
        conn.execute("INSERT INTO t VALUES (5)")
        sp.keep = False
    with savepoint(conn, "outer"):  # nested, the same name too: the inner one is undone alone
        conn.execute("INSERT INTO t VALUES (6)")
        with savepoint(conn, "outer", keep=False):
            conn.execute("INSERT INTO t VALUES (7)")
    assert _rows(conn) == [1, 6]
    assert not conn.in_transaction and _no_savepoint_left(conn) and _no_savepoint_left(conn, "outer")


def test_episode_db_savepoint_is_the_same_context_manager():
    s = Schema.from_ddl("CREATE TABLE t (x INTEGER)")
    db = EpisodeDB(s, build_image(s, {}))
    sp = db.savepoint(keep=False)
    assert isinstance(sp, savepoint) and sp.conn is db.conn and sp.name == "tau_call"
    with sp:
        db.conn.execute("INSERT INTO t VALUES (1)")
    with db.savepoint("mine"):
        db.conn.execute("INSERT INTO t VALUES (2)")
    assert db.rows("t") == [(2,)]


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=12))
def test_savepoint_keeps_exactly_the_blocks_that_keep_and_do_not_raise(blocks):
    conn = _conn()
    conn.execute("BEGIN")  # inside an episode's transaction, as in an env
    for i, (keep, raises, flip) in enumerate(blocks):
        try:
            with savepoint(conn, keep=keep) as sp:
                conn.execute("INSERT INTO t VALUES (?)", (i,))
                if flip:
                    sp.keep = not keep
                if raises:
                    raise ValueError(i)
        except ValueError:
            pass
    assert _rows(conn) == [i for i, (keep, raises, flip) in enumerate(blocks) if (keep != flip) and not raises]
    assert conn.in_transaction and _no_savepoint_left(conn)


_BEHAVIOURS = ("return", "ToolError", "ValueError", "KeyboardInterrupt")


def _one_tool_box(kind: str, raw: bool, behaviour: str) -> tuple[Toolbox, ToolContext]:
    def fn(ctx, x: int = 1) -> str:
        ctx.conn.execute("INSERT INTO t VALUES (?)", (x,))
        if behaviour == "ToolError":
            raise ToolError("refused")
        if behaviour == "ValueError":
            raise ValueError("tool bug")
        if behaviour == "KeyboardInterrupt":
            raise KeyboardInterrupt
        return "done"

    if raw:
        params = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": []}
        schema = {"type": "function", "function": {"name": "t", "description": "T.", "parameters": params}}
        t = raw_tool(fn, schema, kind=kind)
    else:
        fn.__doc__ = "T.\n\nArgs:\n    x: X.\n"
        t = tool(fn, name="t", kind=kind)
    box = Toolbox([t])
    conn = _conn()
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t VALUES (0)")  # the episode so far: never undone by a call
    ctx = ToolContext(conn=conn, now=datetime(2025, 1, 1), toolbox=box)
    ctx.active = box.initial_active()
    return box, ctx


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("behaviour", _BEHAVIOURS)
@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("kind", ["read", "write"])
def test_every_outcome_of_a_call_keeps_or_rolls_back_as_documented(kind, raw, behaviour, strict):
    box, ctx = _one_tool_box(kind, raw, behaviour)
    write = kind == "write"
    kept = write and (behaviour == "return" or (raw and behaviour == "ValueError"))
    if behaviour == "KeyboardInterrupt" or (behaviour == "ValueError" and strict and not raw):
        with pytest.raises(KeyboardInterrupt if behaviour == "KeyboardInterrupt" else ValueError):
            box.call(ctx, "agent", "t", {"x": 1}, strict=strict)
    else:
        r = box.call(ctx, "agent", "t", {"x": 1}, strict=strict)
        expected = {
            "return": ("done", False, False, write),
            "ToolError": ("Error: refused", True, False, False),
            "ValueError": (
                ("Error: tool bug", True, False, write)
                if raw
                else ("Error: tool 't' failed internally (ValueError).", True, True, False)
            ),
        }[behaviour]
        assert (r.content, r.error, r.internal_error, r.wrote) == expected
    assert _rows(ctx.conn) == ([0, 1] if kept else [0])
    assert ctx.conn.in_transaction and _no_savepoint_left(ctx.conn)


def test_a_tool_bug_is_logged_under_tau_env_tools(caplog):
    box, ctx = _one_tool_box("write", False, "ValueError")
    with caplog.at_level(logging.WARNING, logger="tau_env.tools"):
        box.call(ctx, "agent", "t", {})
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("tau_env.tools", "tool t raised ValueError: tool bug")
    ]


def test_a_tool_that_ends_the_calls_savepoint_itself_is_not_blamed_on_the_model():
    @tool(kind="write")
    def release(ctx) -> str:
        """Releases the toolbox's savepoint (a broken tool)."""
        ctx.conn.execute("RELEASE tau_call")
        return "done"

    box = Toolbox([release])
    ctx = ToolContext(conn=_conn(), now=datetime(2025, 1, 1), toolbox=box)
    ctx.active = box.initial_active()
    with pytest.raises(sqlite3.OperationalError, match="^no such savepoint: tau_call$"):
        box.call(ctx, "agent", "release", {})


# --- the package keeps the module's names ---------------------------------------------------------
def test_the_tools_package_exports_the_names_of_the_old_module():
    assert sorted(tau_env.tools.__all__) == sorted(
        [
            *("KINDS", "MAX_ECHOED_NAME", "MAX_STRING", "SEATS", "ArgumentError", "Tool", "ToolContext"),
            *("ToolResult", "Toolbox", "Validator", "hand_over_tool", "parse_docstring", "raw_tool", "tool"),
            "unlock_tool",
        ]
    )
    for name in tau_env.tools.__all__:
        assert getattr(tau_env.tools, name) is not None
    assert callable(tau_env.tools.tool) and tau_env.tools.tool.__module__ == "tau_env.tools.definition"
    assert tau_env.tools.MAX_STRING == 8192 and tau_env.tools.SEATS == ("agent", "user")


# --- Tool.validate: the first problem in order, as before its loops were made cheaper ------------
@tool
def _three(ctx, name: str, count: int, note: str | None = None) -> str:
    """Three arguments.

    Args:
        name: A name.
        count: A count.
        note: A note.
    """
    return "ok"


def _reference_validate(t, arguments):
    """Tool.validate as it was written before (lists of every unknown and missing argument)."""
    from tau_env.messages import clip
    from tau_env.tools.schema import suggest

    unknown = [k for k in arguments if k not in t.validators]
    if unknown:
        names = list(t.validators)
        raise ArgumentError(
            f"Unexpected argument '{clip(str(unknown[0]), 60)}' for tool '{t.name}'; it takes "
            f"{names or 'no arguments'}.{suggest(str(unknown[0]), names)}"
        )
    missing = [k for k in t.required if k not in arguments]
    if missing:
        raise ArgumentError(
            f"Missing required argument '{missing[0]}' for tool '{t.name}' "
            f"({t.parameters['properties'][missing[0]].get('type', 'value')})."
        )
    out = dict(t.defaults)
    for k, v in arguments.items():
        out[k] = t.validators[k](k, v)
    return out


def _outcome(f, *args):
    try:
        return ("ok", f(*args))
    except ArgumentError as e:
        return ("error", str(e))


def test_validate_names_the_first_unknown_then_the_first_missing_argument():
    with pytest.raises(ArgumentError, match=r"^Unexpected argument 'zz' for tool '_three'"):
        _three.validate({"name": "x", "zz": 1, "nmae": 2})
    with pytest.raises(ArgumentError, match=r"^Missing required argument 'name' for tool '_three' \(string\)\.$"):
        _three.validate({"note": None})
    with pytest.raises(ArgumentError, match=r"^Missing required argument 'count' for tool '_three' \(integer\)\.$"):
        _three.validate({"name": 5})  # a missing argument is named before a bad one


@given(
    st.dictionaries(
        st.sampled_from(["name", "count", "note", "nmae", "x"]),
        st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=5), st.booleans()),
        max_size=5,
    )
)
def test_validate_gives_what_it_gave_before(arguments):
    assert _outcome(_three.validate, arguments) == _outcome(_reference_validate, _three, arguments)


def test_an_infrastructure_error_inside_a_tool_propagates_and_rolls_back():
    """A tool whose service fails (e.g. an embedding endpoint) raises InfrastructureError out of the call,
    raw or not, with its writes undone: the harness reruns the episode; it is no model mistake."""
    import sqlite3

    from tau_env.error import InfrastructureError
    from tau_env.tools import Toolbox, ToolContext, raw_tool, tool

    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (x INTEGER)")

    def failing(ctx, **kw):
        ctx.conn.execute("INSERT INTO t VALUES (1)")
        raise InfrastructureError("endpoint down")

    @tool(kind="write")
    def typed(ctx: ToolContext) -> str:
        """Write, then fail."""
        return failing(ctx)

    schema = {"type": "function", "function": {"name": "raw", "description": "d", "parameters": {"type": "object"}}}
    box = Toolbox([typed, raw_tool(failing, schema, kind="write")])
    ctx = ToolContext(conn=conn, now=__import__("datetime").datetime(2025, 1, 1), toolbox=box)
    ctx.active = box.initial_active()
    for name in ("typed", "raw"):
        with pytest.raises(InfrastructureError, match="^endpoint down$"):
            box.call(ctx, "agent", name, {})
        assert conn.execute("SELECT COUNT(*) FROM t").fetchone() == (0,)
