"""veRL's agent loop for tau_env: one tau_env episode per sample, tokens in and tokens out.

:class:`TauAgentLoop` (registered in veRL as ``tau_agent``) plays one episode of the row's task with
:func:`tau_env.arun_episode`:

- the agent seat is :class:`VerlTokenPolicy`, a
  :class:`~tau_env.reference_trainers.rollout_policy.TokenPolicy` whose engine is veRL's server
  manager (``await server_manager.generate(request_id, prompt_ids=..., sampling_params=...)`` ->
  ``TokenOutput(token_ids, log_probs)``): the prompt is the exact token sequence so far, built by
  :class:`~tau_env.reference_trainers.rollout.TrajectoryBuilder` (never re-tokenized), the sampled ids
  and the engine's log-probabilities are appended with mask 1, and the decoded text becomes the env
  action (:func:`~tau_env.reference_trainers.rollout.parse_generation`);
- the user seat is :class:`tau_env.ScriptedUser` or, with ``user="llm"``, :class:`tau_env.llm.LLMUser`
  on an OpenAI-compatible simulator (``user_base_url``, ``user_model``);
- tools run in the env, and the reward is the env's grader (exact match of the final database).

The output's ``response_mask`` is the builder's agent mask (1 exactly on generated tokens; tool
results, user turns, template scaffolding 0), ``response_logprobs`` the engine's log-probabilities (0
off agent tokens), ``reward_score`` the episode's reward (veRL puts it on the last response token as
``rm_scores`` and skips its own reward loop).

Settings (keyword arguments of the loop, given as extra keys of the agent-loop YAML that
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` names; see
``reference_trainers/configs/tau_agent_loop.yaml``): ``family`` (``auto``, the default: the
tokenizer's, as the SFT data and the CPU trainers pick it; or ``qwen``/``smollm2``/``hermes``: how
tool calls print and which tool template renders), ``chat_template`` (None: the family's),
``user`` (``scripted`` or ``llm``), ``user_model``, ``user_base_url``, ``user_api_key_env``,
``user_temperature``, ``max_new_tokens`` (per agent turn), ``loop_limit``. A row's
``extra_info.user`` overrides ``user``.

The response budget: the whole multi-turn response (generated turns and the env's additions between
them) must fit in ``rollout.response_length``; it ends with the last agent turn (what the env said
after it, e.g. the user's goodbye, is left out: no agent token follows it). Each turn's
``max_tokens`` is capped by what is left, and a turn with no room ends the agent's part (the
policy answers empty messages, the harness's loop rule ends the episode). The first prompt
(system prompt, tool schemas, greeting, first user message) must fit in ``rollout.prompt_length``,
else :class:`~tau_env.error.InvalidOptionError` names both numbers.
"""

from __future__ import annotations

import time
from typing import Any
from uuid import uuid4

from tau_env.reference_trainers.rollout import TokenTrajectory
from tau_env.reference_trainers.rollout_policy import TokenPolicy, check_generation
from tau_env.reference_trainers.verl_data import EpisodeSpec, episode_spec
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

import tau_env
from tau_env.error import InfrastructureError, InvalidOptionError
from tau_env.harness.episode import DEFAULT_LOOP_LIMIT

AGENT_LOOP = "tau_agent"

#: The keys of ``reward_extra_info`` (veRL makes one metric column of each; every sample has all).
REWARD_INFO_KEYS = ("acc", "agent_turns", "tool_calls", "tool_errors", "truncated", "agent_tokens")


