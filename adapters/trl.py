"""TRL: tau_env episodes inside ``trl.GRPOTrainer`` and ``trl.SFTTrainer``.

Three ways in, each a translation of tau_env's own episode loop (turns, tools, the user simulator
and the exact-match grade stay in tau_env):

- :class:`TauRollout`, a ``rollout_func`` for ``GRPOTrainer``: each prompt (a task id, from
  :func:`rollout_dataset`) becomes one whole agent-user episode played by
  :func:`tau_env.arun_episode`, the agent seat sampled from the trainer's model token by token
  (:class:`~tau_env.reference_trainers.rollout_policy.LocalTokenPolicy`; the sequence is the
  exact one the model sampled, built by
  :class:`~tau_env.reference_trainers.rollout.TrajectoryBuilder`), the user seat played by any
  tau_env user policy. It returns TRL's ``prompt_ids`` / ``completion_ids`` / ``logprobs``, an
  ``env_mask`` that is 1 exactly on the tokens the model generated (0 on tool results, user
  turns and template text), and the episode's reward as the extra field ``tau_reward``, which
  :func:`tau_reward` hands to TRL as a reward function.
- :func:`tool_environment`, an ``environment_factory`` class for TRL's own tool loop: the agent's
  tools become methods, plus ``send_message_to_user``, which delivers the model's text to the
  simulated user and returns the reply; ``get_reward`` is the exact-match grade.
- :func:`sft_dataset`: ``tau-env export-sft`` JSONL as a conversational prompt-completion
  dataset for ``SFTTrainer`` (``assistant_only_loss=True``: the loss falls on the agent's turns
  after the greeting only).

Install: ``pip install 'tau-env[trl]'`` (TRL, datasets, transformers, torch).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import itertools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from tau_env.adapters.errors import AdapterError, require

from tau_env import ScriptedUser, TauEnv, arun_episode, assistant_message, make, say, tool_call
from tau_env.error import InvalidOptionError
from tau_env.harness import EpisodeResult
from tau_env.harness.episode import DEFAULT_LOOP_LIMIT, episode_seed
from tau_env.sft import initial_tools

EXTRA = "trl"

#: The tool :func:`tool_environment` adds for talking to the user.
SEND_MESSAGE = "send_message_to_user"

#: Appended to the agent's system prompt in :func:`tool_dataset` (TRL ends a rollout at a reply without tool calls).
TOOL_MODE_NOTE = (
    "\n\nIn this conversation you reach the customer only through the send_message_to_user tool, which "
    "returns their reply. A reply of yours without a tool call ends the conversation."
)


def _trl() -> Any:
    return require("trl", EXTRA, "tau_env.adapters.trl")


def _datasets() -> Any:
    return require("datasets", EXTRA, "tau_env.adapters.trl")


def _make_env(env: str | Callable[[], TauEnv], make_kwargs: dict[str, Any]) -> TauEnv:
    if isinstance(env, str):
        return make(env, **make_kwargs)
    if make_kwargs:
        raise InvalidOptionError(
            f"Settings {sorted(make_kwargs)} go to tau_env.make and need an env id; a factory makes its own env."
        )
    return env()


def _policy_factory(policy: Any) -> Callable[[], Any]:
    """A class is instantiated per episode; an instance (or a function) is copied."""
    if policy is None:
        return ScriptedUser
    if isinstance(policy, type):
        return policy
    return lambda: copy.deepcopy(policy)


def _run(coro: Any) -> Any:
    """Run ``coro`` to completion from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = asyncio.run(coro)
        except BaseException as e:  # handed back to the caller's thread
            out["error"] = e

    t = threading.Thread(target=target, name="tau-env-trl-rollout")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


# ------------------------------------------------------------------------------------------ datasets


def _task_ids(env: TauEnv, task_ids: Sequence[str] | None) -> list[str]:
    ids = list(task_ids) if task_ids is not None else list(env.task_pool)
    if not ids:
        raise InvalidOptionError("No tasks to build a dataset from: pass task_ids or an env with tasks.")
    return ids


