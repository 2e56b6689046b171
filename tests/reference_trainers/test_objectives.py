"""The objectives against values worked out by hand, and their invariants as hypothesis properties."""

from __future__ import annotations

import math
import statistics

import pytest

torch = pytest.importorskip("torch")

from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tau_env.reference_trainers.objectives import (  # noqa: E402
    group_loo_advantages,
    grpo_loss,
    loo_advantages,
    rollout_mask,
    sft_loss,
    token_logprobs,
    truncated_is_weights,
)

from tau_env.error import InvalidOptionError  # noqa: E402

LN = math.log
FAST = settings(max_examples=60, deadline=None)


def close(actual, expected, tol=1e-6):
    expected = torch.as_tensor(expected, dtype=torch.float64)
    return torch.allclose(torch.as_tensor(actual).detach().double(), expected, atol=tol, rtol=tol)


# ---------------------------------------------------------------------------------------------------------
# token_logprobs and sft_loss by hand

# One sequence, V = 3, ids x = [2, 1, 0].
# logits[0] = [0, 0, 0]       -> softmax (1/3, 1/3, 1/3); it predicts x[1] = 1: log(1/3)
# logits[1] = [0, ln 2, 0]    -> exp = (1, 2, 1), softmax (1/4, 1/2, 1/4); predicts x[2] = 0: log(1/4)
# logits[2] = anything        -> predicts nothing (no token after the last)
HAND_LOGITS = torch.tensor([[[0.0, 0.0, 0.0], [0.0, LN(2), 0.0], [7.0, -3.0, 1.0]]])
HAND_IDS = torch.tensor([[2, 1, 0]])


def test_token_logprobs_by_hand():
    lp = token_logprobs(HAND_LOGITS, HAND_IDS)
    assert lp.shape == (1, 3)
    assert close(lp, [[0.0, LN(1 / 3), LN(1 / 4)]])


def test_token_logprobs_temperature_divides_the_logits():
    # logits[1] = [0, 2 ln 2, 0] at temperature 2 is [0, ln 2, 0]: the same (1/4, 1/2, 1/4) as above.
    logits = HAND_LOGITS.clone()
    logits[0, 1] = torch.tensor([0.0, 2 * LN(2), 0.0])
    logits[0, 0] = 0.0
    assert close(token_logprobs(logits, HAND_IDS, temperature=2.0), [[0.0, LN(1 / 3), LN(1 / 4)]])


def test_sft_loss_by_hand():
    # mask [0, 0, 1]: only x[2] counts: -log(1/4) = ln 4
    assert close(sft_loss(HAND_LOGITS, HAND_IDS, torch.tensor([[0, 0, 1]])), LN(4))
    # mask [0, 1, 1]: (ln 3 + ln 4) / 2
    assert close(sft_loss(HAND_LOGITS, HAND_IDS, torch.tensor([[0, 1, 1]])), (LN(3) + LN(4)) / 2)
    # reduction="sum": ln 3 + ln 4 = ln 12
    assert close(sft_loss(HAND_LOGITS, HAND_IDS, torch.tensor([[0, 1, 1]]), reduction="sum"), LN(12))
    # position 0 is never a target: mask [1, 0, 1] is the same as [0, 0, 1]
    assert close(sft_loss(HAND_LOGITS, HAND_IDS, torch.tensor([[1, 0, 1]])), LN(4))


def test_sft_loss_without_agent_tokens_is_zero_with_zero_gradient():
    logits = HAND_LOGITS.clone().requires_grad_()
    loss = sft_loss(logits, HAND_IDS, torch.zeros(1, 3, dtype=torch.bool))
    loss.backward()
    assert loss.item() == 0.0
    assert torch.count_nonzero(logits.grad) == 0


