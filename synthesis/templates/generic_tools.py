"""The tool side of the generic templates: how a domain's tools are reached, and argument candidates.

Nothing here names a domain's tools. The mechanics (unlocking a discoverable tool, calling a hidden
one through a dispatcher, handing a tool over to the user, verifying identity, reading the clock)
are recognised from the tools' names, parameters and flags; argument values come from the
schema (enums), the descriptions (quoted or listed values, formats), and the database (the
records a customer owns, matched to parameters by name).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .generic_db import DBView, identity_kind, words

#: First words of tools that only read.
READ_VERBS = frozenset({"get", "list", "find", "search", "view", "show", "lookup", "check", "calculate", "read", "kb"})
#: First words of descriptions of tools that only read.
_READ_DESC = frozenset({"retrieve", "look", "fetch", "return", "returns", "view", "show", "display", "query"})
#: Sequential or repeated PINs that tools commonly refuse.
_BAD_PINS = {"0123", "1234", "2345", "3456", "4567", "5678", "6789", "9876", "8765", "7654", "6543", "5432", "4321"}


def first_word(name: str) -> str:
    w = re.split(r"[^a-z0-9]+", name.lower())
    return w[0] if w else ""


def params_of(tool: Any) -> dict[str, dict[str, Any]]:
    return dict((tool.parameters or {}).get("properties") or {})


def _tool_param(tool: Any) -> str | None:
    for p in params_of(tool):
        w = words(p)
        if "tool" in w:
            return p
    return None


def _args_param(tool: Any) -> str | None:
    for p in params_of(tool):
        if words(p) & {"arguments", "args"}:
            return p
    return None


@dataclass
class Mechanics:
    """How a domain's tools are reached (each field a tool name, or None when the domain has none)."""

    unlock: str | None = None
    call: str | None = None
    give: str | None = None
    user_call: str | None = None
    verifier: str | None = None
    clock: str | None = None
    tools: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, domain: Any) -> Mechanics:
        box = domain.toolbox("all")
        m = cls(tools=dict(box.tools))
        for name, t in box.tools.items():
            if t.hidden:
                continue
            w = words(name)
            tp, ap = _tool_param(t), _args_param(t)
            if t.side == "agent" and tp and "unlock" in w and not ap:
                m.unlock = m.unlock or name
            elif t.side == "agent" and tp and ap and "call" in w:
                m.call = m.call or name
            elif t.side == "agent" and tp and ("give" in w or {"hand", "over"} <= w):
                m.give = m.give or name
            elif t.side == "user" and tp and ap and "call" in w:
                m.user_call = m.user_call or name
            elif t.side == "agent" and ("verify" in w or "verification" in w) and params_of(t):
                m.verifier = m.verifier or name
            elif t.side == "agent" and not params_of(t) and w & {"time", "clock", "date"}:
                m.clock = m.clock or name
        return m

    def mechanic_names(self) -> set[str]:
        return {n for n in (self.unlock, self.call, self.give, self.user_call) if n}

    def is_read(self, name: str) -> bool:
        t = self.tools[name]
        if t.kind != "write":
            return True
        # a write-flagged tool named like a read is a read when its description reads too
        # ("Get all accounts ..."), not when it does something ("Generate a referral link ...")
        return first_word(name) in READ_VERBS and first_word(t.description or "get") in READ_VERBS | _READ_DESC

    def write_tools(self, allowed: set[str] | None = None) -> list[str]:
        """Tools a template can make a task of: writes that are no mechanics, hand-off or placeholder."""
        out = []
        for name, t in self.tools.items():
            if self.is_read(name) or name in self.mechanic_names() or name == self.verifier or t.ends_episode:
                continue
            w = words(name)
            desc = (t.description or "").lower()
            if ("human" in w and "transfer" in w) or "placeholder" in desc or not params_of(t):
                continue
            if allowed is not None and name not in allowed:
                continue
            out.append(name)
        return out

    def reach(self, name: str, args: dict[str, Any]) -> list[tuple[str, dict[str, Any], str, str]]:
        """The actions that call tool ``name`` with ``args``: ``(tool, arguments, requestor, role)``;
        role is ``unlock``, ``give`` or ``call`` (the call that runs ``name``).
        """
        import json

        t = self.tools[name]
        out: list[tuple[str, dict[str, Any], str, str]] = []
        if t.side == "agent":
            if (t.hidden or t.discoverable) and self.unlock:
                out.append((self.unlock, {_tool_param(self.tools[self.unlock]): name}, "agent", "unlock"))
            if t.hidden and self.call:
                c = self.tools[self.call]
                out.append((self.call, {_tool_param(c): name, _args_param(c): json.dumps(args)}, "agent", "call"))
            else:
                out.append((name, dict(args), "agent", "call"))
            return out
        if t.hidden and self.give and self.user_call:
            g, u = self.tools[self.give], self.tools[self.user_call]
            give_args = {_tool_param(g): name}
            if _args_param(g):
                give_args[_args_param(g)] = json.dumps(args)
            out.append((self.give, give_args, "agent", "give"))
            out.append((self.user_call, {_tool_param(u): name, _args_param(u): json.dumps(args)}, "user", "call"))
            return out
        if t.handover and self.give:
            out.append((self.give, {_tool_param(self.tools[self.give]): name}, "agent", "give"))
        out.append((name, dict(args), "user", "call"))
        return out