def rollout_dataset(
    env: str | Callable[[], TauEnv] = "harbor-bank-v0", task_ids: Sequence[str] | None = None, **make_kwargs: Any
) -> Any:
    """A ``datasets.Dataset`` for :class:`TauRollout`: one row per task, ``prompt`` naming the task.

    Each row is ``{"prompt": [{"role": "user", "content": TASK_ID}], "task_id": TASK_ID}``: TRL
    gives a ``rollout_func`` only the prompts, so the prompt carries the task; the episode's real
    prompt (system prompt, tools, greeting, the user's opening) is made by tau_env.

    Args:
        env: An env id or a factory of :class:`~tau_env.TauEnv`.
        task_ids: The tasks (None: the env's task pool).
        **make_kwargs: Settings for :func:`tau_env.make`.
    """
    e = _make_env(env, make_kwargs)
    try:
        ids = _task_ids(e, task_ids)
        for t in ids:
            e.reset(options={"task_id": t})  # unknown ids fail here, not in the trainer
    finally:
        e.close()
    return _datasets().Dataset.from_dict({"prompt": [[{"role": "user", "content": t}] for t in ids], "task_id": ids})


def tool_dataset(
    env: str | Callable[[], TauEnv] = "harbor-bank-v0", task_ids: Sequence[str] | None = None, **make_kwargs: Any
) -> Any:
    """A ``datasets.Dataset`` for :func:`tool_environment`: the agent's system prompt and a ``task_id`` column.

    ``prompt`` is ``[{"role": "system", ...}, {"role": "user", "content": ""}]``; the environment's
    ``reset`` returns the simulated user's opening, which TRL appends to the empty user message.
    The system prompt ends with :data:`TOOL_MODE_NOTE`.
    """
    e = _make_env(env, make_kwargs)
    prompts = []
    try:
        ids = _task_ids(e, task_ids)
        for t in ids:
            e.reset(options={"task_id": t})
            system = e.observe("agent")["messages"][0]["content"]
            prompts.append([{"role": "system", "content": system + TOOL_MODE_NOTE}, {"role": "user", "content": ""}])
    finally:
        e.close()
    return _datasets().Dataset.from_dict({"prompt": prompts, "task_id": ids})


def sft_dataset(path: str | Path | Iterable[dict[str, Any]]) -> Any:
    """``tau-env export-sft`` examples as a conversational prompt-completion ``datasets.Dataset``.

    Each example's ``prompt`` is its messages before the first trained turn (system prompt,
    greeting, the user's opening); ``completion`` the rest; ``tools`` the schemas the agent had at
    the episode's start as a JSON string (TRL decodes it): :class:`TauRollout` renders those once,
    and a tool unlocked mid-episode would otherwise be in the prompt of the lookup that finds its
    name. With ``SFTConfig(assistant_only_loss=True)`` (a chat template with ``{% generation %}``
    markers) the loss falls exactly on the trained turns.

    Args:
        path: The JSONL file ``tau-env export-sft --jsonl`` wrote, or its records.

    Raises:
        InvalidOptionError: An example trains an assistant turn and then leaves a later one
            untrained (TRL's masks cannot express that), or trains none.
    """
    if isinstance(path, (str, Path)):
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
    else:
        records = list(path)
    rows: dict[str, list[Any]] = {"prompt": [], "completion": [], "tools": [], "task_id": []}
    for rec in records:
        messages, train = rec["messages"], rec.get("train")
        if train is None:
            train = [m["role"] == "assistant" for m in messages]
        first = next((i for i, flag in enumerate(train) if flag), None)
        if first is None:
            raise InvalidOptionError(f"Example of task {rec.get('task_id')!r} trains no message; drop it.")
        late = [i for i in range(first, len(messages)) if messages[i]["role"] == "assistant" and not train[i]]
        if late:
            raise InvalidOptionError(
                f"Example of task {rec.get('task_id')!r} leaves assistant message(s) {late} untrained after "
                f"trained message {first}; TRL's prompt-completion masks cannot express that. Export with "
                "--greeting-turns so only leading turns are untrained."
            )
        rows["prompt"].append(messages[:first])
        rows["completion"].append(messages[first:])
        rows["tools"].append(json.dumps(initial_tools(rec)))
        rows["task_id"].append(rec.get("task_id", ""))
    if not rows["prompt"]:
        raise InvalidOptionError(f"No examples in {path}: export successful episodes with tau-env export-sft.")
    return _datasets().Dataset.from_dict(rows)