@st.composite
def sft_batch(draw):
    b = draw(st.integers(1, 3))
    t = draw(st.integers(2, 7))
    v = draw(st.integers(2, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=gen, dtype=torch.float64) * 3
    ids = torch.randint(0, v, (b, t), generator=gen)
    mask = torch.rand(b, t, generator=gen) < draw(st.floats(0.1, 0.9))
    return logits, ids, mask, gen


@FAST
@given(sft_batch())
def test_sft_loss_is_mean_cross_entropy_over_agent_tokens(batch):
    logits, ids, mask, _ = batch
    terms = [
        -torch.log_softmax(logits[b, t - 1], -1)[ids[b, t]]
        for b in range(ids.shape[0])
        for t in range(1, ids.shape[1])
        if mask[b, t]
    ]
    loss = sft_loss(logits, ids, mask)
    assert close(loss, sum(terms) / len(terms) if terms else 0.0, tol=1e-9)


@FAST
@given(sft_batch())
def test_sft_loss_ignores_logits_at_masked_positions(batch):
    logits, ids, mask, gen = batch
    # logits[:, t] predicts ids[:, t + 1]; it is unused when mask[:, t + 1] == 0 (and at the last position).
    unused = torch.ones_like(mask)
    unused[:, :-1] = ~mask[:, 1:]
    changed = logits.clone()
    changed[unused] = torch.randn(int(unused.sum()), logits.shape[-1], generator=gen, dtype=torch.float64) * 50
    assert float(sft_loss(logits, ids, mask)) == float(sft_loss(changed, ids, mask))
    grad_logits = logits.clone().requires_grad_()
    sft_loss(grad_logits, ids, mask).backward()
    assert torch.count_nonzero(grad_logits.grad[unused]) == 0


# ---------------------------------------------------------------------------------------------------------
# leave-one-out advantages


def test_loo_advantages_by_hand():
    # (0, 1, 3): g=1: others (1, 3), b = 2, sigma = 1 (population) -> (0 - 2) / 1 = -2
    #            g=2: others (0, 3), b = 1.5, sigma = 1.5 -> (1 - 1.5) / 1.5 = -1/3
    #            g=3: others (0, 1), b = 0.5, sigma = 0.5 -> (3 - 0.5) / 0.5 = 5
    # They do not sum to 0 (the sigmas differ); the numerators -2, -0.5, 2.5 do.
    assert close(loo_advantages(torch.tensor([0.0, 1.0, 3.0])), [-2.0, -1 / 3, 5.0])
    # (1, 0, 0, 1): a 1 sees (0, 0, 1): b = 1/3, sigma = sqrt((1/9 + 1/9 + 4/9) / 3) = sqrt(2)/3,
    # A = (2/3) / (sqrt(2)/3) = sqrt(2); a 0 sees (1, 0, 1): b = 2/3, same sigma, A = -sqrt(2).
    assert close(loo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0])), [2**0.5, -(2**0.5), -(2**0.5), 2**0.5])
    # (0, 0, 1): a 0 sees (0, 1): b = 0.5, sigma = 0.5 -> -1; the 1 sees (0, 0): sigma = 0, no division -> 1 - 0
    assert close(loo_advantages(torch.tensor([0.0, 0.0, 1.0])), [-1.0, -1.0, 1.0])
    # G = 2: the one other reward has sigma = 0 -> plain differences
    assert close(loo_advantages(torch.tensor([1.0, 0.0])), [1.0, -1.0])


def test_loo_advantages_zero_for_equal_rewards_and_a_single_rollout():
    # 0.1 is inexact in binary; the float noise of the baseline must not be divided by a noise sigma.
    assert torch.equal(loo_advantages(torch.tensor([0.1, 0.1, 0.1])), torch.zeros(3))
    assert torch.equal(loo_advantages(torch.tensor([1.0])), torch.zeros(1))
    adv = loo_advantages(torch.tensor([1, 0, 1]))  # integer rewards give float32
    assert adv.dtype == torch.float32


rewards_lists = st.lists(st.floats(-10, 10, allow_nan=False).map(lambda x: round(x, 3)), min_size=3, max_size=8)


def others_stats(rewards: list[float]) -> list[tuple[float, float]]:
    out = []
    for g in range(len(rewards)):
        others = rewards[:g] + rewards[g + 1 :]
        out.append((statistics.fmean(others), statistics.pstdev(others)))
    return out


