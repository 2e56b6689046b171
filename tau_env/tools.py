"""Tools: typed, documented functions that the seats call.

``@tool`` turns a function with type hints and a Google-style docstring into a :class:`Tool`
with an OpenAI function schema and an argument validator::

    @tool(kind="write")
    def close_account(ctx: ToolContext, account_id: str) -> str:
        '''Close an account whose balance is zero.

Args:
            account_id: The account to close, e.g. "CHK-1001".
        '''

A :class:`Toolbox` runs calls for a seat: it checks that the tool is active for that seat,
validates arguments, and runs the call in a savepoint. A failed call (a :class:`ToolError` or a
bug in the tool) rolls back; a read tool is always rolled back, so it cannot change the state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import math
import re
import sqlite3
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tau_env.error import ToolDefinitionError, ToolError, did_you_mean
from tau_env.messages import clip, escape_surrogates

logger = logging.getLogger(__name__)

SEATS = ("agent", "user")
KINDS = ("read", "write")
#: Longest string argument a tool accepts, unless the tool sets ``max_string``.
MAX_STRING = 8192
#: Unknown tool names up to this length reach a toolbox's ``unknown_tool_message`` as sent; longer
#: ones are clipped (see :func:`tau_env.messages.clip`).
MAX_ECHOED_NAME = 200


def _suggest(word: str, choices: Iterable[str]) -> str:
    """``did_you_mean`` for model text: nothing for text too long to be a misspelt name (difflib is slow on it)."""
    return did_you_mean(word, choices) if len(word) <= 100 else ""


# --- docstrings ----------------------------------------------------------------------------
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Example|Examples|Note|Notes):\s*$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {argument: description})."""
    lines = inspect.cleandoc(doc or "").splitlines()
    desc: list[str] = []
    args: dict[str, str] = {}
    section = None
    current = None
    arg_indent = None
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section = m.group(1)
            current = None
            continue
        if section is None:
            desc.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            am = re.match(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if am and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = am.group(1).lstrip("*")
                args[current] = am.group(2).strip()
            elif current is not None:
                args[current] = (args[current] + " " + line.strip()).strip()
    return "\n".join(desc).strip(), args


# --- types -> schema + validator -----------------------------------------------------------
class ArgumentError(Exception):
    """An argument failed validation; the message is shown to the model."""


Validator = Callable[[str, Any], Any]


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _show(v: Any) -> str:
    try:
        text = json.dumps(v[:100] if isinstance(v, str) else v, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):  # a huge integer, or nesting too deep to print
        text = f"<{_type_name(v)}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _compile_type(tp: Any, max_string: int, where: str) -> tuple[dict[str, Any], Validator]:
    origin = typing.get_origin(tp)
    if tp is str:

        def v_str(name: str, x: Any) -> Any:
            if not isinstance(x, str):
                raise ArgumentError(f"Argument '{name}' must be a string, got {_type_name(x)} {_show(x)}.")
            if len(x) > max_string:
                raise ArgumentError(f"Argument '{name}' is too long ({len(x)} characters; at most {max_string}).")
            return x

        return {"type": "string"}, v_str
    if tp is bool:

        def v_bool(name: str, x: Any) -> Any:
            if not isinstance(x, bool):
                raise ArgumentError(f"Argument '{name}' must be true or false, got {_type_name(x)} {_show(x)}.")
            return x

        return {"type": "boolean"}, v_bool
    if tp is int:

        def v_int(name: str, x: Any) -> Any:
            if isinstance(x, float) and math.isfinite(x) and x.is_integer() and abs(x) < 2**63:
                return int(x)  # 100.0 from a model means 100: normalize so states compare equal
            if not isinstance(x, int) or isinstance(x, bool):
                raise ArgumentError(f"Argument '{name}' must be an integer, got {_type_name(x)} {_show(x)}.")
            if abs(x) >= 2**63:
                raise ArgumentError(f"Argument '{name}' is out of range ({_show(x)}).")
            return x

        return {"type": "integer"}, v_int
    if tp is float:

        def v_float(name: str, x: Any) -> Any:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise ArgumentError(f"Argument '{name}' must be a number, got {_type_name(x)} {_show(x)}.")
            x = float(x)
            if not math.isfinite(x):
                raise ArgumentError(f"Argument '{name}' must be a finite number, got {x}.")
            return x

        return {"type": "number"}, v_float
    if origin is Literal:
        choices = typing.get_args(tp)
        kinds = {type(c) for c in choices}
        schema: dict[str, Any] = {"enum": list(choices)}
        if kinds == {str}:
            schema = {"type": "string", "enum": list(choices)}

        def v_lit(name: str, x: Any) -> Any:
            for c in choices:
                if type(x) is type(c) and x == c:
                    return c
            raise ArgumentError(
                f"Argument '{name}' must be one of {', '.join(_show(c) for c in choices)}; got {_show(x)}."
                + (_suggest(x, [c for c in choices if isinstance(c, str)]) if isinstance(x, str) else "")
            )

        return schema, v_lit
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) != 1 or len(typing.get_args(tp)) != 2:
            raise ToolDefinitionError(f"{where}: only 'T | None' unions are supported, got {tp!r}.")
        inner_schema, inner = _compile_type(members[0], max_string, where)

        def v_opt(name: str, x: Any) -> Any:
            return None if x is None else inner(name, x)

        return {**inner_schema, "nullable": True}, v_opt
    if origin in (list, tuple) or tp in (list, tuple):
        args = typing.get_args(tp)
        item_schema, item = _compile_type(args[0], max_string, where) if args else ({}, lambda n, x: x)

        def v_list(name: str, x: Any) -> Any:
            if not isinstance(x, list):
                raise ArgumentError(f"Argument '{name}' must be an array, got {_type_name(x)} {_show(x)}.")
            if len(x) > 1000:
                raise ArgumentError(f"Argument '{name}' has too many items ({len(x)}; at most 1000).")
            return [item(f"{name}[{i}]", v) for i, v in enumerate(x)]

        schema = {"type": "array"}
        if item_schema:
            schema["items"] = item_schema
        return schema, v_list
    if origin is dict or tp is dict:

        def v_dict(name: str, x: Any) -> Any:
            if not isinstance(x, dict):
                raise ArgumentError(f"Argument '{name}' must be an object, got {_type_name(x)} {_show(x)}.")
            return x

        return {"type": "object"}, v_dict
    raise ToolDefinitionError(
        f"{where}: unsupported parameter type {tp!r}; use str, int, float, bool, "
        "Literal[...], list[T], dict or T | None."
    )


