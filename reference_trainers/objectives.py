"""The recipe's training objectives in plain PyTorch, written once for every trainer.

SFT is next-token cross-entropy on the agent's own tokens; GRPO is a token-normalised clipped surrogate
with leave-one-out advantages, a truncated importance weight for the rollout engine's mismatch and a
per-rollout mask. The CPU trainers (``sft``, ``grpo``) and the veRL plugins call these functions, so
each equation lives here and nowhere else.

Conventions:
    - Sequences are token ids ``[B, T]``; a GRPO group is ``[G, T]``, one rollout per row, right-padded.
    - ``agent_mask`` (``loss_mask`` for SFT) is 1 exactly on the tokens the agent generated. The system
      prompt, user messages, tool results, the env's greeting, chat-template scaffolding and padding
      stay in the context but are 0 and carry no loss.
    - Log-probability tensors are aligned with ``input_ids``: entry ``t`` is
      ``log p(input_ids[t] | input_ids[:t])``; position 0 has no prediction and holds 0
      (``token_logprobs`` computes this from logits).
    - pi_rollout: what the rollout engine (vLLM, the in-process sampler) reported when it sampled the
      token; pi_old: the trainer's probability before this update; pi_theta: the trainer's current
      probability, the one that carries the gradient.

Masks may be bool or 0/1 integer or float tensors. Bad arguments raise
:class:`tau_env.error.InvalidOptionError` (a ``ValueError``) naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from tau_env.error import InvalidOptionError

__all__ = [
    "MASK_LOG_TOLERANCE",
    "SIGMA_EPS",
    "grpo_loss",
    "group_loo_advantages",
    "loo_advantages",
    "rollout_mask",
    "sft_loss",
    "token_logprobs",
    "truncated_is_weights",
]

SIGMA_EPS = 1e-6
"""sigma(g) at or below this counts as 0 (float noise of equal rewards must not be divided by)."""

MASK_LOG_TOLERANCE = 1e-6
"""Slack of the rollout mask's bounds in log space: float32 rounding of a ratio exactly at a bound keeps it in."""


# ---------------------------------------------------------------------------------------------------------
# argument checks