@FAST
@given(rewards_lists)
def test_loo_advantages_match_the_definition_and_numerators_sum_to_zero(rewards):
    adv = loo_advantages(torch.tensor(rewards, dtype=torch.float64)).tolist()
    stats = others_stats(rewards)
    assume(all(s > 1e-3 for _, s in stats))  # G > 2 and every sigma(g) > 0
    # A(g) * sigma(g) = R(g) - b(g), and those numerators sum to zero over the group
    numerators = [a * s for a, (_, s) in zip(adv, stats)]
    for num, r, (b, _) in zip(numerators, rewards, stats):
        assert num == pytest.approx(r - b, abs=1e-9)
    assert sum(numerators) == pytest.approx(0.0, abs=1e-9)


@FAST
@given(st.integers(2, 8), st.randoms(use_true_random=False))
def test_loo_advantages_sum_to_zero_when_the_sigmas_are_equal(half, rnd):
    # Binary rewards with half of them 1: every sigma(g) is the same, so the advantages sum to zero.
    rewards = [1.0] * half + [0.0] * half
    rnd.shuffle(rewards)
    adv = loo_advantages(torch.tensor(rewards, dtype=torch.float64))
    assert float(adv.sum()) == pytest.approx(0.0, abs=1e-9)
    assert all((a > 0) == (r == 1.0) for a, r in zip(adv.tolist(), rewards))


@FAST
@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from([0.0, 0.5, 1.0])), min_size=1, max_size=12))
def test_group_loo_advantages_equal_per_group_loo(rows):
    keys = [k for k, _ in rows]
    rewards = torch.tensor([r for _, r in rows])
    out = group_loo_advantages(rewards, keys)
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        assert torch.equal(out[idx], loo_advantages(rewards[idx]))


# ---------------------------------------------------------------------------------------------------------
# importance weights and the rollout mask


def test_truncated_is_weights_by_hand():
    # ratios pi_old / pi_rollout = 0.5/0.25 = 2, 0.9/0.9 = 1, 0.2/0.8 = 0.25; cap 1.5 -> 1.5, 1, 0.25
    old = torch.tensor([LN(0.5), LN(0.9), LN(0.2)], requires_grad=True)
    roll = torch.tensor([LN(0.25), LN(0.9), LN(0.8)])
    w = truncated_is_weights(old, roll, cap=1.5)
    assert close(w, [1.5, 1.0, 0.25])
    assert not w.requires_grad  # stop_grad


def test_rollout_mask_by_hand():
    # log(pi_old / pi_rollout) per token; delta = 0.1, so the band is [0.9, 1.1]
    diffs = torch.tensor(
        [
            [0.3, 0.0, 0.0],  # mean 0.1: exp(0.1) = 1.105 > 1.1 -> masked
            [0.2, -0.2, 0.09],  # mean 0.03: exp(0.03) = 1.030 -> kept
            [-0.3, 0.0, 0.3],  # agent tokens 0, 1 only: mean -0.15, exp = 0.861 < 0.9 -> masked
            [9.0, 9.0, 9.0],  # no agent tokens: kept (log-ratio 0 by convention, it has no tokens)
        ]
    )  # (row 2 would be kept, mean 0, if its non-agent third token were counted)
    agent = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [0, 0, 0]])
    roll = torch.full((4, 3), -1.0)
    assert torch.equal(rollout_mask(roll + diffs, roll, agent, delta=0.1), torch.tensor([0.0, 1.0, 0.0, 1.0]))


@FAST
@given(st.floats(0.01, 0.5), st.integers(1, 20), st.booleans())
def test_rollout_mask_bounds_are_inclusive(delta, n, upper):
    bound = math.log1p(delta) if upper else math.log(1 - delta)
    agent = torch.ones(1, n)
    roll = torch.full((1, n), -2.0)
    at_bound = torch.full((1, n), -2.0 + bound)  # float32: the ratio is the bound up to rounding
    assert float(rollout_mask(at_bound, roll, agent, delta)[0]) == 1.0
    outside = at_bound + (1e-4 if upper else -1e-4)
    assert float(rollout_mask(outside, roll, agent, delta)[0]) == 0.0
    inside = at_bound - (1e-4 if upper else -1e-4)
    assert float(rollout_mask(inside, roll, agent, delta)[0]) == 1.0


