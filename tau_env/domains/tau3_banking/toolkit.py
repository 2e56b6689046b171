"""The machinery every tau3-banking tool uses: the episode context, the pinned clock,
deterministic ids, the record listing, and the registry of tools.

Tools are plain functions ``fn(self, ...)`` whose ``self`` is the episode's :class:`Tau3Context`.
The decorators name them ``KnowledgeTools.<name>`` / ``KnowledgeUserTools.<name>``, so that
Python's own ``TypeError`` texts for bad arguments read exactly as the benchmark's do.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from tau_env.domains.tau3_banking.store import Store
from tau_env.error import ToolDefinitionError
from tau_env.messages import clip
from tau_env.tools import MAX_ECHOED_NAME, ToolContext

#: "Today" in every date the tools write.
TODAY = "11/14/2025"
#: "Now" for account-age arithmetic.
NOW = datetime(2025, 11, 14, 3, 40, 0)
#: What get_current_time returns.
CURRENT_TIME_TEXT = "The current time is 2025-11-14 03:40:00 EST."


def shown_name(name: Any) -> Any:
    """A tool name the model sent, for an error text: as sent, unless it is a string longer than
    ``MAX_ECHOED_NAME`` characters (then a prefix and its length; a deliberate difference from the
    benchmark, which echoes any length).
    """
    return clip(name, MAX_ECHOED_NAME) if isinstance(name, str) else name


def H(seed: str, n: int) -> str:  # noqa: N802 - the specification's name
    """The first ``n`` hex digits of SHA-256 of ``seed``."""
    return hashlib.sha256(seed.encode("utf-8")).hexdigest()[:n]


@dataclass
class Tau3Context(ToolContext):
    """The episode as tau3-banking's tools see it.

    Attributes:
        store: Row access with the benchmark's semantics.
        read_log_allowlist: Read-only discoverable tools whose calls are logged in this task.
    """

    read_log_allowlist: frozenset[str] = field(default_factory=frozenset)
    _store: Store | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def store(self) -> Store:
        if self._store is None or self._store.conn is not self.conn:
            self._store = Store(self.conn)
        return self._store

    @property
    def unlocked(self) -> set[str]:
        """Discoverable agent tools unlocked in this episode (in memory, never in the database)."""
        return self.state.setdefault("unlocked", set())

    @property
    def given(self) -> dict[str, Any]:
        """Discoverable user tools given in this episode, with the arguments the agent gave."""
        return self.state.setdefault("given", {})


# --- registry -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolSpec:
    name: str
    fn: Callable[..., str]
    side: str  # "agent" or "user"
    discoverable: bool


_AGENT: dict[str, ToolSpec] = {}
_USER: dict[str, ToolSpec] = {}
#: The tool definitions by name, filled by the decorators below when the tool modules are imported.
#: They are definitions, not state: read-only views (nothing changes them while episodes run).
AGENT_TOOLS: Mapping[str, ToolSpec] = MappingProxyType(_AGENT)
USER_TOOLS: Mapping[str, ToolSpec] = MappingProxyType(_USER)


def _register(registry: dict[str, ToolSpec], cls: str, side: str, discoverable: bool) -> Callable[[Callable], Callable]:
    def wrap(fn: Callable[..., str]) -> Callable[..., str]:
        fn.__qualname__ = f"{cls}.{fn.__name__}"  # Python's TypeError texts name the function this way
        if fn.__name__ in registry:
            raise ToolDefinitionError(f"tau3 tool {fn.__name__!r} is defined twice; rename one of them.")
        registry[fn.__name__] = ToolSpec(fn.__name__, fn, side, discoverable)
        return fn

    return wrap


def agent_tool(fn: Callable[..., str]) -> Callable[..., str]:
    """A base agent tool (in the agent's schema)."""
    return _register(_AGENT, "KnowledgeTools", "agent", False)(fn)


def discoverable_agent_tool(fn: Callable[..., str]) -> Callable[..., str]:
    """A discoverable agent tool (reached through unlock / call_discoverable_agent_tool)."""
    return _register(_AGENT, "KnowledgeTools", "agent", True)(fn)


def user_tool(fn: Callable[..., str]) -> Callable[..., str]:
    """A user tool (in the user's schema)."""
    return _register(_USER, "KnowledgeUserTools", "user", False)(fn)


def discoverable_user_tool(fn: Callable[..., str]) -> Callable[..., str]:
    """A discoverable user tool (given by the agent, called through call_discoverable_user_tool)."""
    return _register(_USER, "KnowledgeUserTools", "user", True)(fn)


# --- shared formats -------------------------------------------------------------------------------
def listing(table: str, rows: list[tuple[str, dict[str, Any]]]) -> str:
    """The record listing: ``Found <n> record(s) in '<table>':`` and each row field by field."""
    if not rows:
        return f"No records found in '{table}'."
    lines = [f"Found {len(rows)} record(s) in '{table}':", ""]
    for i, (rid, row) in enumerate(rows, 1):
        lines.append(f"{i}. Record ID: {rid}")
        lines.extend(f"   {k}: {v}" for k, v in row.items())
        lines.append("")
    return "\n".join(lines)


def query_listing(self: Tau3Context, table: str, field_name: str, value: Any) -> str:
    r"""The listing of rows where ``field_name`` equals ``value``, with the filter built as JSON text.

    The benchmark pastes the value into a small JSON text, so a value containing ``"`` or ``\\``
    fails to parse; the error text is Python's JSON decoder message.
    """
    try:
        filt = json.loads('{"%s": "%s"}' % (field_name, value))  # noqa: UP031 - reproduces the pasting
    except json.JSONDecodeError as e:
        return f"Error: Invalid JSON: {e}"
    try:
        rows = self.store.where(table, **filt)
    except Exception as e:  # pragma: no cover - mirrors the benchmark's catch-all
        return f"Error querying database: {e}"
    return listing(table, rows)


def found_by_field(self: Tau3Context, table: str, field_name: str, value: Any) -> bool:
    """The benchmark's existence check by a field, through the pasted JSON filter of
    :func:`query_listing`: only a listing that says "No records found" counts as absent (a filter
    that does not parse is an error text, so it counts as found).
    """
    return "No records found" not in query_listing(self, table, field_name, value)


def has_rows(listing_text: str) -> bool:
    """The benchmark's test of a listing from :func:`query_listing`: it has rows unless the text
    contains "No records found" or "No results found" anywhere (a row's value saying so counts too,
    and an error text counts as rows).
    """
    return "No records found" not in listing_text and "No results found" not in listing_text


def money(value: Any) -> float:
    """A balance as a number: numbers as is, strings without ``$`` and ``,``, anything else (null,
    a list) 0.0, as the benchmark's balance parser.
    """
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return float(value.replace("$", "").replace(",", ""))
    return 0.0


def seed(*parts: Any) -> str:
    """The parts of an id seed joined by ``:``, as the benchmark's ``":".join``: a part that is not a
    string (a number, a boolean, null, a list) raises Python's own ``TypeError: sequence item <i>:
    expected str instance, <type> found``, which ``call_discoverable_*_tool`` report as invalid
    arguments and the environment as an error. (Ids the benchmark builds with f-strings instead
    accept any value; those tools keep their f-strings.).
    """
    return ":".join(parts)


def missing(*values: Any) -> bool:
    """The benchmark's required-parameters guard ``if not a or not b ...``: any value falsy
    (``""``, ``0``, ``0.0``, ``False``, ``None``, ``[]``, ``{}``) counts as missing.
    """
    return not all(values)


def ints_to_floats(value: Any) -> Any:
    """Every integer inside parsed JSON becomes a float (booleans, strings and null unchanged)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, list):
        return [ints_to_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: ints_to_floats(v) for k, v in value.items()}
    return value


def age_days(date_opened: Any, reference: datetime = NOW) -> int | None:
    """Whole days from ``date_opened`` (MM/DD/YYYY, midnight) to ``reference``; None if unparseable."""
    try:
        return (reference - datetime.strptime(str(date_opened), "%m/%d/%Y")).days
    except ValueError:
        return None


def title_case(text: str) -> str:
    """``some_reason`` -> ``Some Reason``."""
    return text.replace("_", " ").title()


def executed_block(name: str, arguments: dict[str, Any]) -> str:
    """``Executed: <name>`` and ``Arguments: <JSON, indent 2>``."""
    return f"Executed: {name}\nArguments: {json.dumps(arguments, indent=2)}"
