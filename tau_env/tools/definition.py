"""The :class:`Tool` type, and the decorators that make one: :func:`tool` and :func:`raw_tool`.

``@tool`` turns a function with type hints and a Google-style docstring into a :class:`Tool`
with an OpenAI function schema and an argument validator::

    @tool(kind="write")
    def close_account(ctx: ToolContext, account_id: str) -> str:
        '''Close an account whose balance is zero.

        Args:
            account_id: The account to close, e.g. "CHK-1001".
        '''
"""  # noqa: D214 - the example's Args section is indented as in a real tool

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tau_env.error import ToolDefinitionError
from tau_env.messages import clip
from tau_env.tools.docstrings import parse_docstring
from tau_env.tools.schema import MAX_STRING, ArgumentError, Validator, compile_type, suggest

#: The seats that call tools.
SEATS = ("agent", "user")
#: A tool reads (its savepoint is always rolled back) or writes.
KINDS = ("read", "write")


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
    #: Optional metadata for task synthesis (never part of :attr:`schema`): tools that must have run
    #: before this one (e.g. ``("verify_identity",)``).
    requires: tuple[str, ...] = ()
    #: Argument names whose values this tool's output gives a later call (e.g. ``("card_id",)``).
    produces: tuple[str, ...] = ()
    #: Tools that cannot both act on the same record in one conversation (e.g. ``("unlock_card",)``).
    conflicts: tuple[str, ...] = ()

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Return the validated arguments (defaults filled in), or raise :class:`ArgumentError`."""
        validators = self.validators  # plain loops that stop at the first problem: this runs on every call
        for k in arguments:
            if k not in validators:
                names = list(validators)
                raise ArgumentError(
                    f"Unexpected argument '{clip(str(k), 60)}' for tool '{self.name}'; it takes "
                    f"{names or 'no arguments'}.{suggest(str(k), names)}"
                )
        for k in self.required:
            if k not in arguments:
                raise ArgumentError(
                    f"Missing required argument '{k}' for tool '{self.name}' "
                    f"({self.parameters['properties'][k].get('type', 'value')})."
                )
        out = dict(self.defaults)
        for k, v in arguments.items():
            out[k] = validators[k](k, v)
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
    requires: tuple[str, ...] = (),
    produces: tuple[str, ...] = (),
    conflicts: tuple[str, ...] = (),
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
        requires: Metadata for task synthesis (not shown to models): names of the tools that must
            have succeeded before this one, e.g. ``("verify_identity",)``.
        produces: Metadata: argument names whose values this tool's output provides to later
            calls, e.g. ``("card_id",)``.
        conflicts: Metadata: names of the tools that cannot both act on the same record in one
            conversation (one undoes the other or breaks its precondition).
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        where = f"tool {f.__name__!r}"
        meta = {
            k: _names(where, k, v)
            for k, v in (("requires", requires), ("produces", produces), ("conflicts", conflicts))
        }
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
            schema, validator = compile_type(hints[p.name], max_string, f"{where}, parameter {p.name!r}")
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
            **meta,
        )

    return wrap(fn) if fn is not None else wrap


def _names(where: str, what: str, value: Any) -> tuple[str, ...]:
    """``value`` as a tuple of non-empty names, or ToolDefinitionError saying what is wrong."""
    if isinstance(value, str) or not isinstance(value, (tuple, list)):
        hint = f" (write ({value!r},) for one name)" if isinstance(value, str) else ""
        raise ToolDefinitionError(
            f"{where}: {what} must be a tuple of tool or argument names, got {type(value).__name__} {value!r}{hint}."
        )
    for v in value:
        if not isinstance(v, str) or not v.strip():
            raise ToolDefinitionError(
                f"{where}: {what} must hold non-empty strings (tool or argument names), got {v!r} in {tuple(value)!r}."
            )
    return tuple(value)


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
