"""TauEnv: the two-player conversation game as a PettingZoo AEC environment."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import pickle
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from tau_env.db import EpisodeDB
from tau_env.domain import Domain
from tau_env.error import (
    ClosedEnvError,
    EpisodeOverError,
    Error,
    InvalidOptionError,
    NotPicklableError,
    ResetNeeded,
    SnapshotError,
    UnknownTaskError,
)
from tau_env.grading import Grade
from tau_env.knowledge.tools import require_extras
from tau_env.messages import (
    OUT_OF_SCOPE,
    TRANSFER,
    Message,
    ParsedCall,
    clip,
    is_end_message,
    normalize_action,
    parse_tool_calls,
)
from tau_env.policy import Observation
from tau_env.spaces import MessageSpace, observation_space
from tau_env.tasks import Task
from tau_env.tools import Toolbox, ToolResult

AGENT = "agent"
USER = "user"
SEATS = (AGENT, USER)
_OTHER = {AGENT: USER, USER: AGENT}
#: Keys snapshots with this process's envs: a snapshot restores only in the process that took it.
_SNAPSHOT_KEY = os.urandom(32)


class TerminationReason(StrEnum):
    """Why an episode ended: ``env.termination_reason``, ``infos[seat]["termination_reason"]`` and
    the ``termination_reason`` of an :class:`~tau_env.EpisodeResult`.

    A ``str`` enum: each member equals (``==``, hashing, ``json.dumps``, ``str()``, f-strings) its
    value, the plain string that results folders store, so records of earlier versions read the
    same. ``env.end_episode(reason)`` also accepts a caller's own reason string, kept as given.
    """

    #: The user's message contained ``###STOP###``: the conversation is over (terminated).
    USER_STOP = "user_stop"
    #: The user's message contained ``###TRANSFER###``, or the agent's transfer tool succeeded (terminated).
    TRANSFER = "transfer"
    #: The user's message contained ``###OUT-OF-SCOPE###`` (terminated).
    OUT_OF_SCOPE = "out_of_scope"
    #: The step budget ``max_steps`` ran out (truncated, reward 0).
    MAX_STEPS = "max_steps"
    #: The harness ended the episode: the agent repeated one action ``loop_limit`` times (truncated, reward 0).
    LOOP = "loop"
    #: The harness gave up on the episode: the model server kept failing (not scored).
    INFRASTRUCTURE_ERROR = "infrastructure_error"


#: The most tool calls one message runs. The calls past it are not run: each gets the error
#: ``Too many tool calls in one message (N; at most 32). ...`` as its result; the step is counted
#: and recorded as usual. It bounds the time one ``step`` takes (each call has its own budget).
MAX_TOOL_CALLS = 32

#: How an end marker in the user's text ends the episode.
_MARKER_ENDINGS = {TRANSFER: TerminationReason.TRANSFER, OUT_OF_SCOPE: TerminationReason.OUT_OF_SCOPE}


class _ResetNeededAttribute(ResetNeeded, AttributeError):
    """An episode attribute read before ``reset()`` (an AttributeError too, so ``hasattr`` still works)."""


class _ClosedAttribute(ClosedEnvError, AttributeError):
    """An episode attribute read on a closed env (``close()`` drops the episode, whatever came before)."""


class _EpisodeAttribute:
    """Class-level stand-in for an attribute that ``reset()`` sets on the instance.

    A non-data descriptor: once the instance has the attribute, reading it costs nothing extra
    (unlike ``__getattr__``, which slows every attribute access of the class).
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        if obj.__dict__.get("_closed", False):
            raise _ClosedAttribute(
                f"This env is closed; env.{self.name} no longer exists (close() drops the episode). "
                "Read it before close(), or create a new env."
            )
        raise _ResetNeededAttribute(f"Call reset() before reading env.{self.name}.")


def _reason(reason: str) -> TerminationReason | str:
    """``reason`` as a :class:`TerminationReason` when it is one's value, else as given."""
    try:
        return TerminationReason(reason)
    except ValueError:
        return reason


def _is_int(x: Any) -> bool:
    return type(x) is int or (isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)))


def _iterable(x: Any) -> list[Any]:
    try:
        return list(x)
    except TypeError:
        return [None]  # not iterable: fails the element check