# --- the tool --------------------------------------------------------------------------------
@dataclass
class Tool:
    """A callable exposed to one seat, with its OpenAI schema and argument validation."""

    name: str
    description: str
    fn: Callable[..., Any]
    parameters: dict[str, Any]
    validators: dict[str, Validator]
    required: tuple[str, ...]
    defaults: dict[str, Any]
    kind: str = "read"
    side: str = "agent"
    discoverable: bool = False
    handover: bool = False
    ends_episode: bool = False
    takes_ctx: bool = True
    arg_descriptions: dict[str, str] = field(default_factory=dict)
    #: Arguments go to ``fn`` as given (no validation), any exception becomes ``Error: <message>`` and
    #: a write tool's writes before it raised stay: for reproducing a benchmark whose tools behave
    #: that way (see :func:`raw_tool`).
    raw: bool = False
    #: Callable by its seat but never listed in its schemas (a benchmark's tools reachable by name).
    hidden: bool = False

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Return the validated arguments (defaults filled in), or raise :class:`ArgumentError`."""
        unknown = [k for k in arguments if k not in self.validators]
        if unknown:
            names = list(self.validators)
            raise ArgumentError(
                f"Unexpected argument '{clip(str(unknown[0]), 60)}' for tool '{self.name}'; it takes "
                f"{names or 'no arguments'}.{_suggest(str(unknown[0]), names)}"
            )
        missing = [k for k in self.required if k not in arguments]
        if missing:
            raise ArgumentError(
                f"Missing required argument '{missing[0]}' for tool '{self.name}' "
                f"({self.parameters['properties'][missing[0]].get('type', 'value')})."
            )
        out = dict(self.defaults)
        for k, v in arguments.items():
            out[k] = self.validators[k](k, v)
        return out

    def describe(self) -> str:
        """A plain-text description (name, purpose, parameters) for unlock messages and docs."""
        lines = [f"Tool: {self.name}", f"Description: {self.description}", "Parameters:"]
        props = self.parameters["properties"]
        if not props:
            lines.append("  (no parameters)")
        for p, s in props.items():
            req = "required" if p in self.required else "optional"
            typ = s.get("type", "/".join(map(str, s.get("enum", []))))
            enum = f" one of {s['enum']}" if "enum" in s else ""
            lines.append(f"  - {p}: {typ} ({req}){enum} - {self.arg_descriptions.get(p, '')}".rstrip(" -"))
        return "\n".join(lines)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    kind: str = "read",
    side: str = "agent",
    discoverable: bool = False,
    handover: bool = False,
    ends_episode: bool = False,
    max_string: int = MAX_STRING,
) -> Any:
    """Make a :class:`Tool` of a typed, documented function.

    Args:
        name: Tool name shown to the model; defaults to the function name.
        kind: ``"read"`` (never changes the database; its savepoint is always rolled back) or
            ``"write"``.
        side: ``"agent"`` or ``"user"``: which seat may call it.
        discoverable: Agent tools only: hidden until the agent calls ``unlock_tool`` with its
            name (which it finds in the documents).
        handover: User tools only: hidden from the user until the agent calls
            ``hand_over_tool`` with its name.
        ends_episode: A successful call ends the episode (a transfer to a human).
        max_string: Longest accepted string argument.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        where = f"tool {f.__name__!r}"
        if kind not in KINDS:
            raise ToolDefinitionError(f"{where}: kind must be one of {KINDS}, got {kind!r}.")
        if side not in SEATS:
            raise ToolDefinitionError(f"{where}: side must be one of {SEATS}, got {side!r}.")
        if discoverable and side != "agent":
            raise ToolDefinitionError(
                f"{where}: only agent tools can be discoverable; use handover=True for user tools."
            )
        if handover and side != "user":
            raise ToolDefinitionError(f"{where}: only user tools can be handed over.")
        description, arg_docs = parse_docstring(f.__doc__ or "")
        if not description:
            raise ToolDefinitionError(f"{where}: add a docstring; its first paragraph becomes the tool description.")
        hints = typing.get_type_hints(f)
        params = list(inspect.signature(f).parameters.values())
        takes_ctx = bool(params) and params[0].name == "ctx"
        if takes_ctx:
            params = params[1:]
        props: dict[str, Any] = {}
        validators: dict[str, Validator] = {}
        required: list[str] = []
        defaults: dict[str, Any] = {}
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ToolDefinitionError(f"{where}: *args/**kwargs are not allowed in tools.")
            if p.name not in hints:
                raise ToolDefinitionError(f"{where}: parameter {p.name!r} needs a type hint.")
            if p.name not in arg_docs:
                raise ToolDefinitionError(f"{where}: document parameter {p.name!r} in the docstring's Args section.")
            schema, validator = _compile_type(hints[p.name], max_string, f"{where}, parameter {p.name!r}")
            schema = {k: v for k, v in schema.items() if k != "nullable"}
            props[p.name] = {**schema, "description": arg_docs[p.name]}
            validators[p.name] = validator
            if p.default is p.empty:
                required.append(p.name)
            else:
                defaults[p.name] = p.default
        parameters = {"type": "object", "properties": props, "required": required}
        return Tool(
            name=name or f.__name__,
            description=description,
            fn=f,
            parameters=parameters,
            validators=validators,
            required=tuple(required),
            defaults=defaults,
            kind=kind,
            side=side,
            discoverable=discoverable,
            handover=handover,
            ends_episode=ends_episode,
            takes_ctx=takes_ctx,
            arg_descriptions=arg_docs,
        )

    return wrap(fn) if fn is not None else wrap