# ------------------------------------------------------------------------------------------ rollout_func


def tau_reward(completions: list[Any], tau_reward: list[float] | None = None, **kwargs: Any) -> list[float]:
    """A TRL reward function: the episode's tau_env reward that :class:`TauRollout` returned (``tau_reward``)."""
    if tau_reward is None:
        raise AdapterError(
            "tau_reward reads the 'tau_reward' field of a tau_env rollout: pass rollout_func=TauRollout(...) "
            "to GRPOTrainer together with reward_funcs=tau_reward."
        )
    return [float(r) for r in tau_reward]


def split_trajectory(input_ids: list[int], agent_mask: list[int], logprobs: list[float]) -> dict[str, list[Any]]:
    """One episode's sequence in TRL's terms.

    ``prompt_ids`` is the sequence up to the first generated token; ``completion_ids`` runs from it
    to the last generated token (what follows it, the env's last messages, trains nothing and is
    left out, so a turn cut by the token limit reads as truncated to TRL); ``env_mask`` and
    ``logprobs`` are aligned with ``completion_ids``. An episode without generated tokens keeps
    its last token as a one-token completion with mask 0.
    """
    if 1 in agent_mask:
        first = agent_mask.index(1)
        last = len(agent_mask) - 1 - agent_mask[::-1].index(1)
    else:
        first = last = len(input_ids) - 1
    return {
        "prompt_ids": list(input_ids[:first]),
        "completion_ids": list(input_ids[first : last + 1]),
        "env_mask": list(agent_mask[first : last + 1]),
        "logprobs": [float(x) for x in logprobs[first : last + 1]],
    }


