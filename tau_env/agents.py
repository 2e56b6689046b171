"""Policies for the agent seat: an oracle that performs the reference actions, a teacher that
performs them after asking the customer for what it needs, a random fuzzer and a do-nothing
baseline. Each is a :class:`~tau_env.policy.Policy`: a callable ``obs -> action`` with
``reset(task, seed)``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from tau_env.error import InvalidOptionError
from tau_env.knowledge.tools import grep_documents, search_documents, search_documents_dense, search_documents_hybrid
from tau_env.messages import Message, assistant_message, say, tool_call
from tau_env.policy import Observation, Policy
from tau_env.tasks import Task


class OracleAgent(Policy):
    """Performs the task's reference actions A* in order, one tool call per step.

    When the next reference action is the user's, it asks the user to perform it (naming the
    tool and its arguments) and waits for the user's reply. When A* is exhausted it reports
    completion. With the scripted user it reaches reward 1.0 on every valid task.
    """

    done_text = "Everything you asked for is done. Is there anything else I can help with?"

    def __init__(self) -> None:
        self.reset(None)

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self._actions = list(task.actions) if task is not None else []
        self._i = 0
        self._asked = False
        self._n = 0
        self._done_early: set[int] = set()  # indices of actions already performed out of order

    def performed(self, name: Any, arguments: Any) -> bool:
        """Count the first remaining agent reference action that is this call (the same name and
        arguments) as done by someone else, so it is not played again; whether there was one.
        """
        for i in range(self._i, len(self._actions)):
            a = self._actions[i]
            if i not in self._done_early and a.requestor == "agent" and a.name == name and a.arguments == arguments:
                self._done_early.add(i)
                return True
        return False

    def __call__(self, obs: Observation) -> Message:
        self._n += 1
        while self._i < len(self._actions):
            a = self._actions[self._i]
            if self._i in self._done_early:
                self._i += 1
                continue
            if a.requestor == "agent":
                self._i += 1
                return assistant_message(None, [tool_call(a.name, a.arguments, id=f"oracle_{self._n}")])
            if not self._asked:
                self._asked = True
                return say(
                    f"Step {self._i + 1}: please use {a.name} in your app now with these details: "
                    f"{json.dumps(a.arguments, ensure_ascii=False)}. Tell me when it is done."
                )
            self._asked = False  # the user has replied: its action is done
            self._i += 1
        return say(self.done_text)


def _values(value: Any) -> list[str]:
    """The scalar values inside a tool argument, as text (nested lists and dicts flattened)."""
    if isinstance(value, dict):
        return [v for x in value.values() for v in _values(x)]
    if isinstance(value, list):
        return [v for x in value for v in _values(x)]
    if value is None or isinstance(value, bool):
        return []
    return [str(value)]


def _shown(value: str, text: str) -> bool:
    """Whether ``value`` appears in ``text`` as a whole token (not inside a longer word or number)."""
    return re.search(rf"(?<![0-9A-Za-z]){re.escape(value)}(?![0-9A-Za-z])", text) is not None


_MONTHS = ("january february march april may june july august september october november december").split()
_MONTH = r"(" + "|".join(m[:3] + rf"(?:{m[3:]})?" if len(m) > 3 else m for m in _MONTHS) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(\d{4}))?(?!\d)"
_SPOKEN_DATES = (
    (re.compile(rf"(?<![0-9A-Za-z]){_MONTH}\s+{_DAY}(?![0-9]){_YEAR}", re.I), 0, 1, 2),  # June 20th, 2025
    (re.compile(rf"(?<![0-9A-Za-z]){_DAY}\s+(?:of\s+)?{_MONTH}(?![A-Za-z]){_YEAR}", re.I), 1, 0, 2),  # 20 June
)


def _spoken_dates(text: str) -> set[tuple[int, int, int | None]]:
    """The (month, day, year or None) of each date ``text`` spells out in words (``June 20th``,
    ``20 June 2025``, ``the 5th of July``, ``Jul. 5``).
    """
    found: set[tuple[int, int, int | None]] = set()
    for rx, mi, di, yi in _SPOKEN_DATES:
        for m in rx.finditer(text):
            month = next(i for i, name in enumerate(_MONTHS, 1) if name.startswith(m.group(mi + 1).lower()[:3]))
            year = m.group(yi + 1)
            found.add((month, int(m.group(di + 1)), int(year) if year else None))
    return found


_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


def _said(value: str, text: str, this_year: int | None) -> bool:
    """``_shown``, or ``value`` an ISO date (``2025-06-20``) that ``text`` says in words: with its
    year, or without one (``June 20th``) when its year is ``this_year`` (a customer who leaves the
    year out means this year's date, never a date of birth's).
    """
    if _shown(value, text):
        return True
    m = _ISO_DATE.fullmatch(value.strip())
    if m is None:
        return False
    y, mo, d = (int(g) for g in m.groups())
    return any(
        (mo, d) == (month, day) and (year == y or year is None and y == this_year)
        for month, day, year in _spoken_dates(text)
    )


def _said_without_year(value: str, text: str, this_year: int | None) -> bool:
    """``value`` an ISO date that ``text`` says only without its year (``June 20th`` for
    ``2025-06-20`` in a ``2025`` task): the year comes from the bank's clock, not the customer.
    """
    return _said(value, text, this_year) and not _said(value, text, None)


def _this_year(task: Task) -> int | None:
    """The year the task happens in: its clock's, else the latest year its reference actions name."""
    if task.clock:
        return int(task.clock[:4])
    years = [int(m.group(1)) for a in task.actions for v in _values(a.arguments) for m in _ISO_DATE.finditer(v)]
    return max(years, default=None)