def _tensor(x: object, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise InvalidOptionError(
            f"{name}: expected a torch.Tensor, got {type(x).__name__}; convert it with torch.tensor"
        )
    return x


def _float_tensor(x: object, name: str, ndim: int) -> Tensor:
    t = _tensor(x, name)
    if t.ndim != ndim:
        raise InvalidOptionError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise InvalidOptionError(f"{name}: expected a floating-point tensor, got {t.dtype}; cast it with .float()")
    return t


def _id_tensor(x: object, name: str, ndim: int) -> Tensor:
    t = _tensor(x, name)
    if t.ndim != ndim:
        raise InvalidOptionError(f"{name}: expected a {ndim}-D tensor of token ids, got shape {tuple(t.shape)}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise InvalidOptionError(f"{name}: expected an integer tensor of token ids, got {t.dtype}; use .long()")
    return t


def _bool_mask(x: object, name: str, shape: torch.Size) -> Tensor:
    t = _tensor(x, name)
    if t.shape != shape:
        raise InvalidOptionError(f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}")
    if t.dtype == torch.bool:
        return t
    if t.is_complex():
        raise InvalidOptionError(f"{name}: expected a bool or 0/1 tensor, got {t.dtype}")
    if t.numel() and not bool(((t == 0) | (t == 1)).all()):
        bad = t[(t != 0) & (t != 1)].flatten()[0].item()
        raise InvalidOptionError(f"{name}: expected only 0 and 1, found {bad!r}; a mask marks agent tokens with 1")
    return t != 0


def _same_shape(t: Tensor, name: str, ref: Tensor, ref_name: str) -> None:
    if t.shape != ref.shape:
        raise InvalidOptionError(
            f"{name}: expected the shape of {ref_name} {tuple(ref.shape)}, got {tuple(t.shape)}; "
            "log-probabilities are aligned token by token with input_ids"
        )


def _same_device(*named: tuple[str, Tensor]) -> None:
    devices = {t.device for _, t in named}
    if len(devices) > 1:
        listing = ", ".join(f"{n} on {t.device}" for n, t in named)
        raise InvalidOptionError(f"tensors on different devices ({listing}); move them to one device")


def _finite_where(t: Tensor, mask: Tensor, name: str) -> None:
    if t.numel() and not bool(torch.isfinite(t.detach()[mask]).all()):
        raise InvalidOptionError(
            f"{name}: non-finite values on agent tokens; every generated token needs a finite log-probability"
        )


def _no_nan_or_plus_inf_where(t: Tensor, mask: Tensor, name: str) -> None:
    if t.numel() and bool((torch.isnan(t.detach()[mask]) | torch.isposinf(t.detach()[mask])).any()):
        raise InvalidOptionError(
            f"{name}: NaN or +inf on agent tokens; a log-probability is finite, or -inf for a token the engine "
            "gave probability 0"
        )


def _number(value: float, name: str, *, low: float, low_inclusive: bool = True) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidOptionError(f"{name}: expected a number, got {value!r}") from None
    if math.isnan(v) or v < low or (v == low and not low_inclusive):
        bound = f">= {low}" if low_inclusive else f"> {low}"
        raise InvalidOptionError(f"{name}: expected a number {bound}, got {value!r}")
    return v


def _finite_mean(t: Tensor) -> float:
    finite = t[torch.isfinite(t)]
    return float(finite.mean()) if finite.numel() else 0.0


def _compute_dtype(*tensors: Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


# ---------------------------------------------------------------------------------------------------------
# log-probabilities and SFT


def token_logprobs(logits: Tensor, input_ids: Tensor, *, temperature: float = 1.0) -> Tensor:
    r"""Per-token log-probabilities of a sequence under the model that produced ``logits``.

    .. math::
        \mathrm{lp}[b, 0] = 0, \qquad
        \mathrm{lp}[b, t] = \frac{z_{b,t-1,\,x_{b,t}}}{\tau} - \log \sum_v \exp\frac{z_{b,t-1,v}}{\tau}
        \quad (t \ge 1)

    with ``z = logits``, ``x = input_ids`` and ``tau = temperature`` (use the sampler's temperature when
    comparing with a rollout engine that reports temperature-scaled log-probabilities). Computed in
    float32 (float64 stays float64); differentiable with respect to ``logits``.

    Args:
        logits: ``[B, T, V]`` floating logits; ``logits[b, t]`` predicts token ``t + 1``.
        input_ids: ``[B, T]`` integer token ids, each in ``[0, V)``.
        temperature: Positive divisor of the logits.

    Returns:
        ``[B, T]`` log-probabilities aligned with ``input_ids``, 0 at position 0.
    """
    logits = _float_tensor(logits, "logits", 3)
    input_ids = _id_tensor(input_ids, "input_ids", 2)
    if input_ids.shape != logits.shape[:2]:
        raise InvalidOptionError(
            f"input_ids: expected shape {tuple(logits.shape[:2])} (the logits' [B, T]), got {tuple(input_ids.shape)}"
        )
    _same_device(("logits", logits), ("input_ids", input_ids))
    tau = _number(temperature, "temperature", low=0.0, low_inclusive=False)
    vocab = logits.shape[-1]
    if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
        raise InvalidOptionError(
            f"input_ids: token ids must lie in [0, {vocab}) (the logits' vocabulary), "
            f"got range [{int(input_ids.min())}, {int(input_ids.max())}]; check the tokenizer matches the model"
        )
    z = logits[:, :-1].to(_compute_dtype(logits))
    if tau != 1.0:
        z = z / tau
    target = input_ids[:, 1:].unsqueeze(-1)
    picked = z.gather(-1, target).squeeze(-1) - torch.logsumexp(z, dim=-1)
    return F.pad(picked, (1, 0), value=0.0)


def sft_loss(logits: Tensor, input_ids: Tensor, loss_mask: Tensor, *, reduction: str = "mean") -> Tensor:
    r"""Token-level cross-entropy on the agent's tokens only.

    .. math::
        L = -\frac{1}{N} \sum_{b} \sum_{t \ge 1} m_{b,t} \, \log \operatorname{softmax}(z_{b,t-1})_{x_{b,t}},
        \qquad N = \sum_{b} \sum_{t \ge 1} m_{b,t}

    Position ``t``'s target ``x[b, t]`` is predicted by ``logits[b, t - 1]`` and counted iff
    ``loss_mask[b, t] == 1``; ``loss_mask[:, 0]`` is ignored (nothing predicts the first token). The
    context (system prompt, user turns, tool results, the greeting) is read but carries no loss, and
    logits at positions whose next token is masked do not enter the loss at all. With ``N = 0`` the
    loss is 0 (still attached to the graph, with zero gradient).

    Args:
        logits: ``[B, T, V]`` floating logits.
        input_ids: ``[B, T]`` integer token ids.
        loss_mask: ``[B, T]``, 1 on agent-generated tokens.
        reduction: ``"mean"`` (divide by ``N``) or ``"sum"`` (no division: for gradient accumulation,
            divide the summed micro-batch losses by the total agent-token count yourself).

    Returns:
        The scalar loss.
    """
    logits = _float_tensor(logits, "logits", 3)
    input_ids = _id_tensor(input_ids, "input_ids", 2)
    if input_ids.shape != logits.shape[:2]:
        raise InvalidOptionError(
            f"input_ids: expected shape {tuple(logits.shape[:2])} (the logits' [B, T]), got {tuple(input_ids.shape)}"
        )
    mask = _bool_mask(loss_mask, "loss_mask", input_ids.shape)
    _same_device(("logits", logits), ("input_ids", input_ids), ("loss_mask", mask))
    if reduction not in ("mean", "sum"):
        raise InvalidOptionError(f"reduction: expected 'mean' or 'sum', got {reduction!r}")
    counted = mask[:, 1:]
    targets = input_ids[:, 1:][counted]
    vocab = logits.shape[-1]
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= vocab):
        raise InvalidOptionError(
            f"input_ids: token ids must lie in [0, {vocab}) (the logits' vocabulary), "
            f"got range [{int(targets.min())}, {int(targets.max())}] on counted tokens"
        )
    if targets.numel() == 0:
        return logits[..., :0].sum()  # 0, on the graph, zero gradient (even where a logit is infinite)
    predictions = logits[:, :-1][counted].to(_compute_dtype(logits))  # [N, V]: only counted positions
    total = F.cross_entropy(predictions, targets, reduction="sum")
    return total / targets.numel() if reduction == "mean" else total


# ---------------------------------------------------------------------------------------------------------
# GRPO pieces


def loo_advantages(rewards: Tensor, *, sigma_eps: float = SIGMA_EPS) -> Tensor:
    r"""Leave-one-out advantages of one group of ``G`` rollouts of the same task.

    .. math::
        b(g) = \frac{1}{G-1} \sum_{h \ne g} R(h), \qquad
        \sigma(g) = \sqrt{\frac{1}{G-1} \sum_{h \ne g} \bigl(R(h) - b(g)\bigr)^2}, \qquad
        A(g) = \begin{cases} \dfrac{R(g) - b(g)}{\sigma(g)} & \sigma(g) > \epsilon_\sigma \\
                             R(g) - b(g) & \text{otherwise (no division)} \end{cases}

    sigma is the *population* standard deviation of the other ``G - 1`` rewards (divisor ``G - 1``, not
    ``G - 2``). It is the spread of those rewards as observed, and it is defined for every ``G >= 2``:
    with ``G = 2`` the one other reward has sigma = 0, so ``A(g) = R(g) - R(other)``, where the sample
    standard deviation would be 0/0. For ``G > 2`` with every sigma(g) > 0 the two readings differ by
    the constant factor ``sqrt((G-2)/(G-1))`` (the learning rate absorbs it); where some sigma(g) = 0
    (no division there) they weigh the rollouts differently: rewards (0, 0, 1) give (-1, -1, 1) here
    and (-0.707, -0.707, 1) with the sample standard deviation. ``sigma_eps`` treats float noise of
    equal rewards as 0.

    A group whose rewards are all equal (including a group of one) gets exactly zero advantages, so it
    contributes zero gradient. The numerators ``R(g) - b(g)`` always sum to 0 over the group; the
    advantages themselves sum to 0 when every sigma(g) is equal (e.g. symmetric reward sets), but not in
    general: rewards (0, 1, 3) give A = (-2, -1/3, 5).

    Args:
        rewards: ``[G]`` terminal rewards of the group, real-valued and finite.
        sigma_eps: sigma(g) at or below this counts as 0.

    Returns:
        ``[G]`` advantages, in the rewards' floating dtype (float32 for integer or bool rewards).
    """
    rewards = _tensor(rewards, "rewards")
    if rewards.ndim != 1 or rewards.numel() == 0:
        raise InvalidOptionError(f"rewards: expected a non-empty 1-D tensor [G], got shape {tuple(rewards.shape)}")
    if rewards.is_complex():
        raise InvalidOptionError(f"rewards: expected real rewards, got {rewards.dtype}")
    eps = _number(sigma_eps, "sigma_eps", low=0.0)
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    r = rewards.detach().to(torch.float64)
    if not bool(torch.isfinite(r).all()):
        raise InvalidOptionError("rewards: expected finite rewards, got NaN or infinity")
    g = r.numel()
    if g == 1 or bool((r == r[0]).all()):
        return torch.zeros_like(r, dtype=out_dtype)
    others = r.unsqueeze(0).expand(g, g)[~torch.eye(g, dtype=torch.bool, device=r.device)].view(g, g - 1)
    baseline = others.mean(dim=1)
    sigma = (others - baseline.unsqueeze(1)).pow(2).mean(dim=1).sqrt()
    centred = r - baseline
    adv = torch.where(sigma > eps, centred / torch.where(sigma > eps, sigma, 1.0), centred)
    return adv.to(out_dtype)


def group_loo_advantages(
    rewards: Tensor, group_ids: Sequence[Hashable] | Tensor, *, sigma_eps: float = SIGMA_EPS
) -> Tensor:
    """:func:`loo_advantages` applied to each group of a flat batch (veRL's ``index``/``uid`` layout).

    Args:
        rewards: ``[N]`` rewards of the whole batch.
        group_ids: ``N`` group keys (a task's rollouts share one); any order.
        sigma_eps: As in :func:`loo_advantages`.

    Returns:
        ``[N]`` advantages; a group of one gets 0.
    """
    rewards = _tensor(rewards, "rewards")
    if rewards.ndim != 1:
        raise InvalidOptionError(f"rewards: expected a 1-D tensor [N], got shape {tuple(rewards.shape)}")
    keys = group_ids.tolist() if isinstance(group_ids, Tensor) else list(group_ids)
    if len(keys) != rewards.numel():
        raise InvalidOptionError(f"group_ids: expected {rewards.numel()} keys (one per reward), got {len(keys)}")
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    out = torch.zeros(rewards.shape, dtype=out_dtype, device=rewards.device)
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    for rows in members.values():
        index = torch.tensor(rows, device=rewards.device)
        out[index] = loo_advantages(rewards[index], sigma_eps=sigma_eps).to(out_dtype)
    return out


def truncated_is_weights(logp_old: Tensor, logp_rollout: Tensor, cap: float) -> Tensor:
    r"""Truncated importance weights for the rollout engine's mismatch, per token, without gradient.

    .. math::
        w_t = \operatorname{stop\_grad}\Bigl(\min\bigl(\tfrac{\pi_{old}(x_t)}{\pi_{rollout}(x_t)},\, C\bigr)\Bigr)
            = \operatorname{stop\_grad}\bigl(\min(\exp(\mathrm{lp}^{old}_t - \mathrm{lp}^{rollout}_t),\, C)\bigr)

    Args:
        logp_old: Trainer log-probabilities before the update, any shape.
        logp_rollout: The rollout engine's log-probabilities, same shape.
        cap: The truncation threshold ``C > 0`` (``inf`` for none).

    Returns:
        The weights, detached, in the inputs' (promoted) dtype.
    """
    logp_old = _tensor(logp_old, "logp_old")
    logp_rollout = _tensor(logp_rollout, "logp_rollout")
    for name, t in (("logp_old", logp_old), ("logp_rollout", logp_rollout)):
        if not t.is_floating_point():
            raise InvalidOptionError(f"{name}: expected a floating-point tensor, got {t.dtype}")
    _same_shape(logp_rollout, "logp_rollout", logp_old, "logp_old")
    _same_device(("logp_old", logp_old), ("logp_rollout", logp_rollout))
    c = _number(cap, "cap", low=0.0, low_inclusive=False)
    return torch.exp(logp_old.detach() - logp_rollout.detach()).clamp(max=c)


def rollout_mask(logp_old: Tensor, logp_rollout: Tensor, agent_mask: Tensor, delta: float) -> Tensor:
    r"""Per-rollout mask for a rollout whose engine probabilities drifted too far from the trainer's.

    .. math::
        \bar r(g) = \exp\Bigl(\frac{1}{|T_g|} \sum_{t \in T_g}
            \log \frac{\pi_{old}(x_{g,t})}{\pi_{rollout}(x_{g,t})}\Bigr), \qquad
        m(g) = \mathbb 1\bigl[\,1 - \delta \le \bar r(g) \le 1 + \delta\,\bigr]

    with ``T_g`` the rollout's agent tokens and the log-ratio **untruncated**: the geometric mean of
    the per-token ratios pi_old / pi_rollout before the cap C of :func:`truncated_is_weights`. The
    mask measures how far the engine drifted from the trainer, and capping each token's ratio first
    would hide the largest drifts (one token at ratio e^20 among 100 at ratio 1 gives exp(0.2) = 1.22,
    masked at delta = 0.1; capped at C = 2, exp(0.007), kept); veRL's ``seq_mean_k1`` rejection
    reads the same untruncated statistic. A sampled token the engine gave log-probability -inf
    (probability 0) makes the ratio infinite: the rollout is masked. Both bounds are included, up to
    :data:`MASK_LOG_TOLERANCE` in log space so that float rounding of a ratio exactly at a bound keeps
    it in. ``delta >= 1`` leaves no lower bound. A rollout without agent tokens has ``log r = 0`` and
    is kept (it contributes no tokens either way).

    Args:
        logp_old: ``[G, T]`` trainer log-probabilities before the update.
        logp_rollout: ``[G, T]`` the rollout engine's log-probabilities.
        agent_mask: ``[G, T]``, 1 on agent-generated tokens.
        delta: The band's half-width, ``>= 0``.

    Returns:
        ``[G]`` of 1.0 (kept) and 0.0 (masked), in the log-probabilities' (promoted) dtype, no gradient.
    """
    logp_old = _float_tensor(logp_old, "logp_old", 2)
    logp_rollout = _float_tensor(logp_rollout, "logp_rollout", 2)
    _same_shape(logp_rollout, "logp_rollout", logp_old, "logp_old")
    mask = _bool_mask(agent_mask, "agent_mask", logp_old.shape)
    _same_device(("logp_old", logp_old), ("logp_rollout", logp_rollout), ("agent_mask", mask))
    d = _number(delta, "delta", low=0.0)
    _finite_where(logp_old, mask, "logp_old")
    _no_nan_or_plus_inf_where(logp_rollout, mask, "logp_rollout")
    log_ratio = torch.where(mask, logp_old.detach().double() - logp_rollout.detach().double(), 0.0)
    mean_log = log_ratio.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    low = math.log(1.0 - d) if d < 1.0 else -math.inf
    high = math.log1p(d)
    kept = (mean_log >= low - MASK_LOG_TOLERANCE) & (mean_log <= high + MASK_LOG_TOLERANCE)
    return kept.to(torch.promote_types(logp_old.dtype, logp_rollout.dtype))


def grpo_loss(
    logp_new: Tensor,
    logp_old: Tensor,
    logp_rollout: Tensor,
    rewards: Tensor,
    agent_mask: Tensor,
    *,
    clip_eps: float = 0.2,
    is_cap: float = 2.0,
    mask_delta: float = 0.1,
) -> tuple[Tensor, dict[str, float]]:
    r"""The GRPO loss of one group of ``G`` rollouts of a task: the negated token-normalised surrogate.

    .. math::
        J = \frac{1}{N} \sum_{g=1}^{G} m(g) \sum_{t \in T_g}
            w_{g,t} \min\bigl(\rho_{g,t} A(g),\ \operatorname{clip}(\rho_{g,t}, 1-\epsilon, 1+\epsilon) A(g)\bigr),
        \qquad \text{loss} = -J

    where ``T_g`` are rollout ``g``'s agent tokens, ``N = sum_g |T_g|`` the group's agent-token count
    (masked rollouts included: masking removes a rollout's terms, it does not reweigh the others),
    ``rho = exp(lp_new - lp_old)`` per token, ``A`` from :func:`loo_advantages`, ``w`` from
    :func:`truncated_is_weights` with ``C = is_cap`` and ``m`` from :func:`rollout_mask` with
    ``delta = mask_delta`` (the mask reads the untruncated ratio pi_old / pi_rollout, not w: see
    :func:`rollout_mask`; a rollout with a -inf engine log-probability on an agent token is masked).
    ``logp_old`` and ``logp_rollout`` are treated as constants. A rollout with ``A = 0`` contributes
    exactly 0 (even with ``is_cap = inf`` and an overflowing weight), so a group whose rewards are all
    equal has exactly zero loss and gradient. Where ``A > 0`` and ``rho`` is past ``1 + eps`` the
    clipped term is the smaller and carries no gradient, also when ``rho`` itself would overflow. Tokens outside
    ``agent_mask`` and masked rollouts get exactly zero gradient even where ``logp_new`` is not finite
    (padding). With ``N = 0`` the loss is 0.

    Args:
        logp_new: ``[G, T]`` current log-probabilities (carry the gradient), e.g. from :func:`token_logprobs`.
        logp_old: ``[G, T]`` log-probabilities before the update (equal to ``logp_new`` on the first
            step over a batch).
        logp_rollout: ``[G, T]`` the rollout engine's log-probabilities (0 off agent tokens is fine).
        rewards: ``[G]`` terminal rewards (on any device: only ``G`` numbers).
        agent_mask: ``[G, T]``, 1 on agent-generated tokens.
        clip_eps: The clip range epsilon, ``>= 0``.
        is_cap: The importance-weight truncation ``C > 0``.
        mask_delta: The rollout mask's half-width delta, ``>= 0``.

    Returns:
        ``(loss, stats)``: the scalar loss and floats for a metrics log: ``loss``, ``reward_mean``,
        ``reward_std``, ``advantage_mean``, ``advantage_std`` (population, over the G rollouts),
        ``zero_signal`` (1.0 when all rewards are equal), ``masked_fraction`` (of rollouts),
        ``clip_fraction`` (of kept agent tokens whose clipped term is the smaller, i.e. has no gradient),
        ``is_weight_mean`` and ``is_truncated_fraction`` (over agent tokens), ``rollout_log_ratio_mean``
        (mean of log pi_old/pi_rollout over agent tokens), ``approx_kl`` (mean of lp_old - lp_new over kept
        agent tokens), ``agent_tokens`` and ``kept_agent_tokens``.
    """
    logp_new = _float_tensor(logp_new, "logp_new", 2)
    logp_old = _float_tensor(logp_old, "logp_old", 2)
    logp_rollout = _float_tensor(logp_rollout, "logp_rollout", 2)
    _same_shape(logp_old, "logp_old", logp_new, "logp_new")
    _same_shape(logp_rollout, "logp_rollout", logp_new, "logp_new")
    mask = _bool_mask(agent_mask, "agent_mask", logp_new.shape)
    rewards = _tensor(rewards, "rewards")
    if rewards.shape != (logp_new.shape[0],):
        raise InvalidOptionError(
            f"rewards: expected shape ({logp_new.shape[0]},) (one reward per rollout row), got {tuple(rewards.shape)}"
        )
    _same_device(("logp_new", logp_new), ("logp_old", logp_old), ("logp_rollout", logp_rollout), ("agent_mask", mask))
    eps = _number(clip_eps, "clip_eps", low=0.0)
    _number(is_cap, "is_cap", low=0.0, low_inclusive=False)
    _number(mask_delta, "mask_delta", low=0.0)
    _finite_where(logp_new, mask, "logp_new")
    _finite_where(logp_old, mask, "logp_old")
    _no_nan_or_plus_inf_where(logp_rollout, mask, "logp_rollout")

    dtype = _compute_dtype(logp_new, logp_old, logp_rollout)
    old = torch.where(mask, logp_old.detach().to(dtype), 0.0)
    roll = torch.where(mask, logp_rollout.detach().to(dtype), 0.0)
    adv = loo_advantages(rewards).to(device=logp_new.device, dtype=dtype)
    kept_rollout = rollout_mask(old, roll, mask, mask_delta).bool()
    weights = truncated_is_weights(old, roll, is_cap)
    keep = mask & kept_rollout.unsqueeze(1)

    # rho = 1 (and no gradient path) wherever a token does not count, so padding never reaches exp().
    log_rho = torch.where(keep, logp_new.to(dtype) - old, 0.0)
    a = adv.unsqueeze(1)
    # With A >= 0 and rho past 1 + eps the clipped term is the smaller: capping log rho a little above
    # log(1 + eps) there changes no value and keeps exp() finite, so its gradient is 0, not 0 * inf.
    rho = torch.exp(torch.where(a >= 0, log_rho.clamp(max=math.log1p(eps) + 1.0), log_rho))
    unclipped = rho * a
    clipped = rho.clamp(1.0 - eps, 1.0 + eps) * a
    surrogate = torch.minimum(unclipped, clipped)
    n_agent = int(mask.sum())
    if n_agent == 0:
        loss = (log_rho * 0.0).sum()
    else:
        # the weight is zeroed (not the product) where a token does not count: an infinite weight there
        # (is_cap = inf) would otherwise send 0 * inf = NaN back through the product's gradient
        counted = torch.where(keep & (a != 0), weights, 0.0)
        loss = -(counted * surrogate).sum() / n_agent

    with torch.no_grad():
        n_keep = int(keep.sum())
        r = rewards.detach().to(torch.float64)
        raw_ratio = torch.exp(old - roll)
        stats = {
            "loss": float(loss.detach()) + 0.0,  # + 0.0: no -0.0 in the log
            "reward_mean": float(r.mean()),
            "reward_std": float(r.std(correction=0)),
            "advantage_mean": float(adv.mean()),
            "advantage_std": float(adv.std(correction=0)),
            "zero_signal": float(bool((r == r[0]).all())),
            "masked_fraction": float((~kept_rollout).double().mean()),
            "clip_fraction": float((keep & (clipped < unclipped)).sum()) / n_keep if n_keep else 0.0,
            "is_weight_mean": float(weights[mask].mean()) if n_agent else 0.0,
            "is_truncated_fraction": float((raw_ratio[mask] > is_cap).double().mean()) if n_agent else 0.0,
            "rollout_log_ratio_mean": _finite_mean((old - roll)[mask]),
            "approx_kl": float(-log_rho[keep].mean()) + 0.0 if n_keep else 0.0,
            "agent_tokens": float(n_agent),
            "kept_agent_tokens": float(n_keep),
        }
    return loss, stats