class TauRollout:
    """A ``rollout_func`` for ``trl.GRPOTrainer``: one whole tau_env episode per prompt.

    ``GRPOTrainer(model, reward_funcs=tau_reward, train_dataset=rollout_dataset(ENV),
    rollout_func=TauRollout(ENV), args=GRPOConfig(...))``. TRL's sampler repeats each prompt
    ``num_generations`` times; each copy is its own episode with its own seed.

    Args:
        env: An env id or a factory of :class:`~tau_env.TauEnv` (one env per episode).
        user: The user seat: a tau_env policy class, instance (copied per episode) or factory
            (default :class:`~tau_env.ScriptedUser`); an LLM or cached user works too.
        agent: None: the trainer's own model samples the agent seat in process
            (:class:`~tau_env.reference_trainers.rollout_policy.LocalTokenPolicy`); or a function
            ``trainer -> TokenPolicy`` (e.g. a
            :class:`~tau_env.reference_trainers.rollout_policy.ServerTokenPolicy` on a vLLM server
            whose weights you keep in sync).
        family: Tool-call format of the model (``"qwen"``, ``"smollm2"``, ``"hermes"``; None: detected).
        chat_template: The template to render with (None: the family's tool template).
        max_new_tokens: The most tokens one agent turn generates (None: the trainer's
            ``max_completion_length``).
        max_context: The longest sequence an episode may reach (None: no limit).
        seed: Base seed of the episodes' seeds.
        concurrency: Episodes played at once (useful with a server policy or LLM user).
        loop_limit: The harness's repeated-action limit.
        **make_kwargs: Settings for :func:`tau_env.make` (e.g. ``max_steps``).

    Attributes:
        last_results: The :class:`~tau_env.EpisodeResult` of each episode of the last call.
        last_trajectories: Their :class:`~tau_env.reference_trainers.rollout.TokenTrajectory`.
    """

    def __init__(
        self,
        env: str | Callable[[], TauEnv] = "harbor-bank-v0",
        user: Any = None,
        *,
        agent: Callable[[Any], Any] | None = None,
        family: str | None = None,
        chat_template: str | None = None,
        max_new_tokens: int | None = None,
        max_context: int | None = None,
        seed: int = 0,
        concurrency: int = 1,
        loop_limit: int | None = DEFAULT_LOOP_LIMIT,
        **make_kwargs: Any,
    ):
        if concurrency < 1:
            raise InvalidOptionError(f"concurrency must be at least 1, got {concurrency}.")
        self.env, self.make_kwargs = env, make_kwargs
        self.user_factory = _policy_factory(user)
        self.agent, self.family, self.chat_template = agent, family, chat_template
        self.max_new_tokens, self.max_context = max_new_tokens, max_context
        self.seed, self.concurrency, self.loop_limit = int(seed), int(concurrency), loop_limit
        self._counter = itertools.count()
        self.last_results: list[EpisodeResult] = []
        self.last_trajectories: list[Any] = []
        _make_env(env, make_kwargs).close()  # a bad id or setting fails now, not inside the trainer

    def _agent(self, trainer: Any) -> Any:
        if self.agent is not None:
            return self.agent(trainer)
        from tau_env.reference_trainers.cpu_common import tokenizer_family
        from tau_env.reference_trainers.rollout_policy import LocalTokenPolicy

        tokenizer = getattr(trainer, "processing_class", None)
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer
        model = trainer.accelerator.unwrap_model(trainer.model)
        family = self.family or tokenizer_family(tokenizer)
        return LocalTokenPolicy(
            model,
            tokenizer,
            family=family,
            chat_template=self.chat_template,
            temperature=float(getattr(trainer, "temperature", 1.0) or 0.0),
            top_p=getattr(trainer, "top_p", None),
            max_new_tokens=self.max_new_tokens or int(getattr(trainer, "max_completion_length", 256) or 256),
            max_context=self.max_context,
        )

    def task_of(self, prompt: Any) -> str:
        """The task id a prompt names (a row of :func:`rollout_dataset`, or a plain id)."""
        if isinstance(prompt, str):
            return prompt.strip()
        if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
            content = prompt[-1].get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if isinstance(content, str):
                return content.strip()
        raise InvalidOptionError(
            f"A tau_env rollout prompt names a task: [{{'role': 'user', 'content': TASK_ID}}] (see "
            f"rollout_dataset), got {str(prompt)[:200]!r}."
        )

    def play(self, task_ids: Sequence[str], trainer: Any) -> tuple[list[EpisodeResult], list[Any]]:
        """Play one episode per task id with the trainer's policy; return the results and trajectories."""
        agent = self._agent(trainer)
        jobs = [(t, episode_seed(self.seed, t, next(self._counter))) for t in task_ids]

        async def main() -> list[EpisodeResult]:
            gate = asyncio.Semaphore(self.concurrency)

            async def one(task_id: str, seed: int) -> EpisodeResult:
                async with gate:
                    env = _make_env(self.env, self.make_kwargs)
                    try:
                        return await arun_episode(
                            env,
                            copy.deepcopy(agent),
                            self.user_factory(),
                            task_id=task_id,
                            seed=seed,
                            loop_limit=self.loop_limit,
                        )
                    finally:
                        env.close()

            return list(await asyncio.gather(*(one(t, s) for t, s in jobs)))

        results = _run(main())
        return results, agent.trajectories(results)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's ``rollout_func(prompts, trainer)``: one episode per prompt, in order."""
        task_ids = [self.task_of(p) for p in prompts]
        results, trajectories = self.play(task_ids, trainer)
        self.last_results, self.last_trajectories = results, trajectories
        out: dict[str, list[Any]] = {
            "prompt_ids": [],
            "completion_ids": [],
            "logprobs": [],
            "env_mask": [],
            "tau_reward": [],
            "tau_task_id": [],
            "tau_termination": [],
        }
        for r, t in zip(results, trajectories, strict=True):
            for key, value in split_trajectory(t.input_ids, t.agent_mask, t.rollout_logprobs).items():
                out[key].append(value)
            out["tau_reward"].append(float(r.reward))
            out["tau_task_id"].append(r.task_id)
            out["tau_termination"].append(str(r.termination_reason))
        return out