def _tool_names(action: Any) -> list[str]:
    """The tool names an action makes the agent say: those it passes (an argument whose key ends
    in ``tool_name``, as ``unlock_tool`` and ``hand_over_tool`` take) and, for a user's action, the
    app tool the agent asks the user to use.
    """
    names = [] if action.requestor == "agent" else [action.name]
    for key, value in action.arguments.items():
        if str(key).endswith("tool_name") and isinstance(value, str) and value.strip():
            names.append(value)
    return names


class TeacherAgent(OracleAgent):
    """The oracle's reference actions, played as a careful agent would: it never uses a customer
    fact the conversation has not shown.

    Before each reference action, every one of the scenario's facts (the customer's name, date of
    birth, phone digits, ...) that the action's arguments hold (as a whole value, or inside a text
    such as a hand-off summary) and that has not appeared yet in the conversation (the user's
    messages, tool results) is first asked for, by the fact's name, in one message; the scripted
    user answers such questions; a date the customer said in words (``20 June 2025``, or ``June
    20th`` for a date in the task's year) counts as shown for its ISO value, as a careful agent
    would not ask for it again (with another year said, it is asked for); before it writes a date
    said without its year, it calls ``get_current_time`` (once, when offered), so the year it
    writes comes from the bank's clock, shown in the conversation. A fact is asked for once,
    answered or not. Values found in tool results (ids from ``find_customer``, a card from
    ``list_cards``) are used as they are. Its episodes are SFT data without privileged
    information: the :class:`OracleAgent` reads the customer's identity from the task, a trained
    model that imitated it would invent one.

    Tool names are knowledge too: the names of specialised tools are written in the policy
    documents. When the configuration gives a knowledge tool (``grep_documents``, else a
    ``search_documents*`` tool) and an action names a tool (an argument whose key ends in
    ``tool_name``, as ``unlock_tool`` and ``hand_over_tool`` take, or the app tool of a user's
    action, which the agent asks the user to use) that no tool result has shown,
    it looks the name up, once, by the words of the name without its number
    (``set_travel_notice`` for ``set_travel_notice_3012``): a grep for them, or a search with them
    as the query. Without a knowledge tool (retrieval ``none``) the names come from nowhere in the
    conversation, as they do for the oracle.

    When it looks them up is ``lookup``:

    - ``"early"`` (the default): at its first turns, right after the customer's opening request,
      before it asks for anything, it looks up every name its actions will use, and unlocks each
      specialised tool right after its lookup ("find the name, call unlock_tool with it"; an
      unlock changes no data, so the final database is the oracle's). The choice of procedure is
      then made where the request is the latest message, and the unlock copies the name just
      found: what a small model imitating it can learn (decided eight turns later, after the
      identity check, a 135M model learnt the names' distribution, not which request needs which).
    - ``"before_use"``: just before the first action that names the tool.

    With several requests it looks up every name at the start too, as the oracle's order already
    performs every action before the later requests are said: train on single-request tasks when
    that matters.

    With the scripted user it reaches the oracle's reward on every task whose facts are named so
    the user reveals them (the scripted user's rule); it spends one more step per question or lookup.
    """

    #: The tool that tells it today's date (the year of a date said without one).
    CLOCK_TOOL = "get_current_time"

    #: The knowledge tools it looks names up with, by preference (grep takes a pattern, the others a query).
    LOOKUP_TOOLS = tuple(
        t.name for t in (grep_documents, search_documents, search_documents_hybrid, search_documents_dense)
    )

    LOOKUP_MODES = ("early", "before_use")

    def __init__(self, lookup: str = "early") -> None:
        if lookup not in self.LOOKUP_MODES:
            raise InvalidOptionError(f"TeacherAgent(lookup={lookup!r}): expected one of {list(self.LOOKUP_MODES)}.")
        self.lookup = lookup
        super().__init__()

    def describe(self) -> dict[str, Any]:
        return {"agent": f"{type(self).__module__}.{type(self).__qualname__}", "lookup": self.lookup}

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        super().reset(task, seed)
        self._facts = {str(k): str(v) for k, v in (task.scenario.facts or {}).items()} if task is not None else {}
        self._year = _this_year(task) if task is not None else None
        self._requested: set[str] = set()
        self._looked_up: set[str] = set()

    def _next(self) -> Any:
        """The reference action the oracle performs or asks for now (after a user's action it has
        asked for, the user's reply completes that one), or None when none is left.
        """
        i = self._i + (1 if self._asked else 0)
        while i in self._done_early:
            i += 1
        return self._actions[i] if i < len(self._actions) else None

    def _early_unlock(self, obs: Observation) -> int | None:
        """Index of a reference ``unlock_tool`` call whose name a tool result already shows and that
        the early phase performs now (right after its lookup), or None.
        """
        seen = "\n".join(str(m.get("content") or "") for m in obs.get("messages") or [] if m.get("role") == "tool")
        for i, a in enumerate(self._actions):
            if i in self._done_early or i < self._i or a.requestor != "agent" or a.name != "unlock_tool":
                continue
            name = a.arguments.get("tool_name")
            if isinstance(name, str) and name in self._looked_up and _shown(name, seen):
                return i
        return None

    def _to_look_up(self, obs: Observation) -> tuple[str, str] | None:
        """(knowledge tool, tool name) for the first tool name to look up now, if any: the next
        action's (``before_use``), or, until the teacher has done anything else, any remaining
        agent action's (``early``).
        """
        action = self._next()
        if action is None:
            return None
        if self._early():
            pending = self._actions
        else:
            pending = [action]
        names = [n for a in pending for n in _tool_names(a)]
        if not names:
            return None
        active = {(t.get("function") or {}).get("name") for t in obs.get("tools") or []}
        lookup = next((n for n in self.LOOKUP_TOOLS if n in active), None)
        if lookup is None:
            return None
        seen = "\n".join(str(m.get("content") or "") for m in obs.get("messages") or [] if m.get("role") == "tool")
        for name in names:
            if name not in self._looked_up and not _shown(name, seen):
                return lookup, name
        return None

    def _to_ask(self, obs: Observation) -> list[str]:
        action = self._next()
        if action is None:
            return []
        seen = "\n".join(
            str(m.get("content") or "") for m in obs.get("messages") or [] if m.get("role") in ("user", "tool")
        )
        used = _values(action.arguments)
        keys: list[str] = []
        values: set[str] = set()
        for k, v in self._facts.items():  # in the scenario's order; one name per value
            if v in values or not v.strip():
                continue
            values.add(v)
            if k in self._requested or _said(v, seen, self._year):
                continue
            if any(u == v or _shown(v, u) for u in used):  # the whole argument, or inside a text (a summary)
                keys.append(k)
        return keys

    def _to_check_today(self, obs: Observation) -> bool:
        """Whether to ask the bank's clock for today's date now: the next action writes a date the
        customer said without its year, the clock tool is offered, and nobody has called it yet.
        """
        action = self._next()
        if action is None or action.requestor != "agent" or action.name == self.CLOCK_TOOL:
            return False
        active = {(t.get("function") or {}).get("name") for t in obs.get("tools") or []}
        messages = obs.get("messages") or []
        if self.CLOCK_TOOL not in active or any(
            (c.get("function") or {}).get("name") == self.CLOCK_TOOL
            for m in messages
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        ):
            return False
        said = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
        return any(_said_without_year(v, said, self._year) for v in _values(action.arguments))

    def _early(self) -> bool:
        """Still in the early phase: nothing done yet but lookups and the unlocks they allow."""
        return self.lookup == "early" and self._i == 0 and not self._asked and not self._requested

    def __call__(self, obs: Observation) -> Message:
        if self._early():
            i = self._early_unlock(obs)
            if i is not None:  # unlock the name just found, as the documents say: find it, unlock it
                self._n += 1
                self._done_early.add(i)
                a = self._actions[i]
                return assistant_message(None, [tool_call(a.name, a.arguments, id=f"teacher_{self._n}")])
        found = self._to_look_up(obs) if self.lookup == "early" else None
        keys = [] if found is not None else self._to_ask(obs)
        if keys:
            self._n += 1
            self._requested.update(keys)
            names = keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + f" and {keys[-1]}"
            return say(f"Before I go on, could you tell me your {names}?")
        found = found or self._to_look_up(obs)
        if found is not None:
            lookup, name = found
            self._n += 1
            self._looked_up.add(name)
            words = re.sub(r"_\d+$", "", name) or name
            args = (
                {"pattern": re.escape(words)} if lookup == grep_documents.name else {"query": words.replace("_", " ")}
            )
            return assistant_message(None, [tool_call(lookup, args, id=f"teacher_{self._n}")])
        if self._to_check_today(obs):  # "June 20th": which year is today's?
            self._n += 1
            return assistant_message(None, [tool_call(self.CLOCK_TOOL, {}, id=f"teacher_{self._n}")])
        return super().__call__(obs)


