"""Running calls: :class:`ToolContext`, :class:`ToolResult`, :class:`Toolbox` and the meta tools.

A :class:`Toolbox` runs calls for a seat: it checks that the tool is active for that seat,
validates arguments, and runs the call in a savepoint (:class:`tau_env.db.savepoint`). A failed
call (a :class:`~tau_env.error.ToolError` or a bug in the tool) rolls back; a read tool is always
rolled back, so it cannot change the state. The one exception is a *raw* tool's
(:func:`~tau_env.tools.raw_tool`) other exceptions: a raw write tool keeps what it wrote before
raising, as the benchmark it reproduces does.

The meta tools ``unlock_tool`` and ``hand_over_tool`` activate a discoverable agent tool and a
hand-over user tool; a toolbox adds them when it has such tools.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tau_env.db import savepoint
from tau_env.error import InfrastructureError, ToolDefinitionError, ToolError
from tau_env.messages import clip, escape_surrogates
from tau_env.tools.definition import SEATS, Tool, tool
from tau_env.tools.schema import ArgumentError, suggest

# The name the logger had before tools.py became a package, kept for logging configurations.
logger = logging.getLogger("tau_env.tools")

#: Unknown tool names up to this length reach a toolbox's ``unknown_tool_message`` as sent; longer
#: ones are clipped (see :func:`tau_env.messages.clip`).
MAX_ECHOED_NAME = 200


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
        self._initial: tuple[tuple[int, ...], dict[str, frozenset[str]]] | None = None
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
        """Tools active at the start of an episode: all but discoverable, hand-over and hidden tools
        (new sets: an episode's meta tools add to them).
        """
        key = tuple(map(id, self.tools.values()))
        if self._initial is None or self._initial[0] != key:  # computed once per set of tools
            tools = self.tools.items()
            hidden = {n for n, t in tools if t.discoverable or t.handover or t.hidden}
            self._initial = (key, {s: frozenset(n for n, t in tools if t.side == s and n not in hidden) for s in SEATS})
        return {s: set(active) for s, active in self._initial[1].items()}

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
                text += suggest(name, active)
            return ToolResult(name, escape_surrogates(text), error=True)
        if t.raw:
            args = dict(arguments or {})
        else:
            try:
                args = t.validate(arguments or {})
            except ArgumentError as e:
                return ToolResult(name, escape_surrogates(f"Error: {e}"), error=True)
        # One savepoint for every outcome: an exception raised through it rolls back; a return keeps
        # the writes only while ``sp.keep`` holds (a read tool can never change the state).
        with savepoint(ctx.conn, keep=t.kind == "write") as sp:
            try:
                content = _to_text(t.fn(ctx, **args) if t.takes_ctx else t.fn(**args))
            except ToolError as e:
                sp.keep = False
                return ToolResult(name, escape_surrogates(f"Error: {e}"), error=True)
            except InfrastructureError:
                # A service the tool depends on (an embedding or reranker endpoint) failed after its
                # retries: not the model's doing and not a tool bug. It propagates (rolled back), so
                # the harness reruns the episode or reports it outside every score.
                raise
            except Exception as e:
                if t.raw:
                    # The benchmark's contract: an exception is the tool's error message, and what the
                    # tool wrote before raising stays (the benchmark's tables are plain data with no
                    # rollback). A read tool still leaves no trace.
                    return ToolResult(name, escape_surrogates(f"Error: {e}"), error=True, wrote=t.kind == "write")
                # A bug in the domain's tool, not the model's fault: roll back, show a generic error,
                # and log it; check_domain reports such calls, and strict mode re-raises them.
                if strict:
                    raise
                sp.keep = False
                logger.warning("tool %s raised %s: %s", name, type(e).__name__, e, exc_info=True)
                return ToolResult(
                    name,
                    f"Error: tool '{name}' failed internally ({type(e).__name__}).",
                    error=True,
                    internal_error=True,
                )
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
