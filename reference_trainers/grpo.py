"""GRPO on tau_env episodes, small enough to read and to run on a CPU.

    python -m tau_env.reference_trainers.grpo --model SFT_CHECKPOINT --out runs/grpo --steps 20

Each step:

1. samples ``--tasks-per-step`` tasks and plays ``--group-size`` episodes of each through the tau_env
   harness (:func:`tau_env.aevaluate`): the policy in the agent seat in process
   (:class:`~tau_env.reference_trainers.rollout_policy.LocalTokenPolicy`) or on a vLLM server
   (``--rollout-server``: :class:`~tau_env.reference_trainers.rollout_policy.ServerTokenPolicy`,
   ``--concurrency`` episodes at a time, the trained LoRA loaded into the server after every step
   by :class:`AdapterSync`), either way recording the exact sampled tokens and their
   log-probabilities (pi_rollout), the scripted user in the other seat, the reward from the
   grader (exact match of the final database);
2. for every group, runs the current model over each trajectory's exact token ids: pi_old (no
   gradient; with one update per batch it equals pi_theta, so it is the detached pi_theta) and
   pi_theta, and takes :func:`~tau_env.reference_trainers.objectives.grpo_loss` (leave-one-out
   advantages, the token-normalised clipped surrogate, truncated importance weights against
   pi_rollout, the rollout mask);
3. averages the groups' losses and takes one optimizer step.

A group whose rewards are all equal has zero advantage and contributes exactly zero gradient, so
by default its forward pass is skipped (``--no-skip-zero-signal`` runs it anyway). Trajectories
of every step are kept in ``OUT/rollouts.jsonl``; ``OUT/metrics.jsonl`` and ``OUT/metrics.svg``
log reward, advantage statistics, the masked fraction and tokens/s; checkpoints resume as in ``sft``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import random
import secrets
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tau_env.reference_trainers._train_extra  # noqa: F401  (first: one line without torch)
import torch
from tau_env.reference_trainers.checkpoint import (
    END_WAIT_S,
    STEP_NAME,
    find_checkpoint,
    hold_checkpoint,
    load_checkpoint,
    open_run_dir,
    prune_checkpoints,
    read_info,
    restore_rng,
    resumed_config,
    save_checkpoint,
    starting_model,
)
from tau_env.reference_trainers.cpu_common import (
    LORA_TARGETS,
    RESUME_FREE_COMMON,
    MetricsLog,
    add_lora,
    check_device,
    check_family,
    check_finite,
    check_finite_weights,
    check_number,
    check_resume,
    config_dict,
    content_digest,
    matmul_precision,
    max_threads,
    opt,
    pad_rows,
    prefix_shared_logits,
    progress_bar,
    resolve_device,
    save_peft_adapter,
    set_threads,
    split_point,
    svg_plot,
    trainer_main,
)
from tau_env.reference_trainers.objectives import grpo_loss, token_logprobs
from tau_env.reference_trainers.rollout import TokenTrajectory
from tau_env.reference_trainers.rollout_policy import LocalTokenPolicy, ServerTokenPolicy, TokenPolicy

import tau_env
from tau_env.error import InfrastructureError, InvalidOptionError
from tau_env.llm.local import ReusedPrefixModel, quiet_loading

log = logging.getLogger(__name__)


@dataclass
class GRPOConfig:
    model: str = opt("", "a Hugging Face model folder, or a checkpoint of these trainers (e.g. SFT's), to start from")
    out: str = opt("runs/grpo", "run folder: checkpoints/, metrics.jsonl, metrics.svg, rollouts.jsonl")
    domain: str = opt("harbor-bank-v0", "environment id the episodes run on")
    tasks: str = opt("", "a task file to train on (empty: the environment's own tasks)")
    task_ids: list = opt([], "train only on these task ids (empty: every task of the pool)")
    retrieval: str = opt(
        "",
        "retrieval configuration, e.g. none (a short prompt, no knowledge tools) or bm25; empty: the starting "
        "checkpoint's (as its SFT was trained), else the environment's default",
    )
    max_steps: int = opt(
        40, "env step budget per episode (agent and user turns and tool calls; a composite task takes ~30)"
    )
    steps: int = opt(10, "optimizer steps")
    tasks_per_step: int = opt(2, "tasks sampled per step (the recipe: 64)")
    group_size: int = opt(4, "rollouts per task, G (the recipe: 8)")
    temperature: float = opt(1.0, "rollout sampling temperature")
    max_new_tokens: int = opt(96, "most tokens of one agent turn")
    max_context: int = opt(4096, "longest sequence an episode may reach (prompt and generation)")
    lr: float = opt(2e-5, "learning rate (LoRA on a small model; the recipe's 2e-6 is for full fine-tuning)")
    grad_clip: float = opt(1.0, "gradient-norm clip (0: off)")
    lora_rank: int = opt(16, "LoRA rank on attention and MLP projections (0: full fine-tuning)")
    lora_alpha: float = opt(32.0, "LoRA alpha (the update is scaled by alpha / rank)")
    lora_layers: int = opt(0, "LoRA on the last N decoder blocks only (0: all); the backward pass stops below them")
    clip_eps: float = opt(0.2, "PPO clip range epsilon")
    is_cap: float = opt(2.0, "truncation C of the importance weight pi_old / pi_rollout")
    mask_delta: float = opt(0.1, "rollout mask: keep a rollout iff its geometric-mean weight is in [1-d, 1+d]")
    micro_batch: int = opt(4, "rollouts per forward pass (one group's rollouts share their prompt prefix)")
    prefix_grad: bool = opt(
        True, "backpropagate through the shared prompt prefix (exact); off: cheaper, the prefix's encoding untrained"
    )
    skip_zero_signal: bool = opt(True, "skip the forward pass of groups whose rewards are all equal (zero gradient)")
    rollout_server: str = opt(
        "",
        "API root of a vLLM server (e.g. http://127.0.0.1:8000/v1) serving --model with LoRA enabled, for the "
        "rollouts; empty: rollouts in process. The trained LoRA goes to it after every step",
    )
    rollout_model: str = opt("", "the name the rollout server serves --model under (empty: its first model)")
    concurrency: int = opt(8, "episodes in flight with a rollout server (in process: one at a time)")
    rollout_seed: bool = opt(
        True, "send each turn's seed to the rollout server (off for vLLM's CPU build, which crashes on seeded sampling)"
    )
    server_timeout: float = opt(600.0, "seconds one request to the rollout server may take")
    max_failed_fraction: float = opt(
        0.5,
        "episodes that fail on infrastructure (a rollout server's error, a generation that crashed) are left out of "
        "the step with a warning; the run stops, before the step's update, when more than this share of a step's "
        "episodes failed (0: at the first)",
    )
    family: str = opt("", "tokenizer family: qwen, smollm2 or hermes (empty: the checkpoint's, or from the tokenizer)")
    save_every: int = opt(5, "save a checkpoint every N steps (and at the end)")
    keep_checkpoints: int = opt(3, "checkpoints kept in OUT/checkpoints, the newest (older ones are deleted); 0: all")
    seed: int = opt(0, "seed of task sampling, rollouts and LoRA initialisation")
    threads: int = opt(0, "torch CPU threads (0: torch's default)")
    device: str = opt("auto", "where the model trains and rolls out: auto (a GPU when torch sees one), cpu, cuda[:N]")
    resume: bool = opt(
        True,
        "continue from OUT's latest checkpoint when there is one; --no-resume starts over, deleting the run "
        "there once this one's inputs have loaded",
    )
    progress: bool = opt(True, "show a progress bar")

    def __post_init__(self) -> None:
        check_number(self, "threads", 0, max_threads(), integer=True)
        for name in ("lora_rank", "lora_layers", "save_every", "keep_checkpoints"):
            check_number(self, name, 0, integer=True)
        for name in ("max_steps", "steps", "tasks_per_step", "max_new_tokens", "max_context", "micro_batch"):
            check_number(self, name, 1, integer=True)
        check_number(self, "concurrency", 1, integer=True)
        check_number(self, "group_size", 2, integer=True)  # leave-one-out needs another rollout of the task
        check_number(self, "seed", -(2**63), 2**63 - 1, integer=True)
        check_number(self, "temperature", 0)
        check_number(self, "lr", 0, above=True)
        check_number(self, "lora_alpha", 0, above=True)
        check_number(self, "grad_clip", 0)
        check_number(self, "clip_eps", 0, 1, above=True, below=True)
        check_number(self, "is_cap", 0, above=True)
        check_number(self, "mask_delta", 0)
        check_number(self, "server_timeout", 0, above=True)
        check_number(self, "max_failed_fraction", 0, 1)
        check_family(self.family)
        check_device(self.device)


def make_kwargs(cfg: GRPOConfig) -> dict[str, Any]:
    """``tau_env.make`` keywords of the run's environment."""
    kw: dict[str, Any] = {"max_steps": cfg.max_steps}
    if cfg.retrieval:
        kw["retrieval"] = cfg.retrieval
    if cfg.tasks:
        kw["tasks"] = cfg.tasks
    return kw