# --- literal values named in descriptions and error texts ---------------------------------------------
_QUOTED = re.compile(r"""(?<![A-Za-z0-9])['"`]([^'"`\n]{1,48})['"`](?![A-Za-z0-9])""")
_CAPS = re.compile(r"(?<![\w-])[A-Z][A-Z_]{2,}(?![\w-])")
_SNAKE = re.compile(r"\b[a-z]+(?:_[a-z0-9]+)+\b")
_TOKEN = re.compile(r"^[A-Za-z][\w-]*$")
#: Capitalised words that are prose, not values.
_PROSE = frozenset(
    {"NOT", "ONLY", "MUST", "AND", "THE", "FOR", "ALL", "ANY", "USD", "APY", "ATM", "PIN", "CVV", "EST", "YYYY", "YY"}
)


def literals(text: str) -> list[str]:
    """Values a text names: quoted strings first, then ALL-CAPS and snake_case words and a list after a colon."""
    text = text or ""
    out: dict[str, None] = {}
    for m in _QUOTED.finditer(text):
        out.setdefault(m.group(1).strip(), None)
    for m in _CAPS.finditer(text):
        if m.group(0) not in _PROSE:
            out.setdefault(m.group(0), None)
    for m in _SNAKE.finditer(text):
        out.setdefault(m.group(0), None)
    if ":" in text:
        tail = text.rsplit(":", 1)[1]
        items = [x.strip(" .()[]'\"") for x in re.split(r",|\bor\b", tail)]
        if len(items) >= 2 and all(_TOKEN.match(x) for x in items if x):
            for x in items:
                if x:
                    out.setdefault(x, None)
    return [x for x in out if x]


# --- candidates ---------------------------------------------------------------------------------------
@dataclass
class Cand:
    """One candidate value of an argument and where it comes from (a derivation without indices)."""

    value: Any
    source: str  # db | literal | enum | fact | output
    where: dict[str, Any] = field(default_factory=dict)


def table_score(view: DBView, param: str, table: str, context_words: set[str]) -> float:
    """How well an id-like parameter names ``table`` (0: not at all)."""
    idc = view.id_column.get(table)
    if idc is None or not view.tables.get(table):
        return 0.0
    pw = words(param) - {"id"}
    tw = {w.rstrip("s") for w in words(table)} | {w.rstrip("s") for w in words(idc) - {"id"}}
    pws = {w.rstrip("s") for w in pw}
    score = float(len(pws & tw))
    if param == idc:
        score += 2
    if score == 0:
        return 0.0
    score += 0.25 * len({w.rstrip("s") for w in context_words} & tw)
    score -= 0.3 * len(tw - pws - {w.rstrip("s") for w in context_words})
    return score


def id_tables(view: DBView, param: str, context_words: set[str]) -> list[str]:
    """Tables an id-like parameter may name, best first."""
    if "id" not in words(param) and not any(param == c for c in view.id_column.values() if c):
        return []
    scored = [(table_score(view, param, t, context_words), t) for t in view.tables]
    scored = [(s, t) for s, t in scored if s > 0]
    return [t for _, t in sorted(scored, key=lambda x: -x[0])]


