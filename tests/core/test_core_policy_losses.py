"""Policy-gradient variants: hand-computed values, stop-gradients, metrics and the registry."""

from __future__ import annotations

import math

import pytest
import torch

from rllib_llm import core

# A tiny batch: row 0 has two tokens, row 1 one token and one padding position.
LOGP = [[-1.0, -0.5], [-2.0, -0.3]]
OLD_LOGP = [[-1.2, -0.5], [-1.5, -0.4]]
ADV = [[1.0, 1.0], [-2.0, -2.0]]
MASK = [[1.0, 1.0], [1.0, 0.0]]
SCORES = [1.0, 0.0]
TOKENS = [(0, 0), (0, 1), (1, 0)]  # the mask tokens


def t(x, requires_grad=False):
    return torch.tensor(x, dtype=torch.float64, requires_grad=requires_grad)


def run(variant, agg_mode="token-mean", logp=LOGP, old=OLD_LOGP, adv=ADV, mask=MASK,
        scores=SCORES, **params):
    """(per-token loss, token-mean loss, grad wrt logp, metrics)."""
    logp = t(logp, requires_grad=True)
    per_token, metrics = core.policy_loss(variant, logp, t(old), t(adv), t(mask),
                                          scores=t(scores), **params)
    loss = core.agg_loss(per_token, t(mask), agg_mode)
    (grad,) = torch.autograd.grad(loss, logp)
    return per_token.detach(), loss.detach(), grad, metrics


def ratio(b, i):
    return math.exp(LOGP[b][i] - OLD_LOGP[b][i])


def expect(per_token_fn):
    """Expected [B, T] per-token loss from a scalar formula of (b, i); padding is 0."""
    out = [[0.0, 0.0], [0.0, 0.0]]
    for b, i in TOKENS:
        out[b][i] = per_token_fn(b, i)
    return t(out)


def assert_close(actual, expected, atol=1e-12):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float64),
                               torch.as_tensor(expected, dtype=torch.float64), atol=atol, rtol=0)


def test_vanilla_by_hand():
    per_token, loss, grad, metrics = run("vanilla")
    assert_close(per_token, expect(lambda b, i: -ADV[b][i] * LOGP[b][i]))
    # token-mean over 3 tokens: −(−1·1 − 0.5·1 + (−2)(−2))/3 = −2.5/3
    assert_close(loss, -2.5 / 3)
    assert_close(grad, expect(lambda b, i: -ADV[b][i] / 3))
    assert_close(metrics["clipfrac"], 0.0)


def test_ppo_by_hand():
    # r: e^0.2 = 1.2214 (A>0, clipped at 1.2), 1 (A>0), e^-0.5 = 0.6065 (A<0, clipped at 0.8).
    per_token, _, grad, metrics = run("ppo")
    expected = expect(lambda b, i: max(-ratio(b, i) * ADV[b][i],
                                       -min(max(ratio(b, i), 0.8), 1.2) * ADV[b][i]))
    assert_close(per_token, expected)
    assert_close(expected[0, 0], -1.2)
    assert_close(expected[1, 0], 1.6)  # −0.8·(−2): the pessimistic clipped term
    # Clipped tokens get no gradient; the unclipped one d(−r·A)/dlogp = −r·A.
    assert_close(grad, t([[0.0, -1.0 / 3], [0.0, 0.0]]))
    assert_close(metrics["clipfrac"], 2 / 3)
    assert_close(metrics["ratio_max"], math.exp(0.2))
    assert_close(metrics["ratio_min"], math.exp(-0.5))
    assert_close(metrics["ratio_mean"], (math.exp(0.2) + 1 + math.exp(-0.5)) / 3)
    assert_close(metrics["approx_kl"], 0.5 * (0.2**2 + 0 + 0.5**2) / 3)


def test_ppo_clip_higher_by_hand():
    # ε_hi = 0.3 > 0.2: r = 1.2214 is inside [0.8, 1.3], so unclipped.
    per_token, _, grad, _ = run("ppo", pg_clip_low=0.2, pg_clip_high=0.3)
    assert_close(per_token[0, 0], -math.exp(0.2))
    assert_close(grad[0, 0], -math.exp(0.2) / 3)