class VerlTokenPolicy(TokenPolicy):
    """tau_env's agent seat on veRL's token-in/token-out server manager.

    Args:
        tokenizer: The policy model's tokenizer.
        server_manager: veRL's ``LLMServerClient`` (anything with the same async ``generate``).
        sampling_params: veRL's per-sample sampling parameters (temperature, top_p, top_k, logprobs, ...);
            ``logprobs`` is forced on (pi_rollout is needed) and ``max_tokens`` set per turn.
        response_length: veRL's ``rollout.response_length``: the budget of the whole response.
        request_id: veRL's sticky-session id (one per episode, so its turns share a server's prefix cache).
        **settings: :class:`TokenPolicy`'s (``family``, ``chat_template``, ``max_new_tokens``, ...).
    """

    def __init__(
        self,
        tokenizer: Any,
        server_manager: Any,
        *,
        sampling_params: dict[str, Any] | None = None,
        response_length: int,
        request_id: str | None = None,
        **settings: Any,
    ):
        params = dict(sampling_params or {})
        settings.setdefault("temperature", float(params.get("temperature", 1.0)))
        settings.setdefault("top_p", params.get("top_p"))
        super().__init__(tokenizer, **settings)
        self.server_manager = server_manager
        self.sampling_params = params
        self.response_length = int(response_length)
        self.request_id = request_id or uuid4().hex
        self.prompt_length: int | None = None  # the first prompt's length, once known
        self.generate_seconds = 0.0

    async def _generate(self, prompt: list[int], max_new_tokens: int, seed: int) -> tuple[list[int], list[float], str]:
        if self.max_context is None:  # first turn: the response budget starts after the first prompt
            self.prompt_length = len(prompt)
            self.max_context = len(prompt) + self.response_length
            # later turns get this room from TokenPolicy.aact: the template's end of a turn cut at the limit
            end = self._builder.end_of_turn_tokens if self._builder is not None else 0
            if self.response_length <= end:  # no agent token fits: every sample would be cut, nothing trained
                raise InvalidOptionError(
                    f"actor_rollout_ref.rollout.response_length is {self.response_length}: an agent turn needs more "
                    f"than the chat template's {end} end-of-turn tokens; give it room for a whole episode's agent "
                    "turns and env messages (the recipe's overlay sets data.max_response_length)."
                )
            max_new_tokens = min(max_new_tokens, self.max_context - len(prompt) - end)
        max_new_tokens = max(1, min(max_new_tokens, self.max_context - len(prompt)))
        params = {**self.sampling_params, "logprobs": True, "max_tokens": max_new_tokens}
        started = time.perf_counter()
        out = await self.server_manager.generate(
            request_id=self.request_id, prompt_ids=list(prompt), sampling_params=params
        )
        self.generate_seconds += time.perf_counter() - started
        ids = [int(t) for t in out.token_ids]
        if out.log_probs is None:
            raise InvalidOptionError(
                f"The rollout server returned {len(ids)} tokens and no log-probabilities; the IS correction needs "
                "one per token: set actor_rollout_ref.rollout.calculate_log_probs=true."
            )
        if len(out.log_probs) != len(ids):
            raise InfrastructureError(
                f"The rollout server returned {len(ids)} tokens but {len(out.log_probs)} log-probabilities (one per "
                "token was asked for)."
            )
        logprobs = [float(x) for x in out.log_probs]
        check_generation("The rollout server", ids, logprobs, len(self.tokenizer))  # before any of it is trained on
        finish = "length" if len(ids) >= max_new_tokens else (out.stop_reason or "stop")
        return ids, logprobs, finish


_USER_CLIENTS: dict[tuple[Any, ...], Any] = {}


def _llm_user(model: str, base_url: str | None, api_key_env: str, temperature: float) -> Any:
    """An :class:`tau_env.llm.LLMUser` sharing one client per settings in this process."""
    from tau_env.llm import ChatClient, LLMUser, Sampling

    key = (model, base_url, api_key_env, temperature)
    client = _USER_CLIENTS.get(key)
    if client is None:
        client = _USER_CLIENTS[key] = ChatClient(
            model, base_url, api_key_env=api_key_env, sampling=Sampling(temperature=temperature)
        )
    return LLMUser(client)


#: Row tasks already checked in this process (a digest of the env id, its keywords and the task's
#: JSON): a group's G rollouts check once.
_CHECKED_TASKS: set[str] = set()


def make_env(spec: EpisodeSpec) -> tau_env.TauEnv:
    """The env of one RL row: ``tau_env.make(env_id, **make_kwargs)``, playing the row's task JSON when it has one.

    A row's task is checked as a task file is (:func:`tau_env.checker.static_task_problems`): a
    hand-made row whose reference actions name a tool the env lacks would otherwise be played and
    graded 0 without a word.
    """
    import hashlib
    import json

    from tau_env.error import TaskFileError

    kwargs = dict(spec.make_kwargs)
    task = None
    if spec.task is not None:
        task = tau_env.Task.model_validate(spec.task)
        kwargs["tasks"] = [task]
        kwargs.pop("task_ids", None)  # the env's pool of a task file: the row already is one of them
    env = tau_env.make(spec.env_id, **kwargs)
    if task is not None:
        what = [spec.env_id, spec.make_kwargs, spec.task]
        key = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
        if key not in _CHECKED_TASKS:
            from tau_env.checker import first_problem, static_task_problems

            problems = static_task_problems(env.domain, task)
            if problems:
                env.close()
                raise TaskFileError(
                    f"The RL row of task {task.id!r} ({spec.env_id}) embeds a task that cannot be played or graded: "
                    f"{first_problem(problems)} Rebuild the rows with "
                    "`python -m tau_env.reference_trainers.verl_data rl`."
                )
            _CHECKED_TASKS.add(key)
    return env


