"""Supervised fine-tuning on tau_env teacher trajectories, small enough to read and to run on a CPU.

    python -m tau_env.reference_trainers.sft --model MODEL_DIR --data sft.jsonl --out runs/sft

Data: ``tau-env export-sft --jsonl`` output or a synthesis run (``sft/sft.jsonl``). Each example is
tokenized exactly as the rollout builds an RL sample (the same
:class:`~tau_env.reference_trainers.rollout.TrajectoryBuilder`), with loss on the agent's own turns
only (the env's greeting, the system prompt, user turns and tool results carry none), and trained
with :func:`~tau_env.reference_trainers.objectives.sft_loss`.

CPU choices (see ``cpu_common``): LoRA on the attention and MLP projections (``--lora-rank 0`` for
full fine-tuning), the shared system prompt and tool schemas run once per micro-batch, fp32.
Checkpoints (``OUT/checkpoints/step-N``, plain Hugging Face folders) resume with the same command
(one that trains otherwise, on other data included, is refused: :data:`RESUME_FREE` lists what may change);
``OUT/metrics.jsonl`` and ``OUT/metrics.svg`` record the run. Evaluate a checkpoint with
``tau-env eval --agent-checkpoint OUT/checkpoints/step-N`` (or ``OUT``: its latest checkpoint).
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tau_env.reference_trainers._train_extra  # noqa: F401  (first: one line without torch)
import torch
from tau_env.reference_trainers.checkpoint import (
    END_WAIT_S,
    load_checkpoint,
    open_run_dir,
    prune_checkpoints,
    restore_rng,
    save_checkpoint,
    starting_model,
)
from tau_env.reference_trainers.cpu_common import (
    LORA_TARGETS,
    RESUME_FREE_COMMON,
    MetricsLog,
    Sample,
    add_lora,
    check_device,
    check_family,
    check_finite,
    check_finite_weights,
    check_number,
    check_resume,
    compact_targets,
    config_dict,
    content_digest,
    longest_token_chars,
    matmul_precision,
    max_threads,
    opt,
    predicting_positions,
    prefix_cache,
    prefix_shared_logits,
    progress_bar,
    read_sft_jsonl,
    resolve_device,
    set_threads,
    split_point,
    surely_longer_than,
    svg_plot,
    tokenize_sft_example,
    trainer_main,
    turn_prefixes,
)
from tau_env.reference_trainers.objectives import sft_loss

from tau_env.error import InvalidOptionError
from tau_env.llm.local import quiet_loading

log = logging.getLogger(__name__)


@dataclass
class SFTConfig:
    model: str = opt("", "a Hugging Face model folder, or a checkpoint of these trainers, to start from")
    data: list = opt([], "export-sft JSONL files or synthesis run folders (their sft/sft.jsonl)")
    out: str = opt("runs/sft", "run folder: checkpoints/, metrics.jsonl, metrics.svg")
    epochs: float = opt(1.0, "passes over the data (fractions allowed); ignored when --steps is set")
    steps: int = opt(0, "optimizer steps (0: from --epochs)")
    batch_size: int = opt(4, "examples per optimizer step")
    micro_batch: int = opt(2, "examples per forward pass (they share the prompt prefix); memory vs speed")
    prefix_grad: bool = opt(
        True, "backpropagate through the shared prompt prefix (exact); off: cheaper, the prefix's encoding untrained"
    )
    lr: float = opt(2e-4, "peak learning rate (LoRA; the recipe's 5e-5 is for full fine-tuning of large models)")
    warmup_steps: int = opt(2, "linear warm-up steps, then cosine decay to 10% of --lr")
    weight_decay: float = opt(0.0, "AdamW weight decay")
    grad_clip: float = opt(1.0, "gradient-norm clip (0: off)")
    max_len: int = opt(4096, "examples longer than this many tokens are left out")
    turn_prefixes: int = opt(
        0, "also train on copies of each example cut after its first N trained turns (cheap, short: opening decisions)"
    )
    lora_rank: int = opt(16, "LoRA rank on attention and MLP projections (0: full fine-tuning)")
    lora_alpha: float = opt(32.0, "LoRA alpha (the update is scaled by alpha / rank)")
    lora_layers: int = opt(0, "LoRA on the last N decoder blocks only (0: all); the backward pass stops below them")
    family: str = opt("", "tokenizer family: qwen, smollm2 or hermes (empty: from the tokenizer)")
    domain: str = opt("harbor-bank-v0", "environment the data comes from (recorded for tau-env eval)")
    retrieval: str = opt("", "its retrieval configuration, e.g. none or bm25 (empty: the env's default)")
    max_new_tokens: int = opt(256, "per-turn token cap recorded for evaluation")
    save_every: int = opt(20, "save a checkpoint every N steps, so a killed run resumes there (0: only at the end)")
    keep_checkpoints: int = opt(3, "checkpoints kept in OUT/checkpoints, the newest (older ones are deleted); 0: all")
    seed: int = opt(0, "seed of the data order and LoRA initialisation")
    threads: int = opt(0, "torch CPU threads (0: torch's default)")
    device: str = opt("auto", "where the model trains: auto (a GPU when torch sees one), cpu, cuda[:N]")
    resume: bool = opt(
        True,
        "continue from OUT's latest checkpoint when there is one; --no-resume starts over, deleting the run "
        "there once this one's inputs have loaded",
    )
    progress: bool = opt(True, "show a progress bar")

    def __post_init__(self) -> None:
        check_number(self, "epochs", 0, above=True)
        for name in (
            "steps",
            "warmup_steps",
            "turn_prefixes",
            "lora_rank",
            "lora_layers",
            "save_every",
            "keep_checkpoints",
        ):
            check_number(self, name, 0, integer=True)
        check_number(self, "threads", 0, max_threads(), integer=True)
        for name in ("batch_size", "micro_batch", "max_len", "max_new_tokens"):
            check_number(self, name, 1, integer=True)
        check_number(self, "seed", -(2**63), 2**63 - 1, integer=True)
        check_number(self, "lr", 0, above=True)
        check_number(self, "lora_alpha", 0, above=True)
        check_number(self, "weight_decay", 0)
        check_number(self, "grad_clip", 0)
        check_family(self.family)
        check_device(self.device)


#: The most examples one run may draw (steps x batch size): ~3 years of steps at one example a second.
MAX_EXAMPLES = 10**8

#: Settings a resumed run may change: where, how fast (micro-batches, the prefix's gradient) and how long it
#: runs (more steps continue it), how often it saves. The data are compared by content (``data_digest``),
#: not by path.
RESUME_FREE = RESUME_FREE_COMMON | {"epochs", "data"}


def lr_at(step: int, total: int, cfg: SFTConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    done = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, done))))


def batch_order(n: int, steps: int, batch_size: int, seed: int) -> list[list[int]]:
    """Example indices of every step: shuffled passes over the data, one seed per pass."""
    order: list[int] = []
    epoch = 0
    while len(order) < steps * batch_size:
        idx = list(range(n))
        random.Random(seed * 1_000_003 + epoch).shuffle(idx)
        order += idx
        epoch += 1
    return [order[i * batch_size : (i + 1) * batch_size] for i in range(steps)]


def micro_step(
    model: Any,
    samples: list[Sample],
    total_agent_tokens: int,
    prefix_grad: bool = True,
    prefix: tuple[int, Any] | None = None,
) -> tuple[float, int]:
    """Forward and backward one micro-batch; the loss is summed and divided by the step's agent-token count.

    ``prefix``: ``(length, cache)`` of a prompt prefix the whole step shares, computed once
    (:func:`~tau_env.reference_trainers.cpu_common.prefix_cache`; ``prefix_grad=False`` only).
    The output layer runs only where a trained token is predicted.
    """
    ids = [s.input_ids for s in samples]
    masks = [s.loss_mask for s in samples]
    p, cache = prefix if prefix is not None else (split_point(ids, masks), None)
    width = max(len(i) for i in ids) - p
    suffix_ids = torch.tensor([i[p:] + [0] * (width - len(i) + p) for i in ids])
    suffix_mask = torch.tensor([m[p:] + [0] * (width - len(m) + p) for m in masks])
    keep = predicting_positions(suffix_mask.tolist())
    logits, valid = prefix_shared_logits(model, ids, p, prefix_grad=prefix_grad, cache=cache, keep=keep)
    c_logits, c_ids, c_mask = compact_targets(
        logits, suffix_ids.to(logits.device), (suffix_mask * valid.cpu()).to(logits.device), keep
    )
    loss = sft_loss(c_logits, c_ids, c_mask, reduction="sum") / total_agent_tokens
    loss.backward()
    return float(loss.detach()), int(valid.sum()) + p


def check_env(domain: str, retrieval: str) -> None:
    """Raise :class:`~tau_env.error.Error` unless ``domain`` is a registered environment id and
    ``retrieval`` (when given) one of its retrieval configurations. SFT only records them, so nothing
    is built for the check: no env, no index, no endpoint; the configuration is checked against the
    domain's own list when the domain loads as it is (a domain that needs a data folder or a key not
    given here is checked by eval and GRPO when they start).
    """
    from tau_env.error import Error, InvalidOptionError
    from tau_env.registry import registry

    registry.spec(domain)  # UnknownEnvError, with the registered ids
    if not retrieval:
        return
    try:
        with warnings.catch_warnings():  # what the domain says about seats SFT does not play
            warnings.simplefilter("ignore")
            loaded = registry.load_domain(domain)
    except Error:
        return
    try:
        loaded.system_prompt(retrieval)  # every domain refuses an unknown configuration here, by name
    except InvalidOptionError:
        raise
    except Error:
        return


def train(cfg: SFTConfig) -> Path:
    """Run SFT; returns the last checkpoint's folder. On a GPU its float32 products are TF32
    (:func:`matmul_precision`), the caller's setting back after.
    """
    device = resolve_device(cfg.device)  # a GPU this machine lacks is said before anything is read
    with ExitStack() as stack, matmul_precision(device, tf32=True), quiet_loading(not cfg.progress):
        return _train(cfg, stack)


def _train(cfg: SFTConfig, stack: ExitStack) -> Path:
    if cfg.model:  # recorded absolute: a resume from another folder names the same model, a relative one another
        cfg = replace(cfg, model=os.path.abspath(os.path.expanduser(cfg.model)))
    set_threads(cfg.threads or None)
    torch.manual_seed(cfg.seed % 2**64)  # torch takes 0 .. 2**64 - 1
    random.seed(cfg.seed)
    out = Path(cfg.out)
    if not cfg.data:
        raise InvalidOptionError("SFT needs --data: export-sft JSONL files or synthesis run folders.")
    examples = read_sft_jsonl(cfg.data)  # bad data is named before a model is loaded
    check_env(cfg.domain, cfg.retrieval)  # recorded for eval and GRPO: said now, not when they start
    # each step draws a whole batch: --epochs gives the steps (at least one), steps x batch the draws
    per_step = cfg.epochs * len(examples) * (1 + cfg.turn_prefixes) / cfg.batch_size  # a float: inf for 1e308
    if (cfg.steps or max(1.0, per_step)) * cfg.batch_size > MAX_EXAMPLES:  # drawn up front: it would hang there
        raise InvalidOptionError(
            f"--steps/--epochs ask for more than {MAX_EXAMPLES:.0e} examples (steps x batch size); ask for fewer."
        )
    run = open_run_dir(out, "sft", cfg.resume)  # a file there, a run of another trainer or a live one: said here
    stack.callback(run.close)
    resume_from = run.latest if cfg.resume else None
    if resume_from is not None:
        ckpt = load_checkpoint(resume_from, for_training=True, device=cfg.device)
        model, tokenizer, start = ckpt.model, ckpt.tokenizer, ckpt.step
        family, template = ckpt.info["family"], ckpt.chat_template
    else:
        if not cfg.model:
            raise InvalidOptionError("SFT needs --model: a Hugging Face model folder or a trainer checkpoint.")
        model, tokenizer, family, template = starting_model(cfg.model, cfg.family, device=cfg.device)
        if cfg.lora_rank > 0:
            add_lora(model, cfg.lora_rank, cfg.lora_alpha, layers=cfg.lora_layers)
        start, ckpt = 0, None
    if ckpt is not None and not cfg.model:  # a resume reads no --model: the run's own is recorded again
        cfg = replace(cfg, model=str((ckpt.info.get("config") or {}).get("model") or ""))
    config = {**config_dict(cfg), "data_digest": content_digest(examples)}
    if ckpt is not None:
        check_resume(out, ckpt.info.get("config") or {}, config, RESUME_FREE)
        log.info("resuming %s from step %d (its own weights: --model is read by a new run only)", out, start)
    token_chars = longest_token_chars(tokenizer)
    fitting = [ex for ex in examples if not surely_longer_than(ex, cfg.max_len, token_chars)]
    huge = len(examples) - len(fitting)  # left out without tokenizing
    samples = [tokenize_sft_example(tokenizer, ex, template) for ex in fitting]
    kept = [s for s in samples if len(s.input_ids) <= cfg.max_len and sum(s.loss_mask)]
    too_long = [s for s in samples if len(s.input_ids) > cfg.max_len]
    if too_long or huge:
        lengths = sorted(len(s.input_ids) for s in samples) or [0]
        log.warning(
            "left out %d of %d examples longer than --max-len %d tokens (lengths: median %d, longest %d%s); raise "
            "--max-len to train on them (memory and time grow with it), or use a retrieval configuration with "
            "shorter results",
            len(too_long) + huge,
            len(examples),
            cfg.max_len,
            lengths[len(lengths) // 2],
            lengths[-1],
            f", besides {huge} too long to tokenize" if huge else "",
        )
    untrained = sum(1 for s in samples if len(s.input_ids) <= cfg.max_len and not sum(s.loss_mask))
    if untrained:
        log.warning("left out %d of %d examples with no trained token", untrained, len(samples))
    if cfg.turn_prefixes > 0:
        cut = [c for s in samples for c in turn_prefixes(s, cfg.turn_prefixes) if len(c.input_ids) <= cfg.max_len]
        log.info("added %d copies cut after the first %d trained turns", len(cut), cfg.turn_prefixes)
        kept += cut
    if not kept:
        raise InvalidOptionError(f"No SFT example fits --max-len {cfg.max_len}; raise it.")
    total = cfg.steps or max(1, math.ceil(cfg.epochs * len(kept) / cfg.batch_size))
    if total * cfg.batch_size > MAX_EXAMPLES:  # the turn prefixes added: the exact count now
        raise InvalidOptionError(
            f"--steps/--epochs ask for more than {MAX_EXAMPLES:.0e} examples (steps x batch size); ask for fewer."
        )
    if not cfg.steps and total * cfg.batch_size > 1.25 * cfg.epochs * len(kept):
        log.warning(
            "--epochs %g over %d examples at --batch-size %d: %d step(s) of %d draw %.3g passes, not %g; lower "
            "--batch-size or give --steps",
            cfg.epochs,
            len(kept),
            cfg.batch_size,
            total,
            cfg.batch_size,
            total * cfg.batch_size / len(kept),
            cfg.epochs,
        )
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if ckpt is not None:
        if ckpt.state.get("optimizer"):
            optimizer.load_state_dict(ckpt.state["optimizer"])
        restore_rng(ckpt.state)
    if not cfg.resume:
        run.clear()  # starting over: the run there goes, now that this one's data and model have loaded
    metrics = MetricsLog(out / "metrics.jsonl", resume_step=start, trainer="sft")
    lora = (
        {
            "rank": cfg.lora_rank,
            "alpha": cfg.lora_alpha,
            "targets": list(LORA_TARGETS),
            "layers": cfg.lora_layers,
        }
        if cfg.lora_rank
        else None
    )
    if ckpt is not None:
        lora = ckpt.info.get("lora")
    agent = {
        "domain": cfg.domain,
        "retrieval": cfg.retrieval or None,
        "temperature": 0.0,
        "max_new_tokens": cfg.max_new_tokens,
    }

    def save(step: int) -> Path:
        return save_checkpoint(
            out,
            step,
            model=model,
            tokenizer=tokenizer,
            chat_template=template,
            trainer="sft",
            config=config,
            family=family,
            agent=agent,
            optimizer=optimizer,
            lora=lora,
            keep=cfg.keep_checkpoints,
        )

    order = batch_order(len(kept), total, cfg.batch_size, cfg.seed)
    if start >= total:
        log.warning(
            "%s is at step %d already, %d step(s) asked: nothing to train (raise --steps to go on)", out, start, total
        )
    bar = progress_bar(total, start, "sft", cfg.progress)
    last = resume_from
    model.train()
    for step in range(start, total):
        batch = [kept[i] for i in order[step]]
        for g in optimizer.param_groups:
            g["lr"] = lr_at(step, total, cfg)
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        agent_tokens = sum(sum(s.loss_mask) for s in batch)
        loss, tokens = 0.0, 0
        shared = None
        if not cfg.prefix_grad and len(batch) > cfg.micro_batch:  # one prefix for the whole step
            p = split_point([s.input_ids for s in batch], [s.loss_mask for s in batch])
            if p:
                shared = (p, prefix_cache(model, batch[0].input_ids[:p]))
        for i in range(0, len(batch), cfg.micro_batch):
            part_loss, part_tokens = micro_step(
                model, batch[i : i + cfg.micro_batch], agent_tokens, cfg.prefix_grad, shared
            )
            loss += part_loss
            tokens += part_tokens
        norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
        hint = f"Lower --lr (now {cfg.lr:g}) or raise --warmup-steps."
        check_finite("SFT", step + 1, loss, float(norm), last, hint)
        optimizer.step()
        check_finite_weights("SFT", step + 1, params, last, hint)
        seconds = time.perf_counter() - started
        row = metrics.log(
            step + 1,
            loss=loss,
            lr=optimizer.param_groups[0]["lr"],
            grad_norm=float(norm),
            examples=len(batch),
            tokens=tokens,
            agent_tokens=agent_tokens,
            agent_fraction=agent_tokens / max(1, sum(len(s.input_ids) for s in batch)),
            tokens_per_s=tokens / seconds,
            step_s=seconds,
        )
        bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_s']:.0f}")
        bar.update(1)
        if cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < total:
            last = save(step + 1)
    bar.close()
    if last is None or start < total:
        last = save(total)
    prune_checkpoints(out, cfg.keep_checkpoints, wait=END_WAIT_S)  # what a reader held at the last save goes now
    svg_plot(MetricsLog.read(out / "metrics.jsonl"), ["loss", "grad_norm", "tokens_per_s"], out / "metrics.svg", "SFT")
    return last


def main(argv: list[str] | None = None) -> int:
    return trainer_main(SFTConfig, train, argv, __doc__, "python -m tau_env.reference_trainers.sft")


if __name__ == "__main__":
    raise SystemExit(main())
