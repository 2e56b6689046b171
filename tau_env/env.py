"""TauEnv: the two-player conversation game as a PettingZoo AEC environment."""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from tau_env.db import EpisodeDB
from tau_env.domain import Domain
from tau_env.error import EpisodeOverError
from tau_env.grading import Grade
from tau_env.messages import OUT_OF_SCOPE, TRANSFER, is_end_message, normalize_action, parse_tool_calls
from tau_env.spaces import MessageSpace, observation_space
from tau_env.tasks import Task
from tau_env.tools import ToolResult

AGENT = "agent"
USER = "user"
SEATS = (AGENT, USER)
_OTHER = {AGENT: USER, USER: AGENT}


@dataclass(frozen=True)
class EpisodeSnapshot:
    """A frozen copy of a live episode; ``TauEnv.restore`` resumes from it (any number of times)."""

    image: bytes
    state: dict[str, Any]


class TauEnv(AECEnv):
    """A conversation between an agent and a user over one task's database.

    Two seats, ``"agent"`` and ``"user"``, take turns. An action is an OpenAI-style assistant
    message: text (delivered to the other seat, whose turn it becomes) or tool calls (run
    against the database; the results go back to the caller, who keeps the turn). Text that
    comes with tool calls stays in the caller's own chat, as a model's remarks to itself.

    Observation of a seat (a ``dict``, see :func:`tau_env.spaces.observation_space`):
        ``messages``: the seat's own chat, ready for a chat template: a system message, its own
        turns as ``assistant``, the other seat's text as ``user``, its tool results as ``tool``.
        The user never sees the agent's tool calls and vice versa.
        ``tools``: the seat's active tool schemas (OpenAI function format); grows when the agent
        unlocks or hands over tools.
        ``scenario`` (user only): the structured scenario of the task.
        The message dicts are the env's own: read them, copy before changing them.

    Rewards: 0 until the end; then both seats get 1.0 iff the final database equals the task's
    target (its reference actions replayed on the initial state). A truncated episode gets 0.
    ``infos[seat]["grade"]`` explains a failure table by table.

    Episodes end when the user's message contains ``###STOP###`` (or ``###TRANSFER###`` /
    ``###OUT-OF-SCOPE###``) or the agent's transfer tool succeeds (terminated), or after
    ``max_steps`` calls of ``step`` (truncated).

    Args:
        domain: The domain to play.
        max_steps: Step budget of an episode (both seats' steps count).
        retrieval: Knowledge-tool configuration; the domain's default if None.
        task_ids: Restrict the tasks ``reset`` may pick without ``options``.
        strict_tools: Re-raise exceptions from buggy domain tools instead of reporting them to the model.
        render_mode: ``"ansi"`` (``render()`` returns the transcript) or ``"human"`` (prints it).
    """

    metadata = {"name": "tau_env_v0", "render_modes": ["human", "ansi"], "is_parallelizable": False}

    def __init__(
        self,
        domain: Domain,
        *,
        max_steps: int | None = None,
        retrieval: str | None = None,
        task_ids: list[str] | None = None,
        strict_tools: bool = False,
        render_mode: str | None = None,
    ):
        super().__init__()
        self.domain = domain
        self.max_steps = int(max_steps if max_steps is not None else domain.max_steps)
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {self.max_steps}.")
        self.retrieval = retrieval or domain.retrieval
        self.toolbox = domain.toolbox(self.retrieval)
        self.system_prompt = domain.system_prompt(self.retrieval)
        self._prompt_is_static = not getattr(domain, "prompt_depends_on_task", False)
        self.task_pool = [domain.task(t).id for t in task_ids] if task_ids else [t.id for t in domain.tasks]
        if not self.task_pool:
            raise ValueError(f"Domain {domain.name!r} has no tasks to play.")
        self.strict_tools = strict_tools
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}.")
        self.render_mode = render_mode
        self.possible_agents = list(SEATS)
        self.observation_spaces = {s: observation_space(s) for s in SEATS}
        self.action_spaces = {s: MessageSpace() for s in SEATS}
        self._rng = np.random.default_rng(0)
        self._db = EpisodeDB(domain.schema)
        self._schema_cache: dict[frozenset[str], list[dict[str, Any]]] = {}
        self._closed = False
        self._started = False

    # --- PettingZoo API ----------------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode.

        Args:
            seed: Seeds the task choice (without ``options``) and the action spaces' sampling.
            options: ``{"task_id": str}`` or ``{"task_index": int}`` selects a task; otherwise
                one is drawn from the task pool with the seeded generator (seed 0 by default).
        """
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            for i, s in enumerate(SEATS):
                self.action_spaces[s].seed(seed + i)
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        task_index = options.pop("task_index", None)
        if options:
            warnings.warn(
                f"TauEnv.reset ignores unknown options {sorted(options)}; known: task_id, task_index.", stacklevel=2
            )
        if task_id is not None:
            task = self.domain.task(task_id)
        elif task_index is not None:
            task = self.domain.tasks[int(task_index)]
        else:
            task = self.domain.task(self.task_pool[int(self._rng.integers(len(self.task_pool)))])
        self._start(task)

    def _start(self, task: Task) -> None:
        self.task: Task = task
        # s0: roll back to the seed image (microseconds) and apply the task's initial state.
        self._db.start(self.domain.seed_image, self.domain.initializer(task))
        self._ctx = self.domain.context(self._db, task, self.toolbox)
        self._steps = 0
        self._scenario = task.scenario.model_dump()
        from tau_env.users import user_system_prompt

        # Each seat's chat, from its own point of view.
        self._views: dict[str, list[dict[str, Any]]] = {
            AGENT: [{"role": "system", "content": self._prompt_for(task)}],
            USER: [{"role": "system", "content": user_system_prompt(self.domain, task.scenario)}],
        }
        if self.domain.greeting:
            self._views[AGENT].append({"role": "assistant", "content": self.domain.greeting})
            self._views[USER].append({"role": "user", "content": self.domain.greeting})
        self.trajectory: list[dict[str, Any]] = []
        self.termination_reason: str | None = None
        self.grade_result: Grade | None = None
        self.episode_reward = 0.0
        # PettingZoo state: both seats live, no reward yet, the user speaks first.
        self.agents = list(SEATS)
        self.rewards = {s: 0.0 for s in SEATS}
        self._cumulative_rewards = {s: 0.0 for s in SEATS}
        self.terminations = {s: False for s in SEATS}
        self.truncations = {s: False for s in SEATS}
        self.infos = {s: {"task_id": task.id} for s in SEATS}
        self.agent_selection = USER
        self._started = True

    def _prompt_for(self, task: Task) -> str:
        # A domain may build the agent's prompt per task (e.g. with the task's documents in it).
        return self.system_prompt if self._prompt_is_static else self.domain.system_prompt(self.retrieval, task)

    def observe(self, agent: str) -> dict[str, Any]:
        active = frozenset(self._ctx.active[agent])
        tools = self._schema_cache.get(active)
        if tools is None:
            tools = self._schema_cache[active] = self.toolbox.schemas(active)
        obs = {"messages": list(self._views[agent]), "tools": list(tools)}
        if agent == USER:
            obs["scenario"] = self._scenario
        return obs

    def step(self, action: Any) -> None:
        """Play ``action`` (an assistant message) for the seat in ``agent_selection``."""
        if not self._started:
            raise EpisodeOverError("Call reset() before step().")
        seat = self.agent_selection
        if self.terminations[seat] or self.truncations[seat]:
            if action is not None:
                raise EpisodeOverError(
                    f"The episode is over for {seat!r}; step(None) to let it leave (as agent_iter expects), "
                    "or reset() for a new episode."
                )
            self._was_dead_step(action)
            return
        msg = normalize_action(action)
        self._steps += 1
        self._clear_rewards()
        calls = parse_tool_calls(msg, id_prefix=f"call_{self._steps}")
        view = self._views[seat]
        view.append(msg)
        event: dict[str, Any] = {"step": self._steps, "seat": seat, "message": msg}
        ended: str | None = None
        if calls:
            results = []
            for c in calls:
                if c.error is not None:
                    res = ToolResult(c.name, f"Error: {c.error}", error=True)
                else:
                    res = self.toolbox.call(self._ctx, seat, c.name, c.arguments, strict=self.strict_tools)
                view.append({"role": "tool", "tool_call_id": c.id, "name": c.name, "content": res.content})
                results.append({"tool_call_id": c.id, "name": c.name, "content": res.content, "error": res.error})
                if res.ends_episode and ended is None:
                    ended = "transfer"
            event["tool_results"] = results
            next_seat = seat  # the caller reads its results and keeps the turn
        else:
            self._views[_OTHER[seat]].append({"role": "user", "content": msg.get("content") or ""})
            next_seat = _OTHER[seat]
            if seat == USER:
                marker = is_end_message(msg.get("content"))
                if marker is not None:
                    ended = {TRANSFER: "transfer", OUT_OF_SCOPE: "out_of_scope"}.get(marker, "user_stop")
        self.trajectory.append(event)
        if ended is not None:
            self._finish(ended, truncated=False)
        elif self._steps >= self.max_steps:
            self._finish("max_steps", truncated=True)
        else:
            self.agent_selection = next_seat
        self._accumulate_rewards()

    def end_episode(self, reason: str) -> None:
        """End the live episode from outside (e.g. a harness that detected a loop): truncated, reward 0."""
        if not self._started:
            raise EpisodeOverError("Call reset() before end_episode().")
        if self.termination_reason is None:
            self._finish(reason, truncated=True)
            self._accumulate_rewards()

    def _finish(self, reason: str, truncated: bool) -> None:
        grade = self.domain.grader.grade(self._db, self.task)
        reward = 0.0 if truncated else grade.reward  # a conversation cut off is not a success
        self.termination_reason = reason
        self.grade_result = grade
        self.episode_reward = reward
        for s in SEATS:
            self.rewards[s] = reward
            if truncated:
                self.truncations[s] = True
            else:
                self.terminations[s] = True
            self.infos[s] = {
                "task_id": self.task.id,
                "termination_reason": reason,
                "reward": reward,
                "grade": grade.to_dict(),
                "steps": self._steps,
            }

    # --- extras ------------------------------------------------------------------------
    @property
    def num_steps(self) -> int:
        return self._steps

    def grade(self, explain: bool = True) -> Grade:
        """Grade the current state now (without ending the episode)."""
        if not self._started:
            raise EpisodeOverError("Call reset() before grade().")
        return self.domain.grader.grade(self._db, self.task, explain=explain)

    def db_digest(self) -> str:
        """Canonical digest of the episode's database."""
        return self._db.digest()

    @property
    def db(self) -> EpisodeDB:
        """The episode's database (read it; write only through tools)."""
        return self._db

    def snapshot(self) -> EpisodeSnapshot:
        """Freeze the live episode (database, conversation, active tools, turn) for ``restore``."""
        if not self._started:
            raise EpisodeOverError("Call reset() before snapshot().")
        active, tool_state = self._ctx.copy_state()
        state = copy.deepcopy(
            {
                "task_id": self.task.id,
                "steps": self._steps,
                "views": self._views,
                "trajectory": self.trajectory,
                "agents": self.agents,
                "rewards": self.rewards,
                "cum": self._cumulative_rewards,
                "terminations": self.terminations,
                "truncations": self.truncations,
                "infos": self.infos,
                "selection": self.agent_selection,
                "reason": self.termination_reason,
                "grade": self.grade_result,
                "reward": self.episode_reward,
            }
        )
        state["active"], state["tool_state"] = active, tool_state
        return EpisodeSnapshot(self._db.snapshot(), state)

    def restore(self, snap: EpisodeSnapshot) -> None:
        """Resume from ``snap`` (taken on an env of the same domain); the snapshot stays reusable."""
        s = copy.deepcopy(snap.state)
        self._start(self.domain.task(s["task_id"]))
        self._db.restore(snap.image)
        self._ctx.conn = self._db.conn  # restore opens a new connection
        self._ctx.active, self._ctx.state = s["active"], s["tool_state"]
        self._steps, self._views, self.trajectory = s["steps"], s["views"], s["trajectory"]
        self.agents, self.rewards, self._cumulative_rewards = s["agents"], s["rewards"], s["cum"]
        self.terminations, self.truncations, self.infos = s["terminations"], s["truncations"], s["infos"]
        self.agent_selection, self.termination_reason, self.grade_result = s["selection"], s["reason"], s["grade"]
        self.episode_reward = s["reward"]

    def fork(self) -> TauEnv:
        """A new env of the same domain and settings, continuing from this episode's current state."""
        other = TauEnv(
            self.domain,
            max_steps=self.max_steps,
            retrieval=self.retrieval,
            task_ids=self.task_pool,
            strict_tools=self.strict_tools,
            render_mode=self.render_mode,
        )
        other.restore(self.snapshot())
        return other

    def transcript(self) -> str:
        """The conversation so far as readable text (both seats, tool calls and results)."""
        from tau_env.show import format_events

        return format_events(self.trajectory)

    def render(self) -> str | None:
        if self.render_mode is None:
            warnings.warn("render() called without a render_mode; pass render_mode='ansi' or 'human'.", stacklevel=2)
            return None
        text = self.transcript()
        if self.render_mode == "ansi":
            return text
        print(text)  # render_mode="human" asks for printing
        return None

    def close(self) -> None:
        if not self._closed:
            self._db.close()
            self._closed = True

    def __enter__(self) -> TauEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TauEnv(domain={self.domain.name!r}, retrieval={self.retrieval!r}, max_steps={self.max_steps})"
