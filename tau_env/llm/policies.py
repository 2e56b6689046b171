"""LLM policies for either seat, on any client with ``async complete(messages, tools, seed, usage)``.

Both are :class:`~tau_env.policy.AsyncPolicy` (``await policy.aact(obs)``), report their token
``usage`` and ``describe()`` their client for the run record.
"""

from __future__ import annotations

from typing import Any

from tau_env.error import UsageError
from tau_env.llm.client import ChatClient, Usage
from tau_env.llm.parsing import strip_reasoning, to_action
from tau_env.messages import Message
from tau_env.policy import AsyncPolicy, Observation
from tau_env.tasks import Task


class _LLMPolicy(AsyncPolicy):
    usage: Usage  #: tokens and requests of the current episode

    def __init__(self, client: ChatClient, *, parse_text_calls: bool = True, strip_reasoning: bool = False):
        self.client = client
        self.parse_text_calls = parse_text_calls
        self.strip_reasoning = strip_reasoning
        self.usage = Usage()
        self.seed: int | None = None
        self._turn = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> _LLMPolicy:
        # a fresh policy per episode, sharing the client (its connection pool and cache)
        return type(self)(self.client, parse_text_calls=self.parse_text_calls, strip_reasoning=self.strip_reasoning)

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self.usage = Usage()
        self.seed = seed
        self._turn = 0

    def describe(self) -> dict[str, Any]:
        """The policy and its client's configuration, for the run record (no key)."""
        return {"policy": type(self).__name__, "strip_reasoning": self.strip_reasoning, **self.client.describe()}

    def _history(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self.strip_reasoning:
            return messages
        out = []
        for m in messages:
            if m.get("role") == "assistant" and ("reasoning_content" in m or "<think>" in (m.get("content") or "")):
                m = {k: v for k, v in m.items() if k != "reasoning_content"}
                m["content"] = strip_reasoning(m.get("content"))
            out.append(m)
        return out

    async def aact(self, obs: Observation) -> Message:
        self._turn += 1
        reply = await self.client.complete(
            self._history(obs["messages"]), obs.get("tools") or None, self.seed, self.usage
        )
        return to_action(
            reply,
            parse_text_calls=self.parse_text_calls,
            drop_reasoning=self.strip_reasoning,
            call_prefix=f"{type(self).__name__.lower()}_{self._turn}",
        )

    def __call__(self, obs: Observation) -> Any:
        raise UsageError(
            f"{type(self).__name__} is asynchronous: run it with tau_env.aevaluate / arun_episode "
            "(tau_env.evaluate does this for you)."
        )


class LLMAgent(_LLMPolicy):
    """The agent seat played by a model: its observation already holds the domain's policy prompt
    (for the env's retrieval configuration) and its active tools.

    Args:
        client: A :class:`ChatClient` (or any object with the same ``complete``).
        parse_text_calls: Convert hermes-style tool calls printed as text into tool calls.
        strip_reasoning: Drop reasoning (``<think>`` blocks, ``reasoning_content``) from the history
            sent back to the model and from the actions it takes.
    """


class LLMUser(_LLMPolicy):
    """The user seat played by a model (a user simulator).

    Its observation holds the versioned simulator prompt (:data:`tau_env.users.USER_PROMPT_VERSION`)
    built from the task's scenario, with the conversation from the user's side, and its user tools
    (including tools the agent handed over). It ends the chat with ``###STOP###``,
    ``###TRANSFER###`` or ``###OUT-OF-SCOPE###``. Give the client a :class:`ResponseCache` to make
    repeated evaluations reproducible.
    """