class NoopAgent(Policy):
    """Never calls a tool; politely declines. A do-nothing baseline that must score 0 on every task needing a write."""

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        pass

    def __call__(self, obs: Observation) -> Message:
        return say("I'm sorry, I can't help with that today.")


class RandomAgent(Policy):
    """A fuzzer: random text, random calls to active and invented tools, with well-formed,
    ill-typed, missing, extra, huge and hostile arguments. Seeded by ``reset(seed=...)``.
    """

    HOSTILE = [
        "'; DROP TABLE accounts; --",
        "(a+)+$",
        ".*" * 50,
        "\x00",
        "ünïcødé ✓ 名前",
        "%s%s%n",
        "{}",
        "null",
        "1e309",
        "-1",
        "0",
        "9" * 40,
        "\\",
        '"',
        "A" * 10_000,
    ]

    def __init__(self, seed: int = 0, p_text: float = 0.2):
        self.p_text = p_text
        self.reset(None, seed)

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def _value(self, schema: dict[str, Any]) -> Any:
        r = self.rng
        choice = int(r.integers(0, 10))
        if choice == 0:
            return self.HOSTILE[int(r.integers(len(self.HOSTILE)))]
        if choice == 1:
            return [None, True, 3.5, -7, {"x": 1}, [1, 2]][int(r.integers(6))]
        t = schema.get("type")
        if "enum" in schema:
            return schema["enum"][int(r.integers(len(schema["enum"])))]
        if t == "integer":
            return int(r.integers(-10, 10**6))
        if t == "number":
            return float(r.normal(0, 1000))
        if t == "boolean":
            return bool(r.integers(2))
        if t == "array":
            return [self._value(schema.get("items", {})) for _ in range(int(r.integers(0, 3)))]
        return "".join(chr(int(c)) for c in r.integers(32, 0x2FF, size=int(r.integers(0, 20))))

    def __call__(self, obs: Observation) -> Message:
        r = self.rng
        tools = obs.get("tools") or []
        if r.random() < self.p_text or not tools:
            return say("".join(chr(int(c)) for c in r.integers(32, 127, size=int(r.integers(0, 40)))))
        fn = tools[int(r.integers(len(tools)))]["function"]
        props = fn["parameters"].get("properties", {})
        args = {k: self._value(v) for k, v in props.items() if r.random() < 0.85}
        if r.random() < 0.1:
            args["unexpected_" + str(int(r.integers(100)))] = 1
        name = fn["name"] if r.random() < 0.9 else ["no_such_tool", fn["name"].upper(), ""][int(r.integers(3))]
        raw: Any = json.dumps(args, ensure_ascii=False)
        if r.random() < 0.05:
            raw = raw[: max(0, len(raw) - 3)]  # truncated JSON
        return assistant_message(None, [tool_call(name, raw, id=f"rnd_{int(r.integers(10**9))}")])
