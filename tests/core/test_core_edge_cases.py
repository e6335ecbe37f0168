"""Fully masked rows, non-finite padding and the dtype rule, for every function of core."""

from __future__ import annotations

import math

import pytest
import torch

from rllib_llm import core

# Row 0 has tokens, row 1 has none; padding holds inf and nan.
MASK = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
LOGP = torch.tensor([[-0.5, -1.0, math.inf], [math.nan, -math.inf, math.nan]])
OLD = torch.tensor([[-0.7, -0.9, math.nan], [math.inf, math.nan, -math.inf]])
ADV = torch.tensor([[1.0, -1.0, math.nan], [math.inf, math.nan, 1.0]])
SCORES = torch.tensor([1.0, 0.0])


def finite(*xs):
    return all(torch.isfinite(x).all() for x in xs)


@pytest.mark.parametrize("variant", core.PG_VARIANTS)
@pytest.mark.parametrize("mode", core.AGG_MODES)
def test_policy_loss_ignores_non_finite_padding_and_empty_rows(variant, mode):
    logp = LOGP.clone().requires_grad_(True)
    per_token, metrics = core.policy_loss(variant, logp, OLD, ADV, MASK, scores=SCORES)
    loss = core.agg_loss(per_token, MASK, mode)
    loss.backward()
    assert finite(per_token, loss, logp.grad, *metrics.values())
    assert (per_token[MASK == 0] == 0).all() and (logp.grad[MASK == 0] == 0).all()
    clean = core.policy_loss(variant, LOGP[:1, :2], OLD[:1, :2], ADV[:1, :2], MASK[:1, :2],
                             scores=SCORES[:1])[0]
    torch.testing.assert_close(per_token[0, :2], clean[0])


@pytest.mark.parametrize("variant", core.PG_VARIANTS)
def test_policy_loss_of_an_all_masked_batch_is_zero(variant):
    logp = LOGP.clone().requires_grad_(True)
    per_token, metrics = core.policy_loss(variant, logp, OLD, ADV, torch.zeros_like(MASK),
                                          scores=SCORES)
    for mode in core.AGG_MODES:
        assert core.agg_loss(per_token, torch.zeros_like(MASK), mode).item() == 0.0
    assert all(float(v) == 0.0 for v in metrics.values())


def test_returns_and_normalisation_with_empty_rows():
    values = torch.tensor([[0.5, 0.1, math.nan], [math.inf, 1.0, 2.0]])
    for out in (
        *core.gae(ADV, values, MASK, gamma=0.99, lambd=0.95),
        core.discounted_returns(ADV, MASK, gamma=0.9),
        core.whiten(ADV, MASK),
        core.whiten(ADV, torch.zeros_like(MASK)),
        core.whiten(ADV, torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])),  # one token
        core.value_loss(values, values, ADV, MASK, value_clip=0.2, agg_mode="token-mean"),
        core.value_loss(values, values, ADV, torch.zeros_like(MASK), value_clip=None,
                        agg_mode="seq-mean-token-mean"),
        core.positive_nll_loss(LOGP, MASK, SCORES),
        core.positive_nll_loss(LOGP, torch.zeros_like(MASK), SCORES),
        core.explained_variance(values, ADV, MASK),
        core.length_adaptive_lambda(torch.tensor([0, 5]), 0.05),
        core.reward_norm(torch.tensor([1.0]), 1, mean_type="batch", std_type="batch"),
    ):
        assert finite(out)


@pytest.mark.parametrize("estimator", core.ADV_ESTIMATORS)
def test_compute_advantages_with_empty_rows(estimator):
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    values = torch.tensor([[0.1, 0.2, math.nan]] * 4)
    token_kl = torch.tensor([[0.1, 0.1, math.inf]] * 4)
    for m in (mask, torch.zeros_like(mask)):
        adv, returns, rewards = core.compute_advantages(
            core.AdvantageInputs(torch.tensor([1.0, 0.0, 1.0, 1.0]), m, values=values,
                                 token_kl=token_kl, kl_coef=0.1),
            core.AdvantageSettings(estimator, group_size=2, norm_mean_type="batch",
                                   norm_std_type="group"),
        )
        assert finite(adv, returns, rewards)
        assert (adv[m == 0] == 0).all() and (rewards[m == 0] == 0).all()


@pytest.mark.parametrize(("dtype", "out"), [
    (torch.float64, torch.float64), (torch.float32, torch.float32),
    (torch.bfloat16, torch.float32), (torch.float16, torch.float32),
])
def test_dtype_rule(dtype, out):
    x = torch.tensor([[-0.5, -1.0], [-0.2, -0.1]], dtype=dtype)
    mask = torch.ones(2, 2, dtype=dtype)
    scores = torch.tensor([1.0, 0.0], dtype=dtype)
    results = [
        core.policy_loss("ppo", x, x, x, mask)[0],
        core.agg_loss(x, mask, "token-mean"),
        core.kl_estimate(x, x, "k3"),
        core.kl_full(x[..., None].expand(2, 2, 3), x[..., None].expand(2, 2, 3)),
        core.gae(x, x, mask, gamma=1.0, lambd=0.9)[0],
        core.discounted_returns(x, mask, gamma=1.0),
        core.whiten(x, mask),
        core.group_advantages(scores, 2, "grpo"),
        core.reward_norm(scores, 2, mean_type="batch", std_type="batch"),
        core.value_loss(x, x, x, mask, value_clip=0.2, agg_mode="token-mean"),
        core.positive_nll_loss(x, mask, scores),
        core.compute_advantages(core.AdvantageInputs(scores, mask),
                                core.AdvantageSettings("grpo", group_size=2))[0],
    ]
    assert [r.dtype for r in results] == [out] * len(results)


def test_positive_nll_micro_batches_sum_to_the_whole_batch_with_its_token_count():
    from rllib_llm.core import positive_nll_loss

    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]],
                        dtype=torch.float64)
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    whole = positive_nll_loss(logp, mask, scores)
    n = (mask * (scores[:, None] > 0)).sum()
    parts = sum(positive_nll_loss(logp[i:i + 2], mask[i:i + 2], scores[i:i + 2], num_tokens=n)
                for i in (0, 2))
    torch.testing.assert_close(parts, whole)
    # By hand: -(sum of logp over rows 0, 2, 3 mask tokens) / 6 tokens.
    by_hand = -(logp[0, :3].sum() + logp[2, :1].sum() + logp[3, :2].sum()) / 6
    torch.testing.assert_close(whole, by_hand)