#: Settings a resumed run may change: where and how fast the rollouts and updates run (micro-batches, the
#: prefix's gradient), how long (more steps continue it), how often it saves. The task file is compared by
#: content (``tasks_digest``), not by path.
RESUME_FREE = RESUME_FREE_COMMON | {
    "concurrency",
    "rollout_server",
    "rollout_model",
    "rollout_seed",
    "server_timeout",
    "max_failed_fraction",
    "skip_zero_signal",
    "tasks",
}


def tasks_digest(tasks: str) -> str:
    """A digest of the task file's content (``""`` for the environment's own tasks)."""
    path = Path(tasks) if tasks else None
    return content_digest(path.read_bytes()) if path is not None and path.is_file() else tasks


def task_pool(cfg: GRPOConfig) -> list[str]:
    """The task ids training draws from, checked now (the task file loads, its tasks can start, each
    of ``task_ids`` is one of them): a task that cannot be played is said before the run starts, not
    at the step that draws it.
    """
    env = tau_env.make(cfg.domain, **make_kwargs(cfg))
    try:
        for task_id in cfg.task_ids:
            env.domain.task(task_id)  # UnknownTaskError, with the closest id
        ids = list(dict.fromkeys(cfg.task_ids))  # a task named twice is one task: drawn as often as any other
        if len(ids) < len(cfg.task_ids):
            log.warning(
                "--task-ids names %d task(s) more than once; each is drawn as one", len(cfg.task_ids) - len(ids)
            )
        return ids or [t.id for t in env.domain.tasks]
    finally:
        env.close()


