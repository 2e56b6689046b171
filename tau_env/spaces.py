"""Gymnasium spaces for chat messages, tool schemas and scenarios.

These spaces really check: ``contains`` validates structure, so PettingZoo's ``api_test`` catches
an observation that a chat template could not render. The observation space of a seat is a
top-level :class:`gymnasium.spaces.Dict` of them (PettingZoo's AEC test only type-checks numpy
observations below a key named ``"observation"``; text lives under other keys).
"""

from __future__ import annotations

import json
import string
from typing import Any

import numpy as np
from gymnasium import spaces

from tau_env.error import InvalidActionError
from tau_env.messages import normalize_action

_ROLES = ("system", "user", "assistant", "tool")
_ALPHABET = string.ascii_letters + string.digits + " .,?!'\"{}[]:_-%$*\\()/"


class _JsonSpace(spaces.Space[Any]):
    """Base of the text-like spaces: no numpy shape, equality by class and arguments."""

    def __init__(self, seed: int | np.random.Generator | None = None):
        self._seed: int | None = None  # a seed given to seed(), its generator not yet built
        super().__init__(shape=None, dtype=None, seed=seed)

    def seed(self, seed: int | None = None) -> int | Any:
        """Seed the sampler as Gymnasium's ``Space.seed`` does; the generator (a tenth of a
        millisecond to build) is built on the first ``sample``, since an env reseeds its action
        spaces on every seeded reset and most runs never sample them.
        """
        if type(seed) is int and seed >= 0:
            self._seed, self._np_random = seed, None
            return seed
        self._seed = None
        return super().seed(seed)

    @property
    def np_random(self) -> np.random.Generator:
        if self._np_random is None and self._seed is not None:
            super().seed(self._seed)
            self._seed = None
        return super().np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self._seed, self._np_random = None, value

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and vars(other).keys() == vars(self).keys()
            and all(getattr(other, k) == getattr(self, k) for k in self._eq_fields())
        )

    def _eq_fields(self) -> tuple[str, ...]:
        return ()

    def __hash__(self) -> int:
        return hash(type(self))

    def _text(self, max_len: int = 40) -> str:
        n = int(self.np_random.integers(0, max_len + 1))
        idx = self.np_random.integers(0, len(_ALPHABET), size=n)
        return "".join(_ALPHABET[i] for i in idx)


class MessageSpace(_JsonSpace):
    """Assistant messages in OpenAI format: the action space of both seats.

    ``sample()`` draws text messages and tool calls (to names from ``tool_names`` when given,
    plus invented ones, with random and sometimes malformed JSON arguments), which is what a
    fuzzing policy needs.
    """

    def __init__(self, tool_names: tuple[str, ...] = (), seed: int | np.random.Generator | None = None):
        super().__init__(seed=seed)
        self.tool_names = tuple(tool_names)

    def _eq_fields(self) -> tuple[str, ...]:
        return ("tool_names",)

    def contains(self, x: Any) -> bool:
        if not isinstance(x, dict):
            return False
        try:
            msg = normalize_action(x)
        except InvalidActionError:
            return False
        for tc in msg.get("tool_calls") or []:
            fn = tc.get("function")
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                return False
            if not isinstance(fn.get("arguments", ""), (str, dict)):
                return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        rng = self.np_random
        if rng.random() < 0.5:
            return {"role": "assistant", "content": self._text()}
        names = list(self.tool_names) + ["no_such_tool", "", "drop table"]
        name = names[int(rng.integers(0, len(names)))]
        kind = int(rng.integers(0, 4))
        if kind == 0:
            args = "{"  # malformed JSON
        elif kind == 1:
            args = json.dumps([1, 2])
        else:
            args = json.dumps({self._text(8) or "x": self._text(12) for _ in range(int(rng.integers(0, 3)))})
        call = {
            "id": f"call_{int(rng.integers(0, 10**6))}",
            "type": "function",
            "function": {"name": name, "arguments": args},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    def __repr__(self) -> str:
        return "MessageSpace()"


def _valid_chat_message(m: Any) -> bool:
    if not isinstance(m, dict) or m.get("role") not in _ROLES:
        return False
    content = m.get("content")
    if content is not None and not isinstance(content, str):
        return False
    if m["role"] == "tool":
        return isinstance(m.get("tool_call_id"), str) and isinstance(content, str)
    if m["role"] == "assistant":
        calls = m.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                return False
            for tc in calls:
                fn = tc.get("function") if isinstance(tc, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    return False
                if not isinstance(fn.get("arguments"), str) or not isinstance(tc.get("id"), str):
                    return False
        return True
    return isinstance(content, str)


class MessagesSpace(_JsonSpace):
    """A conversation: a list of system/user/assistant/tool messages ready for a chat template."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(_valid_chat_message(m) for m in x)

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        n = int(self.np_random.integers(0, 4))
        roles = ("user", "assistant")
        return [{"role": roles[i % 2], "content": self._text()} for i in range(n)]

    def __repr__(self) -> str:
        return "MessagesSpace()"


def _valid_tool_schema(t: Any) -> bool:
    if not isinstance(t, dict) or t.get("type") != "function":
        return False
    fn = t.get("function")
    if (
        not isinstance(fn, dict)
        or not isinstance(fn.get("name"), str)
        or not isinstance(fn.get("description", ""), str)
    ):
        return False
    params = fn.get("parameters")
    return (
        isinstance(params, dict) and params.get("type") == "object" and isinstance(params.get("properties", {}), dict)
    )


class ToolSchemasSpace(_JsonSpace):
    """The active tools of a seat, as OpenAI function schemas."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(_valid_tool_schema(t) for t in x)

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": self._text(10) or "t",
                    "description": self._text(),
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ]

    def __repr__(self) -> str:
        return "ToolSchemasSpace()"


class ScenarioSpace(_JsonSpace):
    """The user's structured scenario: a JSON object with at least ``requests`` (a list of strings)."""

    def contains(self, x: Any) -> bool:
        if not isinstance(x, dict) or not isinstance(x.get("requests"), list):
            return False
        if not all(isinstance(r, str) for r in x["requests"]):
            return False
        try:
            json.dumps(x)
        except (TypeError, ValueError):
            return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        return {"requests": [self._text()], "facts": {}, "persona": "", "instructions": ""}

    def __repr__(self) -> str:
        return "ScenarioSpace()"


def observation_space(seat: str) -> spaces.Dict:
    """The observation space of ``seat`` ("agent" or "user")."""
    parts: dict[str, spaces.Space[Any]] = {"messages": MessagesSpace(), "tools": ToolSchemasSpace()}
    if seat == "user":
        parts["scenario"] = ScenarioSpace()
    return spaces.Dict(parts)