def test_ppo_dual_clip_by_hand():
    # A = −2 and r = e^{1.5} = 4.48: the clipped PPO loss is −r·A = 8.96, the dual clip caps it
    # at −c·A = 6 and zeroes the gradient.
    logp, old = [[0.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [-1.5, 0.0]]
    per_token, _, grad, metrics = run("ppo", logp=logp, old=old, dual_clip_loss=True)
    assert_close(per_token[1, 0], 6.0)
    assert_close(grad[1, 0], 0.0)
    assert_close(metrics["dual_clipfrac"], 1 / 3)
    per_token, _, _, _ = run("ppo", logp=logp, old=old, dual_clip_loss=True, dual_clip_c=5.0)
    assert_close(per_token[1, 0], min(math.exp(1.5) * 2, 10.0))


def test_tis_by_hand():
    per_token, _, grad, metrics = run("tis")  # weights clip(r, 0, 1): 1, 1, e^-0.5

    def w(b, i):
        return min(max(ratio(b, i), 0.0), 1.0)

    assert_close(per_token, expect(lambda b, i: -w(b, i) * ADV[b][i] * LOGP[b][i]))
    assert_close(grad, expect(lambda b, i: -w(b, i) * ADV[b][i] / 3))
    assert_close(metrics["clipfrac"], 1 / 3)


def test_topr_by_hand():
    # Row 0 is positive (score 1): plain −A·logp, weighted 0.5. Row 1 (score 0): truncated
    # ratio min(r, 1) = e^-0.5, weighted 2.
    per_token, _, grad, _ = run("topr", topr_positive_weight=0.5, topr_negative_weight=2.0)
    assert_close(per_token[0], t([0.5 * 1.0, 0.5 * 0.5]))
    assert_close(per_token[1, 0], 2.0 * -math.exp(-0.5) * -2.0 * -2.0)
    assert_close(grad[1, 0], 2.0 * -math.exp(-0.5) * -2.0 / 3)


def test_topr_splits_by_score_not_advantage_sign():
    # Row 1 has A < 0; making its score positive switches it to the untruncated branch.
    per_token, _, _, _ = run("topr", scores=[1.0, 1.0])
    assert_close(per_token[1, 0], 2.0 * -2.0)  # −A·logp = −(−2)·(−2)


def test_topr_sequence_ratio_by_hand():
    # Negative row of two tokens: ρ = exp(Σ (logp − old)) = exp(0.3 − 0.1) = e^0.2 → clip 1;
    # with Σ = −0.4 − 0.3 = −0.7, ρ = e^-0.7 multiplies both tokens.
    logp, old = [[-1.0, -1.0], [-1.0, -1.0]], [[-1.3, -0.9], [-0.6, -0.7]]
    mask, adv = [[1.0, 1.0], [1.0, 1.0]], [[-1.0, -1.0], [-1.0, -1.0]]
    per_token, _, _, metrics = run("topr", logp=logp, old=old, mask=mask, adv=adv,
                                   scores=[0.0, 0.0], topr_ratio_level="sequence")
    assert_close(per_token[0], t([-1.0, -1.0]))  # −1·(−1)·(−1)
    assert_close(per_token[1], t([-math.exp(-0.7)] * 2))
    assert_close(metrics["clipfrac"], 0.5)


def test_cispo_by_hand():
    per_token, _, grad, _ = run("cispo", cispo_epsilon_low=0.2, cispo_epsilon_high=0.1)
    w = [[1.1, 1.0], [0.8, 0.0]]  # clip(r, 0.8, 1.1)
    assert_close(per_token, expect(lambda b, i: -w[b][i] * ADV[b][i] * LOGP[b][i]))
    assert_close(grad, expect(lambda b, i: -w[b][i] * ADV[b][i] / 3))


def test_cispo_unified_mask_by_hand():
    # Token (0,0): A > 0, r = 1.22 > 1.1 → dropped. Token (1,0): A < 0, r = 0.61 < 0.8 → dropped.
    per_token, _, grad, metrics = run("cispo", cispo_epsilon_low=0.2, cispo_epsilon_high=0.1,
                                      cispo_use_unified_mask=True)
    assert_close(per_token, t([[0.0, 0.5], [0.0, 0.0]]))  # −1·1·(−0.5)
    assert_close(grad, t([[0.0, -1.0 / 3], [0.0, 0.0]]))
    assert_close(metrics["cispo_maskfrac"], 2 / 3)
    assert_close(metrics["clipfrac"], 2 / 3)


def test_kimi15_by_hand():
    tau = 0.5
    per_token, _, grad, _ = run("kimi15", kimi15_tau=tau)

    def d(b, i):
        return LOGP[b][i] - OLD_LOGP[b][i]

    assert_close(per_token, expect(lambda b, i: -ADV[b][i] * LOGP[b][i] + tau / 2 * d(b, i) ** 2))
    assert_close(grad, expect(lambda b, i: (-ADV[b][i] + tau * d(b, i)) / 3))


def test_gspo_by_hand():
    # Row 0: s = exp(mean(0.2, 0)) = e^0.1 inside [0.8, 1.2]; row 1: s = e^-0.5 < 0.8 with A < 0
    # → the clipped 0.8 is the max; its gradient is 0.
    per_token, loss, grad, metrics = run("gspo", agg_mode="seq-mean-token-sum")
    s0 = math.exp(0.1)
    assert_close(per_token, t([[-s0, -s0], [1.6, 0.0]]))
    # d/dlogp_t of Σ_t −s·A = −A·s·(1/|y|) per token, summed over |y| = 2 tokens; / N_seq = 2.
    assert_close(grad, t([[-s0 / 2 * 2 / 2, -s0 / 2 * 2 / 2], [0.0, 0.0]]))
    assert_close(loss, (-2 * s0 + 1.6) / 2)
    assert_close(metrics["clipfrac"], 1 / 3)


def test_ratio_metrics_are_masked_and_zero_without_tokens():
    _, _, _, metrics = run("ppo", mask=[[0.0, 0.0], [0.0, 0.0]])
    for name in ("ratio_mean", "ratio_max", "ratio_min", "clipfrac", "approx_kl"):
        assert float(metrics[name]) == 0.0
        assert not metrics[name].requires_grad


@pytest.mark.parametrize("variant", core.PG_VARIANTS)
def test_every_variant_returns_the_common_metrics(variant):
    _, _, _, metrics = run(variant)
    assert {"ratio_mean", "ratio_max", "ratio_min", "clipfrac", "approx_kl"} <= set(metrics)
    assert all(m.dim() == 0 and torch.isfinite(m) for m in metrics.values())


def test_pg_variant_params_lists_signature_defaults():
    assert core.pg_variant_params("ppo") == {
        "pg_clip": 0.2, "pg_clip_low": None, "pg_clip_high": None, "dual_clip_loss": False,
        "dual_clip_c": 3.0}
    assert core.pg_variant_params("vanilla") == {}
    assert core.pg_variant_params("topr")["topr_ratio_level"] == "token"


def test_register_pg_variant_adds_a_variant():
    @core.register_pg_variant("test_half_vanilla", override=True)
    def half_vanilla(logp, old_logp, advantages, mask, *, scores=None, scale: float = 0.5):
        return -scale * advantages * logp, {}

    try:
        assert "test_half_vanilla" in core.registered_names("pg_variant")
        per_token = run("test_half_vanilla", scale=0.25)[0]
        assert_close(per_token, 0.25 * run("vanilla")[0])
    finally:  # other tests in this process list the registered names
        core.PG_VARIANT_REGISTRY.unregister("test_half_vanilla")


def test_topr_clipfrac_counts_only_a_truncation_that_changed_the_weight():
    # Negative row (score 0): ratios exactly 1, 1 + 1e-7 (rounding), 1.5 (truncated to 1), 0.5
    # (below the bound: untouched). The positive row is never truncated, even at ratio 1.5.
    ratios = [[1.0, 1.0 + 1e-7, 1.5, 0.5], [1.5, 1.0, 1.0, 1.0]]
    old = [[-1.0] * 4, [-1.0] * 4]
    logp = [[-1.0 + math.log(r) for r in row] for row in ratios]
    mask, adv = [[1.0] * 4, [1.0] * 4], [[-1.0] * 4, [1.0] * 4]
    _, _, _, metrics = run("topr", logp=logp, old=old, adv=adv, mask=mask, scores=[0.0, 1.0])
    assert_close(metrics["clipfrac"], 1 / 8)
    # Only rounding noise: nothing was clipped.
    noise = [[-1.0, -1.0 + 1e-7, -1.0 - 1e-7, -1.0]] * 2
    _, _, _, metrics = run("topr", logp=noise, old=old, adv=adv, mask=mask, scores=[0.0, 0.0])
    assert_close(metrics["clipfrac"], 0.0)
    _, _, _, metrics = run("topr", logp=noise, old=old, adv=adv, mask=mask, scores=[0.0, 0.0],
                           topr_ratio_level="sequence")
    assert_close(metrics["clipfrac"], 0.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("variant", "params"), [
    ("vanilla", {}),
    ("ppo", {}),
    ("ppo", {"pg_clip": 0.0}),  # both bounds at 1
    ("ppo", {"dual_clip_loss": True}),
    ("tis", {}),  # upper bound 1
    ("tis", {"tis_lower_bound": 1.0}),
    ("topr", {}),
    ("topr", {"topr_ratio_level": "sequence"}),
    ("cispo", {}),
    ("cispo", {"cispo_epsilon_low": 0.0, "cispo_epsilon_high": 0.0}),
    ("cispo", {"cispo_use_unified_mask": True}),
    ("kimi15", {}),
    ("gspo", {}),
    ("gspo", {"pg_clip_low": 3e-4, "pg_clip_high": 4e-4}),  # the paper's tight range
])
def test_clipfrac_is_zero_when_the_ratio_is_one_up_to_rounding(variant, params, dtype):
    # Log-ratios of ±1e-7 (a sampler and a learner that agree to float32 rounding), both signs of
    # A, every response negative: every clip bound of every variant is at or around 1.
    d = [[0.0, 1e-7, -1e-7, 2e-7], [-2e-7, 1e-7, 0.0, -1e-7]]
    old = [[-2.0] * 4, [-0.5] * 4]
    logp = torch.tensor(old, dtype=dtype) + torch.tensor(d, dtype=dtype)
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0], [-1.0, 1.0, -1.0, 1.0]], dtype=dtype)
    mask = torch.ones(2, 4, dtype=dtype)
    _, metrics = core.policy_loss(variant, logp, torch.tensor(old, dtype=dtype), adv, mask,
                                  scores=torch.zeros(2, dtype=dtype), **params)
    assert float(metrics["clipfrac"]) == 0.0
    assert float(metrics.get("cispo_maskfrac", 0.0)) == 0.0
    # A real excursion past a bound at 1 still counts: ratio 1.5 on token (0, 1), where A < 0
    # (PPO would not clip it: its pessimistic max keeps −r·A there).
    logp = logp.clone()
    logp[0, 1] = old[0][1] + math.log(1.5)
    _, metrics = core.policy_loss(variant, logp, torch.tensor(old, dtype=dtype), adv, mask,
                                  scores=torch.zeros(2, dtype=dtype), **params)
    if params.get("topr_ratio_level") == "sequence":  # the whole row's ρ exceeds 1
        assert float(metrics["clipfrac"]) == pytest.approx(4 / 8)
    elif variant in ("tis", "topr") or params.get("cispo_epsilon_high") == 0.0:
        assert float(metrics["clipfrac"]) == pytest.approx(1 / 8)