def to_output(
    traj: TokenTrajectory, prompt_length: int, response_length: int, reward: float, **extra: Any
) -> AgentLoopOutput:
    """VeRL's ``AgentLoopOutput`` of a trajectory: the first prompt, then the response (cut at ``response_length``)."""
    ids, mask, lps = traj.input_ids, traj.agent_mask, traj.rollout_logprobs
    if any(mask[:prompt_length]):
        raise InvalidOptionError(
            f"The first {prompt_length} tokens hold generated tokens: prompt_length must be the first prompt's length."
        )
    response = ids[prompt_length:]
    # the budget ran out: no room for a turn (the policy stopped the agent's part), or a turn cut to fill it
    truncated = bool(traj.info.get("context_overflow")) or len(response) >= response_length
    response_mask = mask[prompt_length:][:response_length]
    info = {
        "acc": float(reward),
        "agent_turns": float(traj.info.get("turns", 0)),
        "tool_calls": float(extra.pop("tool_calls", 0)),
        "tool_errors": float(extra.pop("tool_errors", 0)),
        "truncated": float(truncated),
        "agent_tokens": float(sum(response_mask)),
    }
    return AgentLoopOutput(
        prompt_ids=ids[:prompt_length],
        response_ids=response[:response_length],
        response_mask=response_mask,
        response_logprobs=lps[prompt_length:][:response_length],
        reward_score=float(reward),
        num_turns=len(traj.messages),
        metrics=AgentLoopMetrics(**extra.pop("metrics", {})),
        extra_fields={"reward_extra_info": info, **extra},
    )


#: TauAgentLoop's own settings (tau_agent_loop.yaml), and what veRL itself passes to an agent loop.
LOOP_SETTINGS = (
    "family",
    "chat_template",
    "user",
    "user_model",
    "user_base_url",
    "user_api_key_env",
    "user_temperature",
    "max_new_tokens",
    "loop_limit",
)


def _check_loop_settings(extra: dict[str, Any], *, family: str, user: str, **values: Any) -> None:
    """Refuse a tau_agent loop setting that is a misspelling of one of ours (veRL passes any other key
    through to its base class, which takes anything: ``max_new_token: 64`` would silently run with
    1024), an unknown family or user kind, and a value the loop cannot run with (``values``: any of
    ``user_model``, ``max_new_tokens``, ``loop_limit``, ``user_temperature``).
    """
    import difflib
    import math

    from tau_env.reference_trainers.rollout import FAMILIES

    for key in extra:
        close = difflib.get_close_matches(key, LOOP_SETTINGS, n=1, cutoff=0.6)
        if close:
            raise InvalidOptionError(
                f"tau_agent loop setting {key!r} is not one (did you mean {close[0]!r}?): fix it in "
                "tau_agent_loop.yaml; its settings are " + ", ".join(LOOP_SETTINGS) + "."
            )
    if family not in (*FAMILIES, "auto"):
        raise InvalidOptionError(
            f"tau_agent loop: family must be auto or one of {', '.join(FAMILIES)}, not {family!r}."
        )
    if user not in ("scripted", "llm"):
        raise InvalidOptionError(f"tau_agent loop: user must be 'scripted' or 'llm', not {user!r}.")
    if user == "llm" and "user_model" in values and not values["user_model"]:
        raise InvalidOptionError("tau_agent loop: user 'llm' needs user_model (and user_base_url), the simulator.")

    def whole(name: str, low: int, none_ok: bool = False) -> None:
        v = values.get(name)
        if name not in values or (v is None and none_ok):
            return
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise InvalidOptionError(f"tau_agent loop: {name} must be a whole number of at least {low}, not {v!r}.")

    whole("max_new_tokens", 1)
    whole("loop_limit", 1, none_ok=True)
    t = values.get("user_temperature", 0.0)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise InvalidOptionError(f"tau_agent loop: user_temperature must be a number >= 0, not {t!r}.")