class RolloutsFailed(InfrastructureError):
    """Too many of a step's episodes failed on infrastructure (``max_failed_fraction``)."""


async def rollouts(
    policy: TokenPolicy, cfg: GRPOConfig, task_ids: list[str], seed: int
) -> tuple[list[TokenTrajectory], int]:
    """``group_size`` episodes of each task through the harness, as token trajectories with rewards, and
    how many episodes failed on infrastructure.

    An episode that failed on infrastructure (the harness tried it again, then recorded
    ``infrastructure_error`` with reward 0: a server that answered with an error, timed out or sent a
    malformed completion) is no sample of the policy: it is left out, with a warning naming the first
    error.

    Raises:
        RolloutsFailed: More than ``cfg.max_failed_fraction`` of the episodes failed so (all of them
            always counts), with the first error.
    """
    run = await tau_env.aevaluate(
        cfg.domain,
        policy,
        tau_env.ScriptedUser,
        task_ids=task_ids,
        trials=cfg.group_size,
        seed=seed,
        # in process, generation is one at a time anyway, and one episode at a time keeps runs reproducible
        concurrency=cfg.concurrency if isinstance(policy, ServerTokenPolicy) else 1,
        **make_kwargs(cfg),
    )
    trajs = policy.trajectories(run.results, unplayed="skip")  # every builder handed out (none left over)
    failed = [r for r in run.results if str(r.termination_reason) == "infrastructure_error"]
    if failed:
        first = failed[0].error or "no message"
        share = len(failed) / len(run.results)
        if share > cfg.max_failed_fraction or len(failed) == len(run.results):
            raise RolloutsFailed(
                f"{len(failed)} of {len(run.results)} episodes failed on infrastructure (more than "
                f"--max-failed-fraction {cfg.max_failed_fraction:g}); the first: {first}"
            )
        log.warning("%d of %d episodes failed on infrastructure and are left out; the first: %s", len(failed),
                    len(run.results), first)  # fmt: skip
        trajs = [t for t in trajs if t.info.get("termination_reason") != "infrastructure_error"]
    if len(trajs) + len(failed) < len(run.results):
        log.warning(
            "%d of %d episodes ended before the agent's first turn (--max-steps %d): left out",
            len(run.results) - len(trajs) - len(failed),
            len(run.results),
            cfg.max_steps,
        )
    if run.results and all(str(r.termination_reason) == "max_steps" for r in run.results):
        log.warning(
            "every episode ran out of --max-steps %d before it ended (graded unfinished); raise --max-steps if "
            "the tasks need more (a composite task takes ~30)",
            cfg.max_steps,
        )
    return trajs, len(failed)