def _format_like(value: Any, desc: str) -> list[Any]:
    """``value`` reshaped to a format the description names (MM/YY from MM/DD/YYYY), then as is."""
    out = []
    if isinstance(value, str):
        m = re.fullmatch(r"(\d{2})/(\d{2})/(\d{4})", value)
        if m and "MM/YY" in desc and "MM/YYYY" not in desc:
            out.append(f"{m.group(1)}/{m.group(3)[2:]}")
    out.append(value)
    return out


def _fits(value: Any, spec: dict[str, Any]) -> bool:
    typ = spec.get("type", "string")
    if typ == "boolean":
        return isinstance(value, bool)
    if typ in ("number", "integer"):
        if isinstance(value, bool):
            return False
        if isinstance(value, (int, float)):
            return True
        return isinstance(value, str) and bool(re.fullmatch(r"-?\$?[\d,]+(\.\d+)?", value.strip()))
    return isinstance(value, str)


def column_matches(param: str, row: dict[str, Any], spec: dict[str, Any] | None = None) -> list[str]:
    """Columns of ``row`` that a parameter names, best first: the same name, the same identity
    (``full_name`` / ``name``), or at least half the parameter's words; with a value of its type.
    """
    pw = {w.rstrip("s") for w in words(param)}
    kind = identity_kind(param)
    scored = []
    for col in row:
        if spec is not None and not _fits(row[col], spec):
            continue
        if col == param:
            scored.append((10.0, col))
            continue
        ckind = identity_kind(col)
        if kind:
            if kind == ckind:
                scored.append((5.0, col))
            continue
        if ckind and not (words(param) & {"last4", "last"}):  # card_name is no person's name
            continue
        cw = {w.rstrip("s") for w in words(col)}
        ov = len(pw & cw - {"id"})
        if ov and ov * 2 >= len(pw):
            scored.append((ov - 0.01 * len(cw - pw), col))
    return [c for _, c in sorted(scored, key=lambda x: -x[0])]


def derived_value(param: str, value: Any) -> Any:
    """A column's value as a parameter wants it (the last four digits, an absolute amount)."""
    w = words(param)
    if isinstance(value, str) and ("last4" in w or {"last", "4"} <= w):
        digits = re.sub(r"\D", "", value)
        return digits[-4:] if len(digits) >= 4 else value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and w & {"amount", "disputed"} and value < 0:
        return -value
    return value


def default_candidates(param: str, spec: dict[str, Any], desc: str, rng: random.Random, now: datetime) -> list[Cand]:
    """Values of a parameter the user chooses (no record names it): by type, format and wording."""
    typ = spec.get("type", "string")
    w = words(param)
    if typ == "boolean":
        vals = [False, True]
        rng.shuffle(vals)
        return [Cand(v, "fact") for v in vals]
    if typ in ("number", "integer"):
        if w & {"income", "salary"}:
            base = [42000, 58000, 76000, 98000, 125000]
        elif w & {"fee"}:
            base = [0, 5, 10, 25]
        elif w & {"limit"}:
            base = [1000, 2500, 5000, 7500, 10000]
        elif w & {"apy", "rate", "percent"}:
            base = [2.5, 3.0, 4.0]
        else:
            base = [25, 50, 75, 100, 150, 200, 10]
        head = base[:1] if w & {"fee"} else []
        rest = base[len(head) :]
        rng.shuffle(rest)
        vals = head + rest
        return [Cand(float(v) if typ == "number" else int(v), "fact") for v in vals]
    low = desc.lower()
    if "pin" in w or "4-digit" in low:
        pins = []
        while len(pins) < 3:
            p = f"{rng.randint(0, 9999):04d}"
            if p not in _BAD_PINS and len(set(p)) > 1:
                pins.append(p)
        return [Cand(p, "fact") for p in pins]
    if "date" in w or "mm/dd/yyyy" in low:
        future = bool(w & {"expiration", "expiry", "end", "until"})
        days = [30, 90, 180] if future else [3, 7, 14]
        fmt = "%Y-%m-%d" if "yyyy-mm-dd" in low else "%m/%d/%Y"
        return [Cand((now + timedelta(days=d if future else -d)).strftime(fmt), "fact") for d in days]
    return [Cand("customer request", "fact")]