@FAST
@given(st.floats(0.01, 0.5), st.integers(2, 20), st.integers(0, 2**31 - 1), st.booleans())
def test_rollout_mask_uses_the_geometric_mean_of_the_ratios(delta, n, seed, upper):
    # Noisy per-token ratios whose geometric mean is exactly a bound: kept; nudged 1e-4 out: masked.
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(1, n, generator=gen, dtype=torch.float64)
    bound = math.log1p(delta) if upper else math.log(1 - delta)
    diffs = noise - noise.mean() + bound
    roll = torch.full((1, n), -3.0, dtype=torch.float64)
    assert float(rollout_mask(roll + diffs, roll, torch.ones(1, n), delta)[0]) == 1.0
    nudged = diffs + (1e-4 if upper else -1e-4)
    assert float(rollout_mask(roll + nudged, roll, torch.ones(1, n), delta)[0]) == 0.0


# ---------------------------------------------------------------------------------------------------------
# grpo_loss by hand


def test_grpo_loss_by_hand_clip_and_importance_weights():
    # G = 2, rewards (1, 0) -> A = (1, -1) (G = 2: no division). Position 0 is context (mask 0).
    # eps = 0.2 (clip to [0.8, 1.2]), C = 1.2, delta = 0.1.
    # Row 0: pi_old/pi_rollout = (1.5, 2/3): geometric mean 1 -> kept; w = (min(1.5, 1.2), 2/3) = (1.2, 2/3)
    #        rho = (1.5, 0.5), A = 1: min(1.5, 1.2) = 1.2 (clipped), min(0.5, 0.8) = 0.5 (unclipped)
    #        sum w * term = 1.2 * 1.2 + (2/3) * 0.5 = 1.44 + 1/3
    # Row 1: pi_old = pi_rollout -> w = 1, kept; rho = (1.5, 0.5), A = -1:
    #        min(-1.5, -1.2) = -1.5 (unclipped), min(-0.5, -0.8) = -0.8 (clipped); sum -2.3
    # N = 4 agent tokens: J = (1.44 + 1/3 - 2.3) / 4; loss = -J
    old = torch.tensor([[0.0, -1.0, -2.0], [0.0, -0.5, -1.5]])
    roll = old - torch.tensor([[0.0, LN(1.5), LN(2 / 3)], [0.0, 0.0, 0.0]])
    new = (old + torch.tensor([[0.0, LN(1.5), LN(0.5)], [0.0, LN(1.5), LN(0.5)]])).requires_grad_()
    agent = torch.tensor([[0, 1, 1], [0, 1, 1]])
    loss, stats = grpo_loss(new, old, roll, torch.tensor([1.0, 0.0]), agent, clip_eps=0.2, is_cap=1.2, mask_delta=0.1)
    assert close(loss, -(1.44 + 1 / 3 - 2.3) / 4)
    loss.backward()
    # d loss / d lp_new = -w * rho * A / N on unclipped tokens, 0 on clipped ones and on context:
    # row 0 token 2: -(2/3) * 0.5 * 1 / 4 = -1/12;  row 1 token 1: -(1 * 1.5 * -1) / 4 = 0.375
    assert close(new.grad, [[0.0, 0.0, -1 / 12], [0.0, 0.375, 0.0]])
    assert stats["clip_fraction"] == 0.5
    assert stats["masked_fraction"] == 0.0
    assert stats["agent_tokens"] == 4.0
    assert stats["advantage_mean"] == 0.0 and stats["advantage_std"] == pytest.approx(1.0)
    assert stats["is_truncated_fraction"] == 0.25  # one of four ratios (1.5) is above C = 1.2
    assert stats["loss"] == pytest.approx(loss.item())