class AdapterSync:
    """Keeps a vLLM rollout server on the trainer's weights: after each optimizer step the LoRA
    factors are written as a PEFT adapter (``OUT/adapters/step-N``) and loaded into the server
    under a new name (``POST /v1/load_lora_adapter``; the previous one is unloaded), which the next
    rollouts request. The server must be started with ``--enable-lora --max-lora-rank R`` and
    ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; it serves the starting model, whose weights the
    trainer's frozen base holds.

    Args:
        base_url: The server's API root (``http://HOST:PORT/v1``).
        out: The run folder (adapters are written under ``out/adapters``, the last two kept).
        api_key: Sent as a bearer token when given (``OPENAI_API_KEY``).
        timeout: Seconds per request.
    """

    def __init__(self, base_url: str, out: Path, *, api_key: str | None = None, timeout: float = 300.0):
        self.base_url, self.out, self.api_key, self.timeout = base_url.rstrip("/"), out, api_key, timeout
        self.current: str | None = None
        self._current_path: Path | None = None
        # vLLM refuses to load a name it has loaded already: a rerun against the same server (a resumed or
        # extended run) gets names of its own
        self.prefix = f"tau-grpo-{secrets.token_hex(3)}"

    def _request(self, path: str, body: dict[str, Any] | None = None) -> bytes:
        import urllib.error
        import urllib.request

        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as reply:
                return reply.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode(errors="replace")
            hint = ""
            if path.endswith("lora_adapter") and e.code in (404, 405):  # the endpoint is not there
                hint = (
                    " (start vLLM with --enable-lora --max-lora-rank >= the LoRA rank and "
                    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
                )
            raise InfrastructureError(f"{self.base_url}{path}: HTTP {e.code}: {detail}{hint}") from e
        except (urllib.error.URLError, OSError) as e:
            raise InfrastructureError(f"{self.base_url}{path}: {e}") from e

    def served_models(self) -> list[str]:
        """The models the server lists (``GET /v1/models``), the served model first."""
        try:
            names = [str(m["id"]) for m in json.loads(self._request("/models"))["data"]]
        except (ValueError, KeyError, TypeError) as e:
            raise InfrastructureError(f"{self.base_url}/models lists no model ({e})") from e
        if not names:
            raise InfrastructureError(f"{self.base_url}/models lists no model")
        return names

    def served_model(self, name: str = "") -> str:
        """``name`` if the server lists it (else an error naming what it serves); without a name the
        first model it lists. Either way the server is asked.
        """
        names = self.served_models()
        if name and name not in names:
            raise InfrastructureError(
                f"{self.base_url} serves {', '.join(names[:5])}, not --rollout-model {name!r}; pass one of those "
                "(vLLM: --served-model-name)"
            )
        return name or names[0]

    def push(self, model: Any, step: int) -> str:
        """Write the LoRA of ``step`` and load it into the server; returns the name to request."""
        name = f"{self.prefix}-step-{step}"
        path = save_peft_adapter(model, self.out / "adapters" / f"step-{step:06d}").resolve()
        self._request("/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        previous, self.current = self.current, name
        previous_path, self._current_path = self._current_path, path
        if previous is not None and previous != name:
            try:
                self._request("/unload_lora_adapter", {"lora_name": previous})
            except InfrastructureError as e:  # the new one is loaded: a leftover costs the server memory only
                log.warning("could not unload %s: %s", previous, e)
        # the adapter served now and the one before it stay (a server may reread an adapter from disk); the
        # rest go, leftovers of a run that stopped after steps it had not saved included
        for old in (self.out / "adapters").iterdir():
            if STEP_NAME.fullmatch(old.name) and old.resolve() not in (path, previous_path):
                shutil.rmtree(old, ignore_errors=True)
        return name


def group_logprobs(
    model: Any, group: list[TokenTrajectory], micro_batch: int, prefix_grad: bool = True
) -> tuple[torch.Tensor, int]:
    """pi_theta of each trajectory's tokens ``[G, T]`` (0 on the shared prefix, run once per micro-batch,
    and after a trajectory's last agent token: what the env added after it predicts nothing trained).
    """
    width = max(len(t.input_ids) for t in group)
    rows, tokens = [], 0
    for i in range(0, len(group), micro_batch):
        part = group[i : i + micro_batch]
        ends = [max((k + 1 for k, m in enumerate(t.agent_mask) if m), default=1) for t in part]
        ids = [t.input_ids[:end] for t, end in zip(part, ends)]
        p = split_point(ids, [t.agent_mask[:end] for t, end in zip(part, ends)])
        logits, valid = prefix_shared_logits(model, ids, p, prefix_grad=prefix_grad)
        suffix = torch.tensor(
            [x[p:] + [0] * (logits.shape[1] - len(x) + p) for x in ids], dtype=torch.long, device=logits.device
        )
        lp = token_logprobs(logits, suffix) * valid
        lp = torch.nn.functional.pad(lp, (p, width - p - lp.shape[1]))  # back to whole-sequence positions
        rows.append(lp)
        tokens += int(valid.sum()) + p
    return torch.cat(rows), tokens


def group_loss(model: Any, group: list[TokenTrajectory], cfg: GRPOConfig) -> tuple[torch.Tensor, dict[str, float], int]:
    """The GRPO loss of one task's rollouts on the current model (differentiable), its stats and tokens processed."""
    width = max(len(t.input_ids) for t in group)
    logp_new, tokens = group_logprobs(model, group, cfg.micro_batch, cfg.prefix_grad)
    logp_old = logp_new.detach()  # one optimizer step per batch of rollouts: pi_old is pi_theta before the step
    logp_rollout = pad_rows([t.rollout_logprobs for t in group], width).to(logp_new.device)
    mask = pad_rows([t.agent_mask for t in group], width, dtype=torch.long).to(logp_new.device)
    rewards = torch.tensor([float(t.reward or 0.0) for t in group])
    loss, stats = grpo_loss(
        logp_new,
        logp_old,
        logp_rollout,
        rewards,
        mask,
        clip_eps=cfg.clip_eps,
        is_cap=cfg.is_cap,
        mask_delta=cfg.mask_delta,
    )
    return loss, stats, tokens


def _mean(rows: list[dict[str, float]], key: str) -> float | None:
    vals = [r[key] for r in rows if key in r]
    return sum(vals) / len(vals) if vals else None


def train(cfg: GRPOConfig) -> Path:
    """Run GRPO; returns the last checkpoint's folder. On a GPU its float32 products are TF32
    (:func:`matmul_precision`), the caller's setting back after.
    """
    device = resolve_device(cfg.device)  # a GPU this machine lacks is said before anything is read
    with ExitStack() as stack, matmul_precision(device, tf32=True), quiet_loading(not cfg.progress):
        return _train(cfg, stack)


def _train(cfg: GRPOConfig, stack: ExitStack) -> Path:
    if cfg.model:  # recorded absolute: a resume from another folder names the same model, a relative one another
        cfg = dataclasses.replace(cfg, model=os.path.abspath(os.path.expanduser(cfg.model)))
    resumed = resumed_config(cfg.out, "grpo") if cfg.resume else {}
    if not cfg.retrieval and resumed.get("retrieval"):  # the run resumed plays as it played (--model may be gone)
        cfg = dataclasses.replace(cfg, retrieval=str(resumed["retrieval"]))
    if not cfg.retrieval and cfg.model:  # the prompt and tools the starting checkpoint was trained with
        trained = {}
        if find_checkpoint(cfg.model) is not None:
            with hold_checkpoint(cfg.model) as lease:  # a live run's latest, held while it is read
                trained = read_info(lease.path).get("agent") or {}
        if trained.get("retrieval"):
            cfg = dataclasses.replace(cfg, retrieval=str(trained["retrieval"]))
    set_threads(cfg.threads or None)
    torch.manual_seed(cfg.seed % 2**64)  # torch takes 0 .. 2**64 - 1
    out = Path(cfg.out)
    pool = task_pool(cfg)  # a bad task file is said before the folder or a model is touched
    run = open_run_dir(out, "grpo", cfg.resume)  # a file there, a run of another trainer or a live one: said here
    stack.callback(run.close)
    resume_from = run.latest if cfg.resume else None
    ckpt = None
    if resume_from is not None:
        ckpt = load_checkpoint(resume_from, for_training=True, device=cfg.device)
        model, tokenizer, start = ckpt.model, ckpt.tokenizer, ckpt.step
        family, template, lora = ckpt.info["family"], ckpt.chat_template, ckpt.info.get("lora")
    else:
        if not cfg.model:
            raise InvalidOptionError("GRPO needs --model: a Hugging Face model folder or a trainer checkpoint.")
        start = 0
        model, tokenizer, family, template = starting_model(cfg.model, cfg.family, device=cfg.device)
        lora = None
        if cfg.lora_rank > 0:
            add_lora(model, cfg.lora_rank, cfg.lora_alpha, layers=cfg.lora_layers)
            lora = {
                "rank": cfg.lora_rank,
                "alpha": cfg.lora_alpha,
                "targets": list(LORA_TARGETS),
                "layers": cfg.lora_layers,
            }
    if ckpt is not None and not cfg.model:  # a resume reads no --model: the run's own is recorded again
        cfg = dataclasses.replace(cfg, model=str((ckpt.info.get("config") or {}).get("model") or ""))
    config = {**config_dict(cfg), "tasks_digest": tasks_digest(cfg.tasks)}
    if ckpt is not None:
        check_resume(out, ckpt.info.get("config") or {}, config, RESUME_FREE)
        log.info("resuming %s from step %d (its own weights: --model is read by a new run only)", out, start)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    if ckpt is not None:
        if ckpt.state.get("optimizer"):
            optimizer.load_state_dict(ckpt.state["optimizer"])
        restore_rng(ckpt.state)
    sync, served = None, ""
    if cfg.rollout_server:
        if lora is None:
            raise InvalidOptionError(
                "--rollout-server sends the trained weights to the server as a LoRA adapter: use --lora-rank > 0."
            )
        sync = AdapterSync(
            cfg.rollout_server, out, api_key=os.environ.get("OPENAI_API_KEY") or None, timeout=cfg.server_timeout
        )
        served = sync.served_model(cfg.rollout_model)  # the server answers before anything is deleted
    if not cfg.resume:
        run.clear()  # starting over: the run there goes, now that this one's model and server are there
    metrics = MetricsLog(out / "metrics.jsonl", resume_step=start, trainer="grpo")
    saved = out / "rollouts.jsonl"  # a resumed run redoes the steps after its checkpoint
    kept = [r for r in MetricsLog.read(saved) if r["step"] <= start] if start and saved.is_file() else []
    saved.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    agent = {
        "domain": cfg.domain,
        "retrieval": cfg.retrieval or None,
        "max_steps": cfg.max_steps,
        "temperature": 0.0,
        "max_new_tokens": cfg.max_new_tokens,
    }
    settings = {
        "family": family,
        "chat_template": template,
        "temperature": cfg.temperature,
        "max_new_tokens": cfg.max_new_tokens,
        "max_context": cfg.max_context,
    }
    generator = None
    if sync is not None:
        policy: TokenPolicy = ServerTokenPolicy(
            cfg.rollout_server,
            served,
            tokenizer,
            api_key=sync.api_key,
            timeout=cfg.server_timeout,
            send_seed=cfg.rollout_seed,
            **settings,
        )
        if start:  # a resumed run's LoRA is not the starting model's
            policy.model = sync.push(model, start)
    else:
        generator = ReusedPrefixModel(model)  # rollouts reuse the shared prompt's keys and values
        policy = LocalTokenPolicy(generator, tokenizer, **settings)

    def save(step: int) -> Path:
        return save_checkpoint(
            out,
            step,
            model=model,
            tokenizer=tokenizer,
            chat_template=template,
            trainer="grpo",
            config=config,
            family=family,
            agent=agent,
            optimizer=optimizer,
            lora=lora,
            keep=cfg.keep_checkpoints,
        )

    if start >= cfg.steps:
        log.warning(
            "%s is at step %d already, --steps %d: nothing to train (raise --steps to go on)", out, start, cfg.steps
        )
    bar = progress_bar(cfg.steps, start, "grpo", cfg.progress)
    last = resume_from
    for step in range(start, cfg.steps):
        rng = random.Random(cfg.seed * 1_000_003 + step)  # the step's tasks do not depend on resuming
        chosen = rng.sample(pool, min(cfg.tasks_per_step, len(pool)))
        t0 = time.perf_counter()
        try:
            trajs, failed = asyncio.run(rollouts(policy, cfg, chosen, seed=cfg.seed * 1_000_003 + step))
        except RolloutsFailed as e:  # before the step's update: the run resumes from its last checkpoint
            raise RolloutsFailed(f"step {step + 1}: {e}") from None
        t1 = time.perf_counter()
        if trajs and all(t.info.get("context_overflow") and not t.num_agent_tokens for t in trajs):
            log.warning(
                "step %d: every episode reached --max-context %d before the agent's first turn (the prompt alone "
                "is longer): nothing to train on; raise --max-context",
                step + 1,
                cfg.max_context,
            )
        elif any(t.info.get("context_overflow") for t in trajs):
            log.warning(
                "step %d: %d of %d episodes reached --max-context %d before they ended (the agent stopped there and "
                "the episode was graded as it stood); raise --max-context if the tasks need longer episodes",
                step + 1,
                sum(bool(t.info.get("context_overflow")) for t in trajs),
                len(trajs),
                cfg.max_context,
            )
        with (out / "rollouts.jsonl").open("a", encoding="utf-8") as f:
            for t in trajs:
                f.write(json.dumps({"step": step + 1, **t.to_dict()}) + "\n")
        groups: dict[str, list[TokenTrajectory]] = {}
        for t in trajs:
            groups.setdefault(t.task_id, []).append(t)
        model.train()
        optimizer.zero_grad(set_to_none=True)
        stats, tokens, trained = [], 0, 0
        for group in groups.values():
            rewards = [float(t.reward or 0.0) for t in group]
            if (cfg.skip_zero_signal and len(set(rewards)) == 1) or len(group) < 2:
                stats.append({"reward_mean": sum(rewards) / len(rewards), "zero_signal": 1.0})
                continue
            loss, s, n = group_loss(model, group, cfg)
            (loss / len(groups)).backward()
            stats.append(s)
            tokens += n
            trained += 1
        norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
        check_finite("GRPO", step + 1, _mean(stats, "loss"), float(norm), last, f"Lower --lr (now {cfg.lr:g}).")
        if trained:
            optimizer.step()
            check_finite_weights("GRPO", step + 1, params, last, f"Lower --lr (now {cfg.lr:g}).")
            if sync is not None:  # the server rolls out with the new weights from now on
                policy.model = sync.push(model, step + 1)
            else:
                generator.clear()  # the weights changed: cached keys and values are stale
        t2 = time.perf_counter()
        row = metrics.log(
            step + 1,
            reward=sum(float(t.reward or 0.0) for t in trajs) / max(1, len(trajs)),
            loss=_mean(stats, "loss"),
            advantage_mean=_mean(stats, "advantage_mean"),
            advantage_std=_mean(stats, "advantage_std"),
            zero_signal_groups=sum(s.get("zero_signal", 0.0) for s in stats),
            groups=len(groups),
            masked_fraction=_mean(stats, "masked_fraction"),
            clip_fraction=_mean(stats, "clip_fraction"),
            is_weight_mean=_mean(stats, "is_weight_mean"),
            approx_kl=_mean(stats, "approx_kl"),
            grad_norm=float(norm),
            agent_tokens=sum(t.num_agent_tokens for t in trajs),
            episodes=len(trajs),
            failed_episodes=failed,
            context_overflows=sum(bool(t.info.get("context_overflow")) for t in trajs),
            rollout_s=t1 - t0,
            train_s=t2 - t1,
            rollout_tokens_per_s=sum(t.num_agent_tokens for t in trajs) / max(1e-9, t1 - t0),
            train_tokens_per_s=tokens / max(1e-9, t2 - t1) if tokens else None,
        )
        bar.set_postfix(reward=f"{row['reward']:.2f}", groups=f"{trained}/{len(groups)}")
        bar.update(1)
        if cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < cfg.steps:
            last = save(step + 1)
    bar.close()
    if last is None or start < cfg.steps:
        last = save(cfg.steps)
    prune_checkpoints(out, cfg.keep_checkpoints, wait=END_WAIT_S)  # what a reader held at the last save goes now
    rows = MetricsLog.read(out / "metrics.jsonl")
    svg_plot(rows, ["reward", "advantage_std", "masked_fraction", "loss"], out / "metrics.svg", "GRPO")
    return last


def main(argv: list[str] | None = None) -> int:
    return trainer_main(GRPOConfig, train, argv, __doc__, "python -m tau_env.reference_trainers.grpo")


if __name__ == "__main__":
    raise SystemExit(main())
