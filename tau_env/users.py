"""Policies for the user seat (:class:`~tau_env.policy.Policy`), and the user simulator's system prompt."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tau_env.messages import STOP, Message, assistant_message, say, tool_call
from tau_env.policy import Observation, Policy
from tau_env.tasks import Scenario, Task

if TYPE_CHECKING:
    from tau_env.domain import Domain

#: Version of the user-simulator prompt below; recorded with every evaluation run.
USER_PROMPT_VERSION = "tau_env-user-v1"

_GENERIC_GUIDELINES = """You are playing a customer chatting with a company's support agent. Stay in character.
- Say what you want one request at a time, in the order of your scenario.
- Share a personal detail only when the agent asks for it; never invent details you were not given.
- When all your requests are handled or clearly refused, end with a short thanks followed by ###STOP###.
  If you are transferred to a human, reply ###TRANSFER###. If the scenario leaves you no way to answer,
  reply ###OUT-OF-SCOPE###."""


def render_scenario(s: Scenario) -> str:
    """The scenario as text for an LLM user simulator."""
    parts = []
    if s.persona:
        parts.append(f"Who you are: {s.persona}")
    parts.append("What you want, in order:\n" + "\n".join(f"{i}. {r}" for i, r in enumerate(s.requests, 1)))
    if s.facts:
        parts.append("What you know (share only when asked):\n" + "\n".join(f"- {k}: {v}" for k, v in s.facts.items()))
    if s.unknown:
        parts.append("What you do not know:\n" + "\n".join(f"- {u}" for u in s.unknown))
    if s.instructions:
        parts.append(f"How to act: {s.instructions}")
    return "\n\n".join(parts)


def user_system_prompt(domain: Domain | None, scenario: Scenario) -> str:
    """System prompt of the user seat: the domain's guidelines, then the scenario."""
    guidelines = domain.user_guidelines if domain is not None and domain.user_guidelines else _GENERIC_GUIDELINES
    return f"{guidelines.strip()}\n\n<scenario>\n{render_scenario(scenario)}\n</scenario>"


def _norm(text: str) -> str:
    return " " + re.sub(r"[^a-z0-9]+", " ", text.lower()).strip() + " "


class ScriptedUser(Policy):
    """A rule-based user that follows a task's structured scenario.

    - It opens with the first request, and sends the next one when the agent has answered
      without asking anything.
    - It reveals a fact only when the agent's last message names it (the fact's key, e.g.
      "date of birth"; underscores and case do not matter), and says it doesn't know things
      listed as unknown.
    - It performs its own reference actions (those of the task with requestor "user"), in
      order, when the tool is active for it and the agent's message names the tool.
    - It ends with ``###STOP###`` once every request is sent and the agent has nothing to ask.

    Call ``reset(task)`` before each episode (the harness does).
    """

    def __init__(self, stop_text: str = "Thank you, that's everything."):
        self.stop_text = stop_text
        self.reset(None)

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self.scenario = task.scenario if task is not None else None
        self._actions = [a for a in task.actions if a.requestor == "user"] if task is not None else []
        self._next_request = 0
        self._next_action = 0
        self._n = 0

    def _scenario_from(self, obs: Observation) -> Scenario:
        if self.scenario is None:
            self.scenario = Scenario.model_validate(obs["scenario"])
        return self.scenario

    def __call__(self, obs: Observation) -> Message:
        s = self._scenario_from(obs)
        self._n += 1
        messages = obs["messages"]
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            result = last.get("content", "")
            return say(f"I did that in the app. It says: {result[:300]}")
        if self._next_request == 0:
            self._next_request = 1
            return say(s.requests[0])
        agent_text = (last.get("content") or "") if last.get("role") == "user" else ""
        said = _norm(agent_text)
        active = {t["function"]["name"] for t in obs.get("tools", [])}
        if self._next_action < len(self._actions):
            a = self._actions[self._next_action]
            if a.name in active and (a.name in agent_text or _norm(a.name) in said):
                self._next_action += 1
                return assistant_message(None, [tool_call(a.name, a.arguments, id=f"user_call_{self._n}")])
        asked = [k for k in s.facts if _norm(k) in said]
        unknown = [u for u in s.unknown if _norm(u) in said]
        if asked or unknown:
            parts = [f"My {k} is {s.facts[k]}." for k in asked] + [f"I don't know my {u}." for u in unknown]
            return say(" ".join(parts))
        if self._next_request < len(s.requests):
            text = s.requests[self._next_request]
            self._next_request += 1
            return say(text)
        return say(f"{self.stop_text} {STOP}")