def raw_tool(
    fn: Callable[..., Any],
    schema: dict[str, Any],
    *,
    kind: str = "read",
    side: str = "agent",
    hidden: bool = False,
    ends_episode: bool = False,
) -> Tool:
    """A tool that takes its arguments unvalidated, with a given OpenAI schema.

    For reproducing an existing benchmark byte for byte: ``fn(ctx, **arguments)`` gets exactly
    what the model sent, and any exception it raises becomes the observation ``Error: <message>``
    (Python's own ``TypeError`` texts included). As in such a benchmark, a write tool that raises
    keeps what it wrote before raising; a read tool never changes the state. New domains should
    use :func:`tool`, whose failed calls always roll back.
    """
    f = schema["function"]
    return Tool(
        name=f["name"],
        description=f.get("description", ""),
        fn=fn,
        parameters=f["parameters"],
        validators={},
        required=tuple(f["parameters"].get("required", ())),
        defaults={},
        kind=kind,
        side=side,
        ends_episode=ends_episode,
        raw=True,
        hidden=hidden,
    )


# --- running calls ---------------------------------------------------------------------------
@dataclass
class ToolContext:
    """What a tool sees: the episode's database and deterministic clock and ids.

    Attributes:
        conn: The episode's SQLite connection (use parameterised SQL only).
        now: The episode's clock, fixed per task so replays are deterministic.
        task_id: The task being played, if any.
        kb: The domain's knowledge base (for search tools), if any.
        active: The active tool names of each seat (meta tools change it).
        toolbox: The toolbox running the call.
        state: Per-episode scratch state of the domain's tools (copied with snapshots).
    """

    conn: sqlite3.Connection
    now: datetime
    task_id: str | None = None
    kb: Any = None
    active: dict[str, set[str]] = field(default_factory=lambda: {s: set() for s in SEATS})
    toolbox: Toolbox | None = None
    state: dict[str, Any] = field(default_factory=dict)

    def make_id(self, prefix: str, *parts: Any, n: int = 10) -> str:
        """A deterministic id: ``prefix`` + the first ``n`` hex digits of SHA-256 of the parts."""
        seed = ":".join(map(str, parts))
        return prefix + hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:n]

    def today(self) -> str:
        return self.now.date().isoformat()

    def copy_state(self) -> tuple[dict[str, set[str]], dict[str, Any]]:
        import copy

        return {s: set(v) for s, v in self.active.items()}, copy.deepcopy(self.state)


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one call: ``content`` is what the calling seat sees."""

    name: str
    content: str
    error: bool = False
    internal_error: bool = False
    ends_episode: bool = False
    wrote: bool = False


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.dumps(value, ensure_ascii=False, default=str)


class Toolbox:
    """The tools of a domain for both seats, plus the unlock / hand-over meta tools.

    Args:
        tools: The tools.
        unknown_tool_message: ``(name, active names) -> text`` shown when a seat calls a tool it
            does not have; the default names the active tools and suggests the closest. It gets
            the name as sent up to ``MAX_ECHOED_NAME`` characters, a clipped one beyond.

    Every text a call returns is valid Unicode (lone surrogates escaped, see
    :func:`tau_env.messages.escape_surrogates`).
    """

    def __init__(self, tools: Iterable[Tool], unknown_tool_message: Callable[[str, list[str]], str] | None = None):
        self.unknown_tool_message = unknown_tool_message
        self.tools: dict[str, Tool] = {}
        # Schema lists by active set, shared by every env of this toolbox: the same dicts each time,
        # so that a client can encode them once (see ChatClient).
        self._schemas: dict[frozenset[str], tuple[dict[str, Any], ...]] = {}
        for t in tools:
            if t.name in self.tools:
                raise ToolDefinitionError(f"Two tools are named {t.name!r}.")
            self.tools[t.name] = t
        if any(t.discoverable for t in self.tools.values()):
            self._add(unlock_tool)
        if any(t.handover for t in self.tools.values()):
            self._add(hand_over_tool)

    def _add(self, t: Tool) -> None:
        if t.name in self.tools:
            raise ToolDefinitionError(f"Tool name {t.name!r} is reserved for the core's meta tool.")
        self.tools[t.name] = t

    def initial_active(self) -> dict[str, set[str]]:
        """Tools active at the start of an episode: all but discoverable, hand-over and hidden tools."""
        return {
            s: {n for n, t in self.tools.items() if t.side == s and not (t.discoverable or t.handover or t.hidden)}
            for s in SEATS
        }

    def schemas(self, names: Iterable[str]) -> list[dict[str, Any]]:
        """OpenAI schemas of ``names`` in the toolbox's definition order (read them; do not change them)."""
        wanted = frozenset(names)
        known = self._schemas.get(wanted)
        if known is None:
            known = self._schemas[wanted] = tuple(t.schema for n, t in self.tools.items() if n in wanted)
        return list(known)

    def call(
        self, ctx: ToolContext, seat: str, name: str, arguments: dict[str, Any] | None, strict: bool = False
    ) -> ToolResult:
        """Run one call for ``seat``. Never raises for the model's mistakes; ``strict`` re-raises tool bugs."""
        t = self.tools.get(name)
        if t is None or (name not in ctx.active[seat] and not (t.hidden and t.side == seat)):
            active = sorted(ctx.active[seat])
            if self.unknown_tool_message is not None:
                text = self.unknown_tool_message(clip(name, MAX_ECHOED_NAME), active)
            else:
                text = f"Error: Unknown tool '{clip(name)}'. Available tools: {', '.join(active)}."
                text += _suggest(name, active)
            return ToolResult(name, escape_surrogates(text), error=True)
        if t.raw:
            args = dict(arguments or {})
        else:
            try:
                args = t.validate(arguments or {})
            except ArgumentError as e:
                return ToolResult(name, escape_surrogates(f"Error: {e}"), error=True)
        conn = ctx.conn
        conn.execute("SAVEPOINT tau_call")
        try:
            value = t.fn(ctx, **args) if t.takes_ctx else t.fn(**args)
            content = _to_text(value)
        except ToolError as e:
            conn.execute("ROLLBACK TO tau_call")
            conn.execute("RELEASE tau_call")
            return ToolResult(name, escape_surrogates(f"Error: {e}"), error=True)
        except Exception as e:
            if t.raw:
                # The benchmark's contract: an exception is the tool's error message, and what the
                # tool wrote before raising stays (the benchmark's tables are plain data with no
                # rollback). A read tool still leaves no trace.
                if t.kind == "read":
                    conn.execute("ROLLBACK TO tau_call")
                conn.execute("RELEASE tau_call")
                return ToolResult(name, escape_surrogates(f"Error: {e}"), error=True, wrote=t.kind == "write")
            # A bug in the domain's tool, not the model's fault: roll back, show a generic error,
            # and log it; check_domain reports such calls, and strict mode re-raises them.
            conn.execute("ROLLBACK TO tau_call")
            conn.execute("RELEASE tau_call")
            if strict:
                raise
            logger.warning("tool %s raised %s: %s", name, type(e).__name__, e, exc_info=True)
            return ToolResult(
                name, f"Error: tool '{name}' failed internally ({type(e).__name__}).", error=True, internal_error=True
            )
        if t.kind == "read":
            conn.execute("ROLLBACK TO tau_call")  # a read tool can never change the state
        conn.execute("RELEASE tau_call")
        return ToolResult(name, escape_surrogates(content), ends_episode=t.ends_episode, wrote=t.kind == "write")