# ------------------------------------------------------------------------------------------ environment_factory


_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


def _annotation(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    nullable = False
    if isinstance(kind, list):
        nullable = "null" in kind
        kind = next((k for k in kind if k != "null"), "string")
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]) and schema["enum"]:
        hint: Any = Literal[tuple(schema["enum"])]  # type: ignore[valid-type]
    elif kind == "array":
        hint = list[_annotation(schema.get("items") or {"type": "string"})]  # type: ignore[misc]
    else:
        hint = _JSON_TYPES.get(str(kind), str)
    return hint | None if nullable else hint


def _docstring(description: str, params: dict[str, Any]) -> str:
    lines = [description.strip() or "A tool.", ""]
    if params:
        lines.append("Args:")
        for name, schema in params.items():
            text = " ".join(str(schema.get("description") or f"The {name.replace('_', ' ')}.").split())
            lines.append(f"    {name}: {text}")
    return "\n".join(lines)


def _tool_method(schema: dict[str, Any]) -> Callable[..., str]:
    """A method named after a tool, with the schema's signature and a Google docstring (TRL's tool format)."""
    fn = schema["function"]
    name = fn["name"]
    params = dict((fn.get("parameters") or {}).get("properties") or {})
    required = set((fn.get("parameters") or {}).get("required") or ())

    def method(self: TauToolEnvironment, **arguments: Any) -> str:
        return self._call(name, arguments)

    sig = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for p, s in sorted(params.items(), key=lambda item: item[0] not in required):
        annotations[p] = _annotation(s)
        default = inspect.Parameter.empty if p in required else None
        sig.append(inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotations[p]))
    annotations["return"] = str
    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(sig, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    method.__doc__ = _docstring(fn.get("description", ""), params)
    return method


class TauToolEnvironment:
    """Base of the classes :func:`tool_environment` makes (one tau_env episode per instance)."""

    _env_source: str | Callable[[], TauEnv] = "harbor-bank-v0"
    _make_kwargs: dict[str, Any] = {}
    _user_factory: Callable[[], Any] = ScriptedUser
    _seed: int = 0
    _counter = itertools.count()

    def __init__(self) -> None:
        self.env = _make_env(self._env_source, dict(self._make_kwargs))
        self.user: Any = None
        self.task_id: str | None = None

    def reset(self, **row: Any) -> str:
        """Start the episode of ``row["task_id"]``; play the user's opening and return it."""
        task_id = row.get("task_id")
        if not isinstance(task_id, str):
            raise InvalidOptionError(
                f"A tau_env tool environment needs a 'task_id' column in the dataset (see tool_dataset); got {row!r}."
            )
        seed = episode_seed(self._seed, task_id, next(self._counter))
        self.env.reset(seed=seed, options={"task_id": task_id})
        self.task_id = task_id
        self.user = self._user_factory()
        if hasattr(self.user, "reset"):
            self.user.reset(task=self.env.task, seed=seed)
        before = len(self.env.observe("agent")["messages"])
        self._play_user()
        return self._user_text(before)

    # --- the episode ------------------------------------------------------------------------------
    def _over(self) -> bool:
        return self.env.termination_reason is not None

    def _play_user(self) -> None:
        while not self._over() and self.env.agent_selection == "user":
            obs = self.env.observe("user")
            act = getattr(self.user, "aact", None)
            action = _run(act(obs)) if act is not None else self.user(obs)
            if inspect.isawaitable(action):
                action = _run(action)
            self.env.step(action)

    def _user_text(self, before: int) -> str:
        new = self.env.observe("agent")["messages"][before:]
        text = "\n".join(m.get("content") or "" for m in new if m.get("role") == "user")
        if self._over():
            text += f"\n(The conversation has ended: {self.env.termination_reason}.)"
        return text.strip()

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._over():
            return f"The conversation has ended ({self.env.termination_reason}); no more tool calls run."
        arguments = {k: v for k, v in arguments.items() if v is not None}
        call = tool_call(name, arguments, id=f"trl_{self.env.num_steps + 1}")
        self.env.step(assistant_message(None, [call]))
        messages = self.env.observe("agent")["messages"]
        result = next((m for m in reversed(messages) if m.get("tool_call_id") == call["id"]), None)
        text = (result or {}).get("content") or ""
        if self._over():
            text += f"\n(The conversation has ended: {self.env.termination_reason}.)"
        else:
            self._play_user()  # an agent tool never passes the turn; kept for policies that end it
        return text

    def send_message_to_user(self, message: str) -> str:
        """Send a message to the customer and return their reply.

        Args:
            message: What to say to the customer.
        """
        if self._over():
            return f"The conversation has ended ({self.env.termination_reason})."
        before = len(self.env.observe("agent")["messages"]) + 1
        self.env.step(say(message))
        self._play_user()
        return self._user_text(before)

    def get_reward(self) -> float:
        """The exact-match reward: the episode's reward once it ended, else the grade of the database now."""
        if self._over():
            return float(self.env.episode_reward)
        return float(self.env.grade(explain=False).reward)


def tool_environment(
    env: str | Callable[[], TauEnv] = "harbor-bank-v0", user: Any = None, *, seed: int = 0, **make_kwargs: Any
) -> type[TauToolEnvironment]:
    """An ``environment_factory`` class for ``trl.GRPOTrainer``'s own tool loop over a tau_env domain.

    ``GRPOTrainer(model, train_dataset=tool_dataset(ENV), environment_factory=tool_environment(ENV),
    args=GRPOConfig(...))``: each instance plays one episode at a time. Its methods are the agent's
    tools (every agent-side tool of the domain, discoverable ones included, since TRL renders the
    tool list once; calling one before ``unlock_tool`` returns the env's error, as in a
    conversation) and ``send_message_to_user``; each call is one ``env.step`` of the agent seat, and
    the user policy answers a message inside. ``get_reward`` is the exact-match reward.

    Args:
        env: An env id or a factory of :class:`~tau_env.TauEnv`.
        user: The user seat (a policy class, instance or factory; default ScriptedUser).
        seed: Base seed of the episodes' seeds.
        **make_kwargs: Settings for :func:`tau_env.make`.
    """
    probe = _make_env(env, make_kwargs)
    try:
        schemas = [
            t.schema
            for t in probe.toolbox.tools.values()
            if t.side == "agent" and not t.hidden and t.name != SEND_MESSAGE
        ]
        name = "".join(
            part.capitalize() for part in str(getattr(probe.domain, "name", "tau")).replace("-", "_").split("_")
        )
    finally:
        probe.close()
    bad = [s["function"]["name"] for s in schemas if not s["function"]["name"].isidentifier()]
    if bad:
        raise AdapterError(f"TRL tools are Python methods; these tool names are not identifiers: {bad}.")
    namespace: dict[str, Any] = {s["function"]["name"]: _tool_method(s) for s in schemas}
    namespace.update(
        _env_source=env,
        _make_kwargs=dict(make_kwargs),
        _user_factory=staticmethod(_policy_factory(user)),
        _seed=int(seed),
        _counter=itertools.count(),
        __doc__=f"tau_env's {env if isinstance(env, str) else 'custom'} domain as a TRL environment.",
    )
    return type(f"{name or 'Tau'}ToolEnvironment", (TauToolEnvironment,), namespace)