def test_grpo_loss_by_hand_masked_rollout_keeps_its_tokens_in_the_count():
    # rewards (1, 0, 0): A(1): others (0, 0), sigma 0 -> 1 - 0 = 1; A(2) = A(3): others (1, 0), b = sigma = 0.5 -> -1
    # Row 2's pi_old/pi_rollout is 1.5 on each token: geometric mean 1.5 > 1.1 -> masked.
    # lp_new = lp_old (rho = 1), w = 1 on rows 0 and 1. Agent tokens: row 0: 2, row 1: 1, row 2: 3 -> N = 6.
    # J = (1 + 1 - 1) / 6 = 1/6; loss = -1/6. d loss / d lp_new: row 0: -1/6, row 1: +1/6, row 2: 0.
    old = torch.full((3, 4), -1.0)
    roll = old.clone()
    roll[2] = -1.0 - LN(1.5)
    agent = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 0], [0, 1, 1, 1]])
    new = old.clone().requires_grad_()
    loss, stats = grpo_loss(new, old, roll, torch.tensor([1.0, 0.0, 0.0]), agent, is_cap=2.0)
    assert close(loss, -1 / 6)
    loss.backward()
    assert close(new.grad, [[0, -1 / 6, -1 / 6, 0], [0, 0, 1 / 6, 0], [0, 0, 0, 0]])
    assert stats["masked_fraction"] == pytest.approx(1 / 3)
    assert stats["agent_tokens"] == 6.0 and stats["kept_agent_tokens"] == 3.0


def test_grpo_loss_zero_gradient_through_non_finite_padding():
    # -inf / nan off the agent tokens (padding, a prompt the trainer never scored) must not reach the gradient.
    new = torch.tensor([[float("nan"), -0.5, -float("inf")], [-float("inf"), -0.7, float("nan")]], requires_grad=True)
    old = torch.tensor([[float("nan"), -0.6, 0.0], [0.0, -0.7, float("inf")]])
    agent = torch.tensor([[0, 1, 0], [0, 1, 0]])
    loss, _ = grpo_loss(new, old, old, torch.tensor([1.0, 0.0]), agent)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(new.grad).all()
    assert new.grad[0, 0] == 0 and new.grad[0, 2] == 0 and new.grad[1, 0] == 0 and new.grad[1, 2] == 0
    assert new.grad[0, 1] != 0 and new.grad[1, 1] != 0


# ---------------------------------------------------------------------------------------------------------
# grpo_loss properties


@st.composite
def groups(draw, equal_rewards=False):
    g = draw(st.integers(1, 6))
    t = draw(st.integers(2, 8))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    old = -torch.rand(g, t, generator=gen, dtype=torch.float64) * 3
    # old vs rollout within ~2%, so most rollouts stay in the band; some land outside for larger noise
    roll = old + torch.randn(g, t, generator=gen, dtype=torch.float64) * draw(st.sampled_from([0.0, 0.02, 0.3]))
    new = old + torch.randn(g, t, generator=gen, dtype=torch.float64) * draw(st.sampled_from([0.0, 0.1, 1.0]))
    agent = torch.rand(g, t, generator=gen) < draw(st.floats(0.2, 1.0))
    if equal_rewards:
        rewards = torch.full((g,), draw(st.sampled_from([0.0, 0.1, 1.0, -2.5])), dtype=torch.float64)
    else:
        rewards = torch.tensor(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=g, max_size=g)))
    return new, old, roll, rewards, agent


@FAST
@given(groups(equal_rewards=True))
def test_equal_rewards_give_zero_loss_and_gradient(group):
    new, old, roll, rewards, agent = group
    new = new.clone().requires_grad_()
    loss, stats = grpo_loss(new, old, roll, rewards, agent)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.count_nonzero(new.grad) == 0
    assert stats["zero_signal"] == 1.0


@FAST
@given(groups())
def test_gradients_only_on_agent_tokens_of_kept_rollouts(group):
    new, old, roll, rewards, agent = group
    new = new.clone().requires_grad_()
    loss, _ = grpo_loss(new, old, roll, rewards, agent)
    loss.backward()
    kept = rollout_mask(old, roll, agent, 0.1).bool()
    counted = agent & kept.unsqueeze(1)
    assert torch.count_nonzero(new.grad[~counted]) == 0
    # and changing lp_new anywhere else leaves the loss as it was
    moved = torch.where(counted, new.detach(), new.detach() - 5.0)
    assert float(grpo_loss(moved, old, roll, rewards, agent)[0]) == pytest.approx(loss.item(), abs=1e-12)