# --- meta tools -------------------------------------------------------------------------------
@tool(name="unlock_tool")
def unlock_tool(ctx: ToolContext, tool_name: str) -> str:
    """Unlock a specialised tool whose exact name you found in the documents, so you can call it.

    Args:
        tool_name: The exact tool name as written in the documents.
    """
    box = ctx.toolbox
    t = box.tools.get(tool_name) if box else None
    if t is None or not t.discoverable:
        raise ToolError(
            f"No tool named '{clip(tool_name)}' can be unlocked. Tool names are written in the "
            "documents; search them and copy the exact name."
        )
    ctx.active["agent"].add(tool_name)
    return f"Tool unlocked: {tool_name}. You can now call it directly.\n\n{t.describe()}"


@tool(name="hand_over_tool")
def hand_over_tool(ctx: ToolContext, tool_name: str) -> str:
    """Give the customer a tool they must use themselves (for example to confirm a request on their device).

    Args:
        tool_name: The exact name of the customer-side tool, as written in the documents.
    """
    box = ctx.toolbox
    t = box.tools.get(tool_name) if box else None
    if t is None or not t.handover:
        raise ToolError(
            f"No customer tool named '{clip(tool_name)}' can be handed over. Customer tool names "
            "are written in the documents."
        )
    ctx.active["user"].add(tool_name)
    return f"Tool handed over to the customer: {tool_name}. Ask them to use it.\n\n{t.describe()}"