def _shown(x: Any) -> str:
    """A caller's value in an error message: its repr, clipped (never raising, whatever the value)."""
    try:
        return clip(repr(x), 100)
    except Exception:
        return f"<{type(x).__name__}>"


@dataclass(frozen=True)
class EpisodeSnapshot:
    """A frozen copy of a live episode; ``TauEnv.restore`` resumes from it (any number of times).

    Immutable: the database image and the episode state are bytes, and ``seal`` (a keyed digest
    over both and the env's domain, schema and tools) lets ``restore`` refuse a snapshot that was
    altered, forged, or taken by an env of another domain or configuration.
    """

    task_id: str
    num_steps: int
    image: bytes
    state: bytes
    seal: bytes

    def __repr__(self) -> str:
        return f"EpisodeSnapshot(task_id={self.task_id!r}, num_steps={self.num_steps}, {len(self.image)} bytes)"


class TauEnv(AECEnv[str, Observation, Message | None]):
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

    A model's mistakes never raise: malformed or unencodable tool calls, and arguments with lone
    surrogates, become ``Error:`` tool results; lone surrogates in text are escaped as text; each
    tool call gets an id unique in the episode (the rule: :func:`tau_env.messages.parse_tool_calls`).
    So the trajectory is always JSON that can be written as UTF-8.

    Misuse by the caller raises a named :mod:`tau_env.error` exception. Before the first
    ``reset()`` every episode method (``step``, ``last``, ``observe``, ``agent_iter``, ``grade``,
    ``snapshot``, ``db_digest``, ``transcript``, ``render``, ...) and episode attribute raises
    :class:`~tau_env.error.ResetNeeded`; after ``close()`` (which may be called again) every
    method raises :class:`~tau_env.error.ClosedEnvError`; stepping a finished episode other than
    with ``step(None)`` for a seat still present raises :class:`~tau_env.error.EpisodeOverError`.

    Copying: ``copy.deepcopy(env)`` is ``env.fork()`` (a new env, same domain object and settings,
    same episode state; an env without an episode copies as a fresh one). Pickling (and
    ``copy.copy``) raises :class:`~tau_env.error.NotPicklableError`: the episode lives in an
    in-memory SQLite database of this process; another process builds its own env with
    ``tau_env.make(id, **settings)``. Snapshots are picklable but restore only in the process
    that took them.

    Args:
        domain: The domain to play.
        max_steps: Step budget of an episode (both seats' steps count).
        retrieval: Knowledge-tool configuration; the domain's default if None.
        task_ids: Restrict the tasks ``reset`` may pick without ``options``.
        strict_tools: Re-raise exceptions from buggy domain tools instead of reporting them to the model.
        render_mode: ``"ansi"`` (``render()`` returns the transcript) or ``"human"`` (prints it).

    Attributes:
        domain: The :class:`~tau_env.Domain` played (shared, not copied, by forks).
        max_steps: Step budget of an episode.
        retrieval: The knowledge-tool configuration in use.
        toolbox: The tools of both seats for ``retrieval`` (shared by the domain's envs).
        system_prompt: The agent's system prompt for ``retrieval`` (without a task).
        task_pool: Ids of the tasks ``reset`` draws from without ``options``.
        strict_tools: Whether buggy domain tools re-raise.
        render_mode: ``"ansi"``, ``"human"`` or None.
        possible_agents: ``["agent", "user"]``, the seats (PettingZoo's name for them).
        agents: The seats still in the episode: both after ``reset``, none once both have left.
        observation_spaces: Each seat's observation space (PettingZoo).
        action_spaces: Each seat's action space, a :class:`~tau_env.spaces.MessageSpace` (PettingZoo).
        rewards: Each seat's reward of the last step (PettingZoo).
        terminations: Whether the episode ended for each seat (PettingZoo).
        truncations: Whether the episode was cut off for each seat (PettingZoo).
        infos: Each seat's info: ``task_id``; at the end also ``termination_reason``, ``reward``,
            ``grade`` (a dict) and ``steps``.
        agent_selection: The seat to act (PettingZoo).
        task: The episode's :class:`~tau_env.Task`.
        trajectory: One event per step: ``{"step", "seat", "message"}``, plus ``"tool_results"``
            (``tool_call_id``, ``name``, ``content``, ``error``) for a message with tool calls.
        termination_reason: Why the episode ended (a :class:`TerminationReason`, or the caller's
            string given to ``end_episode``); None while it runs.
        grade_result: The :class:`~tau_env.Grade` of the final database; None while the episode runs.
        episode_reward: The episode's reward (0.0 until the end).

    The episode attributes (``task``, ``trajectory``, ``termination_reason``, ``grade_result``,
    ``episode_reward``, ``infos``, ``agent_selection``) raise :class:`~tau_env.error.ResetNeeded`
    before the first ``reset()``.
    """

    metadata = {"name": "tau_env_v0", "render_modes": ["human", "ansi"], "is_parallelizable": False}

    # Declared here, set by __init__ (settings) and reset() (episode state); see "Attributes".
    domain: Domain
    max_steps: int
    retrieval: str
    toolbox: Toolbox
    system_prompt: str
    task_pool: list[str]
    strict_tools: bool
    render_mode: str | None
    possible_agents: list[str]
    agents: list[str]
    observation_spaces: dict[str, spaces.Space]
    action_spaces: dict[str, MessageSpace]
    rewards: dict[str, float]
    terminations: dict[str, bool]
    truncations: dict[str, bool]
    infos: dict[str, dict[str, Any]]
    agent_selection: str
    task: Task
    trajectory: list[dict[str, Any]]
    termination_reason: TerminationReason | str | None
    grade_result: Grade | None
    episode_reward: float

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
        self._closed = False
        self._started = False
        if not isinstance(domain, Domain):
            raise InvalidOptionError(
                f"TauEnv needs a tau_env.Domain, got {type(domain).__name__}; "
                "use tau_env.make(id) for a registered one."
            )
        self.domain = domain
        self.max_steps = domain.max_steps if max_steps is None else max_steps
        if not _is_int(self.max_steps) or self.max_steps < 1:
            raise InvalidOptionError(f"max_steps must be an integer of at least 1, got {_shown(self.max_steps)}.")
        self.max_steps = int(self.max_steps)
        if retrieval is not None and not isinstance(retrieval, str):
            raise InvalidOptionError(f"retrieval must be a configuration name (str), got {_shown(retrieval)}.")
        self.retrieval = retrieval or domain.retrieval
        try:
            self.toolbox = domain.toolbox(self.retrieval)
            self.system_prompt = domain.system_prompt(self.retrieval)
            require_extras(self.retrieval)  # e.g. dense search without the embed extra: refuse now
        except Error:
            raise
        except ValueError as e:  # a domain's own "unknown configuration" check
            raise InvalidOptionError(str(e)) from e
        self._prompt_is_static = not domain.prompt_depends_on_task
        if task_ids is None:
            self.task_pool = [t.id for t in domain.tasks]
        elif isinstance(task_ids, (str, bytes)) or not all(isinstance(t, str) for t in _iterable(task_ids)):
            raise InvalidOptionError(f"task_ids must be a list of task id strings, got {_shown(task_ids)}.")
        else:
            self.task_pool = [self._task(t).id for t in task_ids]
        if not self.task_pool and task_ids is None:
            raise InvalidOptionError(
                f"Domain {domain.name!r}: no tasks to play: it holds none (an empty task file, or tasks=[]); give "
                "a task file with at least one task."
            )
        if not self.task_pool:
            raise InvalidOptionError(
                f"Domain {domain.name!r}: no tasks to play (task_ids={task_ids!r}); pass None for all tasks."
            )
        if not isinstance(strict_tools, bool):
            raise InvalidOptionError(f"strict_tools must be True or False, got {_shown(strict_tools)}.")
        self.strict_tools = strict_tools
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise InvalidOptionError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got {_shown(render_mode)}."
            )
        self.render_mode = render_mode
        self.possible_agents = list(SEATS)
        self.observation_spaces = {s: observation_space(s) for s in SEATS}
        self.action_spaces = {s: MessageSpace() for s in SEATS}
        self._rng_seed: int | None = 0  # the task draw's generator, built on first use (see _draw)
        self._rng: np.random.Generator | None = None
        # PettingZoo's per-seat state: empty until reset() (no seat is live).
        self.agents = []
        self.rewards = {}
        self._cumulative_rewards = {}
        self.terminations = {}
        self.truncations = {}
        self._db = EpisodeDB(domain.schema)
        self._schema_cache: dict[frozenset[str], list[dict[str, Any]]] = {}
        # What a snapshot must have been taken on to restore here: domain, schema and tools.
        tag = "\0".join([domain.name, domain.schema.ddl, *self.toolbox.tools])
        self._snapshot_tag = hashlib.sha256(tag.encode("utf-8", "surrogatepass")).digest()

    # --- misuse ---------------------------------------------------------------------------
    def _not_live(self, method: str) -> None:
        """Raise the error for ``method`` called without a live episode (closed, or before reset)."""
        if self._closed:
            raise ClosedEnvError(
                f"This env is closed; {method}() cannot run. Create a new one (tau_env.make(...) or TauEnv(domain))."
            )
        raise ResetNeeded(f"Call reset() before {method}().")

    def _seat(self, agent: Any) -> str:
        if not isinstance(agent, str) or agent not in _OTHER:
            raise InvalidOptionError(f"Unknown seat {_shown(agent)}; the seats are {list(SEATS)}.")
        return agent

    # --- PettingZoo API ----------------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space:
        if self._closed:
            self._not_live("observation_space")
        return self.observation_spaces[self._seat(agent)]

    def action_space(self, agent: str) -> spaces.Space:
        if self._closed:
            self._not_live("action_space")
        return self.action_spaces[self._seat(agent)]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode.

        Args:
            seed: Seeds the task choice (without ``options``) and the action spaces' sampling; an
                integer >= 0 (as in Gymnasium) or None.
            options: ``{"task_id": str}`` or ``{"task_index": int}`` (0 <= index < number of the
                domain's tasks) selects a task; otherwise one is drawn from the task pool with the
                seeded generator (seed 0 by default). Other keys are ignored with a warning.

        Raises:
            InvalidOptionError: A bad seed or option (nothing changes).
            UnknownTaskError: ``task_id`` is not a task of the domain (nothing changes).
        """
        if self._closed:
            self._not_live("reset")
        if seed is not None and (not _is_int(seed) or seed < 0):
            raise InvalidOptionError(f"seed must be an integer >= 0 or None, got {_shown(seed)}.")
        task = None
        if type(options) is dict and len(options) == 1 and type(options.get("task_id")) is str:
            task = self._task(options["task_id"])  # the common case, checked without the general path
        elif options is not None:
            if not isinstance(options, Mapping):
                raise InvalidOptionError(
                    f"options must be a dict such as {{'task_id': 'T1'}} or None, got {_shown(options)}."
                )
            task = self._task_from_options(options)
        if seed is not None:
            seed = int(seed)  # a numpy integer too (Gymnasium's spaces take Python ints only)
            self._rng_seed, self._rng = seed, None
            for i, s in enumerate(SEATS):
                self.action_spaces[s].seed(seed + i)
        if task is None:
            if self._rng is None:  # built here: a reset that names its task never needs it
                self._rng = np.random.default_rng(self._rng_seed)
            task = self.domain.task(self.task_pool[int(self._rng.integers(len(self.task_pool)))])
        self._start(task)

    def _task_from_options(self, options: Mapping[str, Any]) -> Task | None:
        unknown = [k for k in options if k not in ("task_id", "task_index")]
        if unknown:
            warnings.warn(
                f"TauEnv.reset ignores unknown options {[clip(str(k)) for k in unknown]}; known: task_id, task_index.",
                stacklevel=3,
            )
        task_id, task_index = options.get("task_id"), options.get("task_index")
        if task_id is not None and task_index is not None:
            raise InvalidOptionError("Give reset() options task_id or task_index, not both.")
        if task_id is not None:
            if not isinstance(task_id, str):
                raise InvalidOptionError(f"options['task_id'] must be a task id string, got {_shown(task_id)}.")
            return self._task(task_id)
        if task_index is not None:
            n = len(self.domain.tasks)
            if not _is_int(task_index) or not 0 <= task_index < n:
                raise InvalidOptionError(
                    f"options['task_index'] must be an integer from 0 to {n - 1} (the domain's tasks), "
                    f"got {_shown(task_index)}; or pass {{'task_id': ...}}."
                )
            return self.domain.tasks[int(task_index)]
        return None

    def _task(self, task_id: str) -> Task:
        if len(task_id) > 200:  # not a misspelt id: no suggestion search, no echo in full
            raise UnknownTaskError(f"Domain {self.domain.name!r} has no task {clip(task_id)!r}.")
        return self.domain.task(task_id)

    def _start(self, task: Task) -> None:
        self.task = task
        # s0: roll back to the seed image (microseconds) and apply the task's initial state.
        self._db.start(self.domain.seed_image, self.domain.initializer(task))
        self._ctx = self.domain.context(self._db, task, self.toolbox)
        self._steps = 0
        self._scenario = task.scenario.model_dump()
        # Each seat's chat, from its own point of view (its layout: the domain's hooks).
        self._views: dict[str, list[dict[str, Any]]] = {
            AGENT: [{"role": "system", "content": self._prompt_for(task)}],
            USER: [{"role": "system", "content": self.domain.user_system_prompt(task)}],
        }
        if self.domain.greeting:
            self._views[AGENT].append({"role": "assistant", "content": self.domain.greeting})
            self._views[USER].append({"role": "user", "content": self.domain.greeting})
        self.trajectory = []
        self.termination_reason = None
        self.grade_result = None
        self.episode_reward = 0.0
        # PettingZoo state: both seats live, no reward yet, the user speaks first.
        self.agents = list(SEATS)
        self.rewards = {s: 0.0 for s in SEATS}
        self._cumulative_rewards = {s: 0.0 for s in SEATS}
        self.terminations = {s: False for s in SEATS}
        self.truncations = {s: False for s in SEATS}
        self.infos = {s: {"task_id": task.id} for s in SEATS}
        self.agent_selection = USER
        self._skip_agent_selection = None
        self._call_ids: set[str] = set()  # tool-call ids used in this episode (each answered once)
        self._started = True

    def _prompt_for(self, task: Task) -> str:
        # A domain may build the agent's prompt per task (e.g. with the task's documents in it).
        return self.system_prompt if self._prompt_is_static else self.domain.system_prompt(self.retrieval, task)

    def observe(self, agent: str) -> dict[str, Any]:
        if not self._started:
            self._not_live("observe")
        try:
            active = frozenset(self._ctx.active[agent])
        except (KeyError, TypeError):
            self._seat(agent)
            raise
        tools = self._schema_cache.get(active)
        if tools is None:
            tools = self._schema_cache[active] = self.toolbox.schemas(active)
        obs = {"messages": list(self._views[agent]), "tools": list(tools)}
        if agent == USER:
            obs["scenario"] = self._scenario
        return obs

    def last(self, observe: bool = True) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Observation, cumulative reward, terminated, truncated and info of the seat to act."""
        if not self._started:
            self._not_live("last")
        if not self.agents:
            raise self._gone()
        return super().last(observe)

    def agent_iter(self, max_iter: int = 2**63) -> Any:
        """Yield the seat to act until both have left the finished episode (``step`` each one)."""
        if not self._started:
            self._not_live("agent_iter")
        return super().agent_iter(max_iter)

    def _gone(self) -> EpisodeOverError:
        return EpisodeOverError(
            f"The episode is over ({self.termination_reason}) and both seats have left it; "
            "call reset() for a new episode."
        )

    def step(self, action: Any) -> None:
        """Play ``action`` (an assistant message) for the seat in ``agent_selection``.

        Raises :class:`~tau_env.error.InvalidActionError` only for what is not a message at all
        (and then changes nothing). Everything a model can get wrong inside a message becomes an
        ``Error:`` observation; each counted step adds exactly one trajectory event.
        """
        if not self._started:
            self._not_live("step")
        seat = self.agent_selection
        try:
            over = self.terminations[seat] or self.truncations[seat]
        except KeyError:  # both seats have left (a live seat is always in terminations)
            raise self._gone() from None
        if over:
            if action is not None:
                raise EpisodeOverError(
                    f"The episode is over for {seat!r}; step(None) to let it leave (as agent_iter expects), "
                    "or reset() for a new episode."
                )
            self._was_dead_step(action)
            return
        msg = normalize_action(action)  # raises (changing nothing) only for what is not a message
        step = self._steps + 1
        calls = parse_tool_calls(msg, f"call_{step}", self._call_ids)
        if len(calls) > MAX_TOOL_CALLS:
            too_many = (
                f"Too many tool calls in one message ({len(calls)}; at most {MAX_TOOL_CALLS}). "
                "Send fewer calls per message."
            )
            calls[MAX_TOOL_CALLS:] = [dataclasses.replace(c, error=too_many) for c in calls[MAX_TOOL_CALLS:]]
        event: dict[str, Any] = {"step": step, "seat": seat, "message": msg}
        ended: TerminationReason | None = None
        if calls:
            results = self._run_strict(seat, calls) if self.strict_tools else None
            view = self._views[seat]
            view.append(self.domain.own_message(msg))
            records = []
            try:
                for i, c in enumerate(calls):
                    if results is not None:
                        res = results[i]
                    elif c.error is None:
                        res = self.toolbox.call(self._ctx, seat, c.name, c.arguments)  # never raises for the model
                    else:
                        res = ToolResult(c.name, f"Error: {c.error}", error=True)
                    view.append(self.domain.tool_message(c.id, c.name, res.content))
                    records.append({"tool_call_id": c.id, "name": c.name, "content": res.content, "error": res.error})
                    if res.ends_episode:
                        ended = TerminationReason.TRANSFER
            except BaseException:  # not the model's doing (e.g. a broken database): the step did not happen
                del view[len(view) - len(records) - 1 :]
                raise
            self._call_ids.update([c.id for c in calls])
            event["tool_results"] = records
            next_seat = seat  # the caller reads its results and keeps the turn
        else:
            self._views[seat].append(self.domain.own_message(msg))
            self._views[_OTHER[seat]].append({"role": "user", "content": msg.get("content") or ""})
            next_seat = _OTHER[seat]
            if seat == USER:
                marker = is_end_message(msg.get("content"))
                if marker is not None:
                    ended = _MARKER_ENDINGS.get(marker, TerminationReason.USER_STOP)
        self._steps = step
        self._clear_rewards()
        self.trajectory.append(event)
        if ended is not None:
            self._finish(ended, truncated=False)
        elif self._steps >= self.max_steps:
            self._finish(TerminationReason.MAX_STEPS, truncated=True)
        else:
            self.agent_selection = next_seat
        self._accumulate_rewards()

    def _run_strict(self, seat: str, calls: list[ParsedCall]) -> list[ToolResult]:
        """Run a message's calls with ``strict_tools``: a tool bug re-raises, and the whole message is
        undone first (database and active tools), so the step is not counted.
        """
        ctx, conn = self._ctx, self._db.conn
        saved = ctx.copy_state()
        conn.execute("SAVEPOINT tau_step")
        try:
            results = [
                ToolResult(c.name, f"Error: {c.error}", error=True)
                if c.error is not None
                else self.toolbox.call(ctx, seat, c.name, c.arguments, strict=True)
                for c in calls
            ]
        except BaseException:
            conn.execute("ROLLBACK TO tau_step")
            conn.execute("RELEASE tau_step")
            ctx.active, ctx.state = saved
            raise
        conn.execute("RELEASE tau_step")
        return results

    def end_episode(self, reason: TerminationReason | str) -> None:
        """End the live episode from outside (e.g. a harness that detected a loop): truncated, reward 0.

        ``reason`` becomes ``termination_reason``: a :class:`TerminationReason` (a string equal to
        one's value becomes that member), or the caller's own non-empty string. An episode that
        has ended already keeps its reason.
        """
        if not self._started:
            self._not_live("end_episode")
        if not isinstance(reason, str) or not reason:
            raise InvalidOptionError(f"end_episode needs a reason (a non-empty string), got {_shown(reason)}.")
        if self.termination_reason is None:
            self._finish(_reason(reason), truncated=True)
            self._accumulate_rewards()

    def _finish(self, reason: TerminationReason | str, truncated: bool) -> None:
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
    def call_tool(self, seat: str, name: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """Run one tool call for ``seat`` on the episode's database, outside the conversation.

        A hook for tests, benchmarks and debugging (tau2-bench's ``use_tool``): the call runs
        exactly as a tool call of ``step`` does (the seat's active tools, argument validation, a
        savepoint that undoes a failed or read-only call, meta tools that unlock tools,
        ``strict_tools``), but it is not a step: no turn passes, nothing enters the trajectory or
        the seats' chats, and a tool that ends the episode (``ends_episode`` in the result) does
        not end it. It works on a finished episode too, e.g. to inspect the final state; the
        episode's grade is not recomputed.

        Args:
            seat: ``"agent"`` or ``"user"``.
            name: The tool's name.
            arguments: The call's arguments (decoded JSON: a dict); None for none.

        Returns:
            The :class:`~tau_env.tools.ToolResult`; the model's kind of mistake (an unknown or
            inactive tool, bad arguments, a tool error) is an ``error`` result, as in a step.

        Raises:
            InvalidOptionError: ``seat`` is not a seat, ``name`` not a string or ``arguments`` not a
                mapping (nothing runs).
        """
        if not self._started:
            self._not_live("call_tool")
        self._seat(seat)
        if not isinstance(name, str):
            raise InvalidOptionError(f"call_tool needs a tool name (a str), got {_shown(name)}.")
        if arguments is not None and type(arguments) is not dict:
            if not isinstance(arguments, Mapping):
                raise InvalidOptionError(
                    f"call_tool needs the arguments as a dict (or None), got {_shown(arguments)}; "
                    "decode JSON text first."
                )
            arguments = dict(arguments)
        if self.strict_tools:
            return self._run_strict(seat, [ParsedCall("", name, arguments, "")])[0]
        return self.toolbox.call(self._ctx, seat, name, arguments)

    def active_tools(self, seat: str) -> frozenset[str]:
        """The names of the tools ``seat`` can call now (a copy: meta tools add to the live set)."""
        if not self._started:
            self._not_live("active_tools")
        return frozenset(self._ctx.active[self._seat(seat)])

    @property
    def num_steps(self) -> int:
        """Steps played in this episode (equal to ``len(trajectory)``)."""
        if not self._started:
            self._not_live("num_steps")
        return self._steps

    def grade(self, explain: bool = True) -> Grade:
        """Grade the current state now (without ending the episode)."""
        if not self._started:
            self._not_live("grade")
        return self.domain.grader.grade(self._db, self.task, explain=explain)

    def db_digest(self) -> str:
        """Canonical digest of the episode's database."""
        if not self._started:
            self._not_live("db_digest")
        return self._db.digest()

    @property
    def db(self) -> EpisodeDB:
        """The episode's database (read it; write only through tools)."""
        if not self._started:
            self._not_live("db")
        return self._db

    def snapshot(self) -> EpisodeSnapshot:
        """Freeze the live episode (database, conversation, active tools, turn) for ``restore``."""
        if not self._started:
            self._not_live("snapshot")
        active, tool_state = self._ctx.copy_state()
        state = pickle.dumps(
            {
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
                "skip": self._skip_agent_selection,
                "reason": self.termination_reason,
                "grade": self.grade_result,
                "reward": self.episode_reward,
                "call_ids": self._call_ids,
                "active": active,
                "tool_state": tool_state,
            },
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        image = self._db.snapshot()
        return EpisodeSnapshot(
            self.task.id, self._steps, image, state, self._seal(self.task.id, self._steps, image, state)
        )

    def _seal(self, task_id: str, steps: int, image: bytes, state: bytes) -> bytes:
        mac = hmac.new(_SNAPSHOT_KEY, self._snapshot_tag, "sha256")
        for part in (task_id.encode("utf-8", "surrogatepass"), str(steps).encode(), image, state):
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.digest()

    def restore(self, snap: EpisodeSnapshot) -> None:
        """Resume from ``snap``; the snapshot stays reusable.

        Raises:
            SnapshotError: ``snap`` was not taken by an env of this process with the same domain,
                schema and tools (retrieval configuration), or was altered; the live episode is
                left as it was.
        """
        if self._closed:
            self._not_live("restore")
        if not isinstance(snap, EpisodeSnapshot):
            raise SnapshotError(f"restore() needs an EpisodeSnapshot from env.snapshot(), got {type(snap).__name__}.")
        parts = (snap.task_id, snap.num_steps, snap.image, snap.state, snap.seal)
        if not (
            isinstance(parts[0], str)
            and _is_int(parts[1])
            and all(isinstance(p, bytes) for p in parts[2:])
            and hmac.compare_digest(self._seal(*parts[:4]), snap.seal)
        ):
            raise SnapshotError(
                "This snapshot was altered, or taken by an env of another domain, schema or retrieval "
                "configuration, or in another process; restore only snapshots from env.snapshot() of a "
                "matching env in this process."
            )
        try:
            task = self._task(snap.task_id)
        except UnknownTaskError as e:
            raise SnapshotError(f"The snapshot's task is not in this env's domain: {e}") from None
        s = pickle.loads(snap.state)  # sealed by this process: only our own pickles get here
        self._start(task)
        self._db.restore(snap.image)
        self._ctx.conn = self._db.conn  # restore opens a new connection
        self._ctx.active, self._ctx.state = s["active"], s["tool_state"]
        self._steps, self._views, self.trajectory = s["steps"], s["views"], s["trajectory"]
        self.agents, self.rewards, self._cumulative_rewards = s["agents"], s["rewards"], s["cum"]
        self.terminations, self.truncations, self.infos = s["terminations"], s["truncations"], s["infos"]
        self.agent_selection, self._skip_agent_selection = s["selection"], s["skip"]
        self.termination_reason, self.grade_result = s["reason"], s["grade"]
        self.episode_reward, self._call_ids = s["reward"], s["call_ids"]

    def fork(self) -> TauEnv:
        """A new env of the same domain and settings, continuing from this episode's current state."""
        if not self._started:
            self._not_live("fork")
        other = self._blank()
        other.restore(self.snapshot())
        return other

    def _blank(self) -> TauEnv:
        """A new env of the same domain and settings, without an episode."""
        return TauEnv(
            self.domain,
            max_steps=self.max_steps,
            retrieval=self.retrieval,
            task_ids=self.task_pool,
            strict_tools=self.strict_tools,
            render_mode=self.render_mode,
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> TauEnv:
        if self._closed:
            self._not_live("deepcopy")
        other = memo[id(self)] = self.fork() if self._started else self._blank()
        return other

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise NotPicklableError(
            "A TauEnv cannot be pickled or shallow-copied: its episode lives in an in-memory SQLite database of "
            "this process. Use copy.deepcopy(env) or env.fork() in this process; in another, build the env there "
            "with tau_env.make(id, **settings)."
        )

    def transcript(self) -> str:
        """The conversation so far as readable text (both seats, tool calls and results)."""
        if not self._started:
            self._not_live("transcript")
        from tau_env.show import format_events

        return format_events(self.trajectory)

    def render(self) -> str | None:
        if not self._started:
            self._not_live("render")
        if self.render_mode is None:
            warnings.warn("render() called without a render_mode; pass render_mode='ansi' or 'human'.", stacklevel=2)
            return None
        text = self.transcript()
        if self.render_mode == "ansi":
            return text
        print(text)  # render_mode="human" asks for printing
        return None

    def close(self) -> None:
        """Release the episode's database and drop the episode: every later call but ``close``, and every
        episode attribute (``task``, ``trajectory``, ...), raises ClosedEnvError, whether or not an
        episode ran; PettingZoo's per-seat state (``agents``, ``rewards``, ...) is empty again.
        """
        if not self._closed:
            self._db.close()
            self._closed = True
            self._started = False
            for name in (*_EPISODE_ATTRIBUTES, "_ctx", "_views", "_scenario", "_call_ids"):
                self.__dict__.pop(name, None)
            self.agents, self.rewards, self._cumulative_rewards = [], {}, {}
            self.terminations, self.truncations = {}, {}

    def state(self) -> np.ndarray:
        """PettingZoo's global state: not defined for a chat (NotImplementedError); ClosedEnvError once closed."""
        if self._closed:
            self._not_live("state")
        return super().state()

    def __enter__(self) -> TauEnv:
        if self._closed:
            self._not_live("__enter__")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"TauEnv(domain={self.domain.name!r}, retrieval={self.retrieval!r}, max_steps={self.max_steps}){state}"


# Attributes that reset() sets; reading one before raises ResetNeeded. (Only these: a descriptor
# keeps Python from specialising reads of the attribute, and the others are read on every step.)
_EPISODE_ATTRIBUTES = (
    "task",
    "trajectory",
    "termination_reason",
    "grade_result",
    "episode_reward",
    "infos",
    "agent_selection",
)
for _name in _EPISODE_ATTRIBUTES:
    setattr(TauEnv, _name, _EpisodeAttribute(_name))