@FAST
@given(st.integers(1, 3), st.integers(3, 6), st.integers(0, 2**31 - 1))
def test_gradients_reach_logits_only_through_agent_tokens(g, t, seed):
    # token_logprobs -> grpo_loss: logits[:, s] predicts token s + 1, so its gradient must be 0 unless
    # token s + 1 is an agent token; the last position predicts nothing.
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(g, t, 5, generator=gen, requires_grad=True)
    ids = torch.randint(0, 5, (g, t), generator=gen)
    agent = torch.rand(g, t, generator=gen) < 0.5
    lp = token_logprobs(logits, ids)
    rewards = torch.tensor([0.0, 1.0, 3.0])[:g]  # every advantage non-zero when g > 1: (-1, 1), (-2, -1/3, 5)
    loss, _ = grpo_loss(lp, lp.detach(), lp.detach(), rewards, agent)
    loss.backward()
    silent = torch.ones(g, t, dtype=torch.bool)
    silent[:, :-1] = ~agent[:, 1:]
    assert torch.count_nonzero(logits.grad[silent]) == 0
    if g > 1 and bool(agent[:, 1:].any()):
        assert torch.count_nonzero(logits.grad[~silent]) > 0


@FAST
@given(st.floats(0.05, 0.4), st.floats(0.3, 3.0), st.booleans(), st.booleans())
def test_clipping_zeroes_the_gradient_outside_the_trust_region(eps, log_gap, positive_a, above):
    # One token per rollout, rewards (1, 0) -> A = (+1, -1). Row 0 (A > 0) or row 1 (A < 0) gets rho far
    # above 1 + eps or far below 1 - eps; the clipped term is the smaller one exactly when
    # (A > 0 and rho > 1 + eps) or (A < 0 and rho < 1 - eps), and then the token has no gradient.
    row = 0 if positive_a else 1
    log_rho = math.log1p(eps) + log_gap if above else math.log(1 - eps) - log_gap
    old = torch.full((2, 2), -1.0, dtype=torch.float64)
    new = old.clone()
    new[row, 1] += log_rho
    new.requires_grad_()
    agent = torch.tensor([[0, 1], [0, 1]])
    loss, stats = grpo_loss(new, old, old, torch.tensor([1.0, 0.0]), agent, clip_eps=eps)
    loss.backward()
    clipped = above == positive_a
    rho = math.exp(log_rho)
    a = 1.0 if positive_a else -1.0
    if clipped:
        assert float(new.grad[row, 1]) == 0.0
        assert stats["clip_fraction"] == 0.5
    else:  # unclipped: d(-rho * A / N) / d lp = -rho * A / 2
        assert float(new.grad[row, 1]) == pytest.approx(-rho * a / 2)
        assert stats["clip_fraction"] == 0.0


# ---------------------------------------------------------------------------------------------------------
# argument checks name the argument


def _ok_group():
    return torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([1.0, 0.0]), torch.ones(2, 3)


@pytest.mark.parametrize(
    ("change", "name"),
    [
        (lambda a: {**a, "logp_new": torch.zeros(2, 3, dtype=torch.long)}, "logp_new"),
        (lambda a: {**a, "logp_old": torch.zeros(2, 4)}, "logp_old"),
        (lambda a: {**a, "logp_rollout": torch.zeros(6)}, "logp_rollout"),
        (lambda a: {**a, "rewards": torch.tensor([1.0, 0.0, 1.0])}, "rewards"),
        (lambda a: {**a, "agent_mask": torch.full((2, 3), 2)}, "agent_mask"),
        (lambda a: {**a, "agent_mask": torch.ones(3, 2)}, "agent_mask"),
        (lambda a: {**a, "logp_old": torch.full((2, 3), float("nan"))}, "logp_old"),
        (lambda a: {**a, "rewards": [1.0, 0.0]}, "rewards"),
        (lambda a: {**a, "clip_eps": -0.1}, "clip_eps"),
        (lambda a: {**a, "is_cap": 0.0}, "is_cap"),
        (lambda a: {**a, "mask_delta": float("nan")}, "mask_delta"),
    ],
)
def test_grpo_loss_rejects_bad_arguments_by_name(change, name):
    new, old, roll, rewards, agent = _ok_group()
    args = {"logp_new": new, "logp_old": old, "logp_rollout": roll, "rewards": rewards, "agent_mask": agent}
    with pytest.raises(InvalidOptionError, match=name) as info:
        grpo_loss(**change(args))
    assert isinstance(info.value, ValueError)