def loop_family(family: str, tokenizer: Any) -> str:
    """The tool template family the loop renders with: ``auto`` is the tokenizer's, as the SFT data
    (``data.tau_family: null``) and the CPU trainers pick it, so SFT and RL see one prompt format.
    """
    if family != "auto":
        return family
    from tau_env.reference_trainers.cpu_common import tokenizer_family

    return tokenizer_family(tokenizer)


@register(AGENT_LOOP)
class TauAgentLoop(AgentLoopBase):
    """veRL agent loop ``tau_agent``: one tau_env episode per sample (see the module's docstring)."""

    def __init__(
        self,
        *args: Any,
        family: str = "auto",
        chat_template: str | None = None,
        user: str = "scripted",
        user_model: str | None = None,
        user_base_url: str | None = None,
        user_api_key_env: str = "OPENAI_API_KEY",
        user_temperature: float = 0.0,
        max_new_tokens: int = 1024,
        loop_limit: int | None = DEFAULT_LOOP_LIMIT,
        **kwargs: Any,
    ):
        _check_loop_settings(
            kwargs,
            family=family,
            user=user,
            user_model=user_model,
            max_new_tokens=max_new_tokens,
            loop_limit=loop_limit,
            user_temperature=user_temperature,
        )
        super().__init__(*args, **kwargs)
        from tau_env.reference_trainers.verl_plugins import require_registered

        require_registered()
        self.family, self.chat_template = loop_family(family, self.tokenizer), chat_template
        self.user_kind, self.user_model, self.user_base_url = user, user_model, user_base_url
        self.user_api_key_env, self.user_temperature = user_api_key_env, float(user_temperature)
        self.max_new_tokens, self.loop_limit = int(max_new_tokens), loop_limit

    def _user(self, spec: EpisodeSpec) -> Any:
        kind = spec.user or self.user_kind
        if kind == "scripted":
            return tau_env.ScriptedUser()
        if kind == "llm":
            if not self.user_model:
                raise InvalidOptionError(
                    "user='llm' needs user_model (and user_base_url) in the tau_agent loop's settings "
                    "(reference_trainers/configs/tau_agent_loop.yaml)."
                )
            return _llm_user(self.user_model, self.user_base_url, self.user_api_key_env, self.user_temperature)
        raise InvalidOptionError(f"user must be 'scripted' or 'llm', got {kind!r}.")

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play the row's episode and return its token trajectory with the grader's reward."""
        spec = episode_spec(kwargs.get("extra_info"))
        env = make_env(spec)
        try:
            return await self._play(env, spec, sampling_params)
        finally:
            env.close()  # one env per sample: its database goes with the episode

    async def _play(self, env: tau_env.TauEnv, spec: EpisodeSpec, sampling_params: dict[str, Any]) -> AgentLoopOutput:
        policy = VerlTokenPolicy(
            self.tokenizer,
            self.server_manager,
            sampling_params=sampling_params,
            response_length=self.rollout_config.response_length,
            family=self.family,
            chat_template=self.chat_template,
            max_new_tokens=self.max_new_tokens,
        )
        started = time.perf_counter()
        result = await tau_env.arun_episode(
            env, policy, self._user(spec), task_id=spec.task_id, seed=spec.seed, loop_limit=self.loop_limit
        )
        # the response ends with the last agent turn: the env's closing messages would only spend
        # response_length (and could mark the sample truncated) without any agent token after them
        traj = policy.trajectories([result], after_last_turn=False)[0]
        prompt_length = policy.prompt_length if policy.prompt_length is not None else len(traj.input_ids)
        if prompt_length > self.rollout_config.prompt_length:
            raise InvalidOptionError(
                f"Task {spec.task_id!r}: the first prompt has {prompt_length} tokens, more than "
                f"actor_rollout_ref.rollout.prompt_length={self.rollout_config.prompt_length} "
                "(data.max_prompt_length); raise both (veRL would cut the prompt's start, the system prompt)."
            )
        total = time.perf_counter() - started
        return to_output(
            traj,
            prompt_length,
            self.rollout_config.response_length,
            result.reward,
            tool_calls=result.tool_calls,
            tool_errors=result.tool_errors,
            metrics={"generate_sequences": policy.generate_seconds, "tool_calls": total - policy.generate_seconds},
            tau_task_id=result.task_id,
            tau_termination=str(result.termination_reason),
        )
