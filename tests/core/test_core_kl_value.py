"""KL estimators, the adaptive KL coefficient, the critic loss and the positive NLL, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rllib_llm import core

F64 = torch.float64
D = [0.5, -0.25, 0.0, 30.0, -30.0]  # d = logp − ref_logp


def kl_of(kind):
    logp = torch.tensor([D], dtype=F64)
    return core.kl_estimate(logp, torch.zeros_like(logp), kind)[0].tolist()


@pytest.mark.parametrize(("kinds", "formula"), [
    (("kl", "k1"), lambda d: d),
    (("abs",), abs),
    (("mse", "k2"), lambda d: 0.5 * d * d),
    (("k3", "low_var_kl"), lambda d: min(max(math.exp(-d) + d - 1, -10.0), 10.0)),
])
def test_kl_estimators_by_hand(kinds, formula):
    for kind in kinds:
        assert kl_of(kind) == pytest.approx([formula(d) for d in D], abs=1e-12)


def test_k3_gradient_is_finite_where_the_clamp_bites():
    logp = torch.tensor([[-100.0, 100.0, 0.3]], dtype=F64, requires_grad=True)
    core.kl_estimate(logp, torch.zeros_like(logp), "k3").sum().backward()
    assert torch.isfinite(logp.grad).all()
    assert logp.grad[0, :2].tolist() == [0.0, 0.0]
    assert logp.grad[0, 2].item() == pytest.approx(1 - math.exp(-0.3))  # d/dd (e^-d + d − 1)


def test_kl_full_by_hand():
    # π = softmax(0, log 3) = (1/4, 3/4), π_ref uniform: KL = ¼·log(½) + ¾·log(3/2).
    logits = torch.tensor([[[0.0, math.log(3)]]], dtype=F64)
    ref = torch.zeros_like(logits)
    expected = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    assert core.kl_full(logits, ref).item() == pytest.approx(expected, abs=1e-12)


def test_kl_full_ignores_impossible_tokens():
    logits = torch.tensor([[[0.0, -math.inf]]], dtype=F64)
    ref = torch.tensor([[[0.0, 5.0]]], dtype=F64)
    value = core.kl_full(logits, ref).item()
    assert value == pytest.approx(-math.log(1 / (1 + math.exp(5))), abs=1e-12)


def test_adaptive_kl_controller_by_hand():
    ctl = core.AdaptiveKLController(init_kl_coef=0.1, target_kl=2.0, kl_horizon=100)
    ctl.update(2.5, 10)  # error 0.25 → clipped 0.2: β·(1 + 0.2·10/100)
    assert ctl.value == pytest.approx(0.1 * 1.02)
    ctl.update(torch.tensor(1.8), 50)  # error −0.1: β·(1 − 0.1·0.5)
    assert ctl.value == pytest.approx(0.1 * 1.02 * 0.95)


def test_kl_controller_is_fixed_without_target():
    ctl = core.AdaptiveKLController()
    assert ctl.update(100.0, 10**6) == ctl.value == 0.2


def test_value_loss_by_hand():
    values = torch.tensor([[1.0, 0.0], [2.0, 9.0]], dtype=F64)
    old = torch.tensor([[0.5, 0.0], [1.0, 0.0]], dtype=F64)
    returns = torch.tensor([[0.0, 1.0], [1.5, 0.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=F64)
    # Unclipped ½(V − R)²: 0.5, 0.5, 0.125 (padding 40.5 ignored).
    plain = core.value_loss(values, old, returns, mask, value_clip=None, agg_mode="token-mean")
    assert plain.item() == pytest.approx((0.5 + 0.5 + 0.125) / 3)
    # value_clip 0.2: V_clip = 0.7, 0.0, 1.2 → ½(V_clip − R)² = 0.245, 0.5, 0.045; max per token.
    clipped = core.value_loss(values, old, returns, mask, value_clip=0.2,
                              agg_mode="seq-mean-token-mean")
    assert clipped.item() == pytest.approx(((0.5 + 0.5) / 2 + 0.125) / 2)
    per_token = core.value_loss_per_token(values, old, returns, mask, value_clip=0.6)
    # V_clip(1,0) = 1.6 → ½(0.1)² = 0.005 < 0.125: the max keeps 0.125; (0,0): V_clip = 1.0.
    torch.testing.assert_close(per_token, torch.tensor([[0.5, 0.5], [0.125, 0.0]], dtype=F64))


def test_value_loss_clip_bites():
    values, old = torch.tensor([[3.0]], dtype=F64), torch.tensor([[0.0]], dtype=F64)
    returns, mask = torch.tensor([[3.0]], dtype=F64), torch.ones(1, 1, dtype=F64)
    # V hits the target, but V_clip = 0.5 is 2.5 away: the pessimistic max keeps ½·2.5².
    loss = core.value_loss(values, old, returns, mask, value_clip=0.5, agg_mode="token-mean")
    assert loss.item() == pytest.approx(0.5 * 2.5**2)


def test_value_clipfrac_counts_the_tokens_whose_loss_took_the_clipped_branch():
    # value_clip 0.1 around V_old = 0. Token 0: V = 0.5 toward R = 1, clipped to 0.1, whose loss
    # (0.81) beats the unclipped one (0.25): counted. Token 1: V = 0.5 away from R = -1, the
    # unclipped loss is the larger: not counted. Token 2 stays inside the clip: not counted.
    # Token 3 would count but is masked out.
    values = torch.tensor([[0.5, 0.5, 0.05, 0.5]])
    old = torch.zeros(1, 4)
    returns = torch.tensor([[1.0, -1.0, 0.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert core.value_clipfrac(values, old, returns, mask, value_clip=0.1).item() == \
        pytest.approx(1 / 3)


def test_explained_variance_by_hand():
    returns = torch.tensor([[1.0, 2.0, 3.0, 99.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=F64)
    perfect = core.explained_variance(returns, returns, mask)
    assert perfect.item() == pytest.approx(1.0)
    constant = core.explained_variance(torch.full_like(returns, 2.0), returns, mask)
    assert constant.item() == pytest.approx(0.0)
    half = core.explained_variance(torch.tensor([[1.5, 2.0, 2.5, 0.0]], dtype=F64), returns, mask)
    assert half.item() == pytest.approx(1 - 0.25)  # Var(R − V) = ¼ Var(R)


def test_positive_nll_by_hand():
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -4.0], [-5.0, -6.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=F64)
    scores = torch.tensor([1.0, 0.5, 0.0], dtype=F64)
    loss = core.positive_nll_loss(logp, mask, scores)
    assert loss.item() == pytest.approx((1 + 2 + 3) / 3)
    none_positive = core.positive_nll_loss(logp, mask, torch.zeros(3, dtype=F64))
    assert none_positive.item() == 0.0


def test_register_kl_estimator():
    @core.register_kl_estimator("test_quartic", override=True)
    def quartic(d):
        return d**4

    assert "test_quartic" in core.registered_names("kl_kind")
    assert kl_of("test_quartic") == pytest.approx([d**4 for d in D])