def test_other_functions_reject_bad_arguments_by_name():
    with pytest.raises(ValueError, match="logits"):
        token_logprobs(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="input_ids"):
        token_logprobs(torch.zeros(1, 3, 4), torch.tensor([[0, 1, 4]]))  # 4 is outside the vocabulary
    with pytest.raises(ValueError, match="input_ids"):
        sft_loss(torch.zeros(1, 3, 4), torch.zeros(1, 3), torch.ones(1, 3))  # float ids
    with pytest.raises(ValueError, match="loss_mask"):
        sft_loss(torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 2))
    with pytest.raises(ValueError, match="reduction"):
        sft_loss(torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3), reduction="none")
    with pytest.raises(ValueError, match="rewards"):
        loo_advantages(torch.tensor([]))
    with pytest.raises(ValueError, match="rewards"):
        loo_advantages(torch.tensor([1.0, float("inf")]))
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(torch.zeros(3), torch.zeros(3), cap=-1.0)
    with pytest.raises(ValueError, match="delta"):
        rollout_mask(torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3), delta=-0.5)
    with pytest.raises(ValueError, match="group_ids"):
        group_loo_advantages(torch.tensor([1.0, 0.0]), ["a"])


def test_low_precision_logits_are_scored_in_float32():
    logits = HAND_LOGITS.to(torch.bfloat16)
    lp = token_logprobs(logits, HAND_IDS)
    assert lp.dtype == torch.float32
    assert close(lp, [[0.0, LN(1 / 3), LN(1 / 4)]], tol=1e-2)
    assert sft_loss(logits, HAND_IDS, torch.tensor([[0, 0, 1]])).dtype == torch.float32


# ---------------------------------------------------------------------------------------------------------
# grpo_loss against a loop-by-loop reading of the issue's equations, and its extreme values


def _spec_loss(new, old, roll, rewards, agent, eps, cap, delta):
    """The issue's objective written out token by token in plain Python (the mask on the untruncated ratio)."""
    g_count = len(new)
    adv = []
    for g in range(g_count):
        others = rewards[:g] + rewards[g + 1 :]
        if not others or len(set(rewards)) == 1:
            adv.append(0.0)
            continue
        b, s = statistics.fmean(others), statistics.pstdev(others)
        adv.append((rewards[g] - b) / s if s > 1e-6 else rewards[g] - b)
    total, count = 0.0, 0
    for g in range(g_count):
        tokens = [t for t, on in enumerate(agent[g]) if on]
        count += len(tokens)
        if not tokens:
            continue
        mean_log = sum(old[g][t] - roll[g][t] for t in tokens) / len(tokens)
        low = math.log(1 - delta) if delta < 1 else -math.inf
        if not low - 1e-6 <= mean_log <= math.log1p(delta) + 1e-6:
            continue
        for t in tokens:
            w = min(math.exp(old[g][t] - roll[g][t]), cap)
            rho = math.exp(new[g][t] - old[g][t])
            total += w * min(rho * adv[g], min(max(rho, 1 - eps), 1 + eps) * adv[g])
    return -total / count if count else 0.0


@st.composite
def _groups(draw):
    g, t = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    lp = st.floats(-4, 0, allow_nan=False)
    old = [[draw(lp) for _ in range(t)] for _ in range(g)]
    noise = draw(st.sampled_from([0.0, 0.05, 0.5]))
    roll = [[o + draw(st.floats(-noise, noise)) if noise else o for o in row] for row in old]
    new = [[o + draw(st.floats(-1, 1)) for o in row] for row in old]
    agent = [[draw(st.booleans()) for _ in range(t)] for _ in range(g)]
    rewards = [draw(st.sampled_from([0.0, 0.25, 1.0, 3.0])) for _ in range(g)]
    return new, old, roll, rewards, agent


@settings(max_examples=150, deadline=None)
@given(_groups(), st.sampled_from([0.0, 0.2, 0.5]), st.sampled_from([1.0, 2.0, 10.0]), st.sampled_from([0.0, 0.1, 0.3]))
def test_grpo_loss_is_the_issues_equation_token_by_token(group, eps, cap, delta):
    new, old, roll, rewards, agent = group
    f64 = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    loss, _ = grpo_loss(
        f64(new), f64(old), f64(roll), f64(rewards), torch.tensor(agent), clip_eps=eps, is_cap=cap, mask_delta=delta
    )
    want = _spec_loss(new, old, roll, rewards, agent, eps, cap, delta)
    assert abs(float(loss) - want) <= 1e-6 * max(1.0, abs(want))


def test_the_rollout_mask_reads_the_untruncated_ratio():
    """One token at ratio e^20 among 99 at ratio 1: the geometric mean is exp(0.2) = 1.22, outside
    [0.9, 1.1], so the rollout is masked; capping each ratio at C = 2 first would give exp(0.007), kept."""
    old = torch.zeros(1, 100)
    roll = torch.zeros(1, 100)
    roll[0, 0] = -20.0
    agent = torch.ones(1, 100)
    assert rollout_mask(old, roll, agent, 0.1).tolist() == [0.0]
    _, stats = grpo_loss(old, old, roll, torch.tensor([0.0]), agent, is_cap=2.0, mask_delta=0.1)
    assert stats["masked_fraction"] == 1.0


def test_a_minus_infinite_engine_logprob_masks_its_rollout():
    new = torch.full((2, 3), -1.0, requires_grad=True)
    roll = torch.tensor([[-1.0, -math.inf, -1.0], [-1.0, -1.0, -1.0]])
    agent = torch.ones(2, 3)
    assert rollout_mask(new.detach(), roll, agent, 0.1).tolist() == [0.0, 1.0]
    loss, stats = grpo_loss(new, new.detach(), roll, torch.tensor([1.0, 0.0]), agent)
    loss.backward()
    assert stats["masked_fraction"] == 0.5 and math.isfinite(stats["rollout_log_ratio_mean"])
    # the kept rollout: A = -1, w = rho = 1 on 3 of the group's 6 agent tokens -> loss = 3 / 6
    assert close(loss, 0.5) and torch.isfinite(new.grad).all() and not new.grad[0].any()
    with pytest.raises(InvalidOptionError, match="logp_rollout"):
        grpo_loss(new, new.detach(), torch.full((2, 3), math.nan), torch.tensor([1.0, 0.0]), agent)


def test_an_overflowing_ratio_on_the_clipped_side_has_zero_gradient_not_nan():
    """A > 0 and lp_new - lp_old = 90 (rho = e^90 overflows float32): the clipped term is the smaller,
    so the token's gradient is 0."""
    new = torch.tensor([[0.0, 0.0], [0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0], [-90.0, 0.0]])
    loss, _ = grpo_loss(new, old, old, torch.tensor([0.0, 1.0]), torch.ones(2, 2), mask_delta=1e9, is_cap=1e9)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(new.grad).all()
    assert new.grad[1, 0] == 0 and new.grad[1, 1] != 0


def test_equal_rewards_give_zero_gradient_even_without_truncation():
    """is_cap = inf and a weight that overflows (e^100): a group whose rewards are equal still gives 0."""
    new = torch.zeros(2, 3, requires_grad=True)
    roll = torch.tensor([[0.0, -100.0, 0.0], [0.0, 0.0, 0.0]])
    agent = torch.ones(2, 3)
    loss, _ = grpo_loss(new, new.detach(), roll, torch.tensor([1.0, 1.0]), agent, is_cap=math.inf, mask_delta=1e30)
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.equal(new.grad, torch.zeros(2, 3))


def test_old_and_rollout_logprobs_are_constants_inside_grpo_loss():
    new = torch.tensor([[-1.0, -0.5], [-0.2, -0.9]], requires_grad=True)
    old = (new.detach() + 0.05).requires_grad_()
    roll = (new.detach() - 0.03).requires_grad_()
    loss, _ = grpo_loss(new, old, roll, torch.tensor([1.0, 0.0]), torch.ones(2, 2))
    loss.backward()
    assert old.grad is None and roll.grad is None and new.grad.abs().sum() > 0


def test_sft_loss_without_counted_tokens_is_zero_even_with_infinite_logits():
    logits = torch.zeros(1, 3, 4)
    logits[0, 1, 2] = math.inf
    logits.requires_grad_()
    loss = sft_loss(logits, torch.tensor([[1, 2, 3]]), torch.zeros(1, 3))
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.equal(logits.grad, torch.zeros(1, 3, 4))
