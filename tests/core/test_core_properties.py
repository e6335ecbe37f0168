"""Hypothesis properties of rllib_llm.core: masked tokens change nothing, micro-batching changes
nothing, vectorised GAE equals a plain loop, group baselines are centred, stop-gradients show in
the gradient, every variant takes REINFORCE's gradient at ratio 1, and bf16 inputs give float32 results close to float32 inputs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rllib_llm import core

FAST = settings(max_examples=25, deadline=None)
F64 = torch.float64

# Non-default parameters so the clipping/masking branches are exercised.
VARIANT_PARAMS = {
    "vanilla": {},
    "ppo": {"pg_clip_low": 0.2, "pg_clip_high": 0.28, "dual_clip_loss": True},
    "tis": {"tis_lower_bound": 0.5, "tis_upper_bound": 1.5},
    "topr": {"topr_positive_weight": 0.5, "topr_negative_weight": 2.0},
    "cispo": {"cispo_epsilon_low": 0.2, "cispo_epsilon_high": 0.28,
              "cispo_use_unified_mask": True},
    "kimi15": {"kimi15_tau": 0.5},
    "gspo": {},
}
CASES = [pytest.param(v, p, id=v) for v, p in VARIANT_PARAMS.items()] + [
    pytest.param("topr", {"topr_ratio_level": "sequence"}, id="topr-sequence"),
    pytest.param("gspo", {"pg_clip_low": 3e-4, "pg_clip_high": 4e-4}, id="gspo-paper-clip"),
]


@dataclass
class Batch:
    logp: torch.Tensor  # (B, T)
    old_logp: torch.Tensor  # (B, T)
    advantages: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T) float 0/1
    scores: torch.Tensor  # (B,)


@st.composite
def batches(draw, max_b: int = 6, max_t: int = 6) -> Batch:
    b, t = draw(st.integers(1, max_b)), draw(st.integers(1, max_t))
    rows = st.lists(st.booleans(), min_size=t, max_size=t)
    mask = torch.tensor(draw(st.lists(rows, min_size=b, max_size=b)), dtype=F64)
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    logp = -3 * torch.rand(b, t, generator=g, dtype=F64)
    old_logp = logp + 0.4 * torch.randn(b, t, generator=g, dtype=F64)
    advantages = torch.randn(b, t, generator=g, dtype=F64)
    scores = torch.randint(0, 2, (b,), generator=g).to(F64)
    return Batch(logp, old_logp, advantages, mask, scores)


def loss_and_grad(variant, params, batch: Batch, mode: str, logp=None, old_logp=None,
                  advantages=None):
    logp = (batch.logp if logp is None else logp).clone().requires_grad_(True)
    per_token, _ = core.policy_loss(
        variant, logp, batch.old_logp if old_logp is None else old_logp,
        batch.advantages if advantages is None else advantages, batch.mask,
        scores=batch.scores, **params,
    )
    loss = core.agg_loss(per_token, batch.mask, mode)
    (grad,) = torch.autograd.grad(loss, logp)
    return per_token.detach(), loss.detach(), grad


def garbage_outside(x: torch.Tensor, mask: torch.Tensor, seed: int) -> torch.Tensor:
    noise = 50 * torch.randn(x.shape, generator=torch.Generator().manual_seed(seed), dtype=F64)
    return torch.where(mask > 0, x, noise)


@pytest.mark.parametrize(("variant", "params"), CASES)
@FAST
@given(batch=batches(), seed=st.integers(0, 1000))
def test_values_at_masked_positions_change_nothing(variant, params, batch, seed):
    for mode in core.AGG_MODES:
        clean = loss_and_grad(variant, params, batch, mode)
        noisy = loss_and_grad(
            variant, params, batch, mode,
            logp=garbage_outside(batch.logp, batch.mask, seed),
            old_logp=garbage_outside(batch.old_logp, batch.mask, seed + 1),
            advantages=garbage_outside(batch.advantages, batch.mask, seed + 2),
        )
        for a, b in zip(clean, noisy, strict=True):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
        assert torch.all(clean[2][batch.mask == 0] == 0)  # no gradient into padding


@st.composite
def splits(draw, batch_size: int) -> list[int]:
    cuts = draw(st.sets(st.integers(1, max(batch_size - 1, 1)), max_size=batch_size))
    cuts = sorted(c for c in cuts if c < batch_size)
    return [0, *cuts, batch_size]


@pytest.mark.parametrize("mode", core.AGG_MODES)
@FAST
@given(data=st.data())
def test_micro_batches_with_whole_batch_counts_sum_to_the_whole_loss(mode, data):
    batch = data.draw(batches(max_b=8))
    bounds = data.draw(splits(batch.mask.shape[0]))
    counts = core.agg_counts(batch.mask)
    whole = core.agg_loss(batch.advantages, batch.mask, mode)
    parts = sum(
        core.agg_loss(batch.advantages[lo:hi], batch.mask[lo:hi], mode,
                      norm_length=batch.mask.shape[1], num_tokens=counts.num_tokens,
                      num_seqs=counts.num_seqs)
        for lo, hi in itertools.pairwise(bounds)
    )
    torch.testing.assert_close(parts, whole, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(("variant", "params"), CASES)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_accumulated_micro_batch_gradients_equal_the_whole_batch_gradient(variant, params, data):
    batch = data.draw(batches(max_b=8))
    bounds = data.draw(splits(batch.mask.shape[0]))
    counts = core.agg_counts(batch.mask)
    for mode in core.AGG_MODES:
        _, whole_loss, whole_grad = loss_and_grad(variant, params, batch, mode)
        logp = batch.logp.clone().requires_grad_(True)
        total = 0.0
        for lo, hi in itertools.pairwise(bounds):
            per_token, _ = core.policy_loss(
                variant, logp[lo:hi], batch.old_logp[lo:hi], batch.advantages[lo:hi],
                batch.mask[lo:hi], scores=batch.scores[lo:hi], **params,
            )
            total = total + core.agg_loss(per_token, batch.mask[lo:hi], mode,
                                          num_tokens=counts.num_tokens, num_seqs=counts.num_seqs)
        (grad,) = torch.autograd.grad(total, logp)
        torch.testing.assert_close(total.detach(), whole_loss, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(grad, whole_grad, atol=1e-12, rtol=1e-12)


def _stop_gradient_weight(variant: str, batch: Batch) -> torch.Tensor:
    """sg(weight) of the REINFORCE-style variants, from their formulas (token ratio r)."""
    r = torch.exp(batch.logp - batch.old_logp)
    if variant == "tis":
        return r.clamp(0.5, 1.5)
    if variant == "cispo":
        a = batch.advantages
        dropped = ((a > 0) & (r > 1.28)) | ((a < 0) & (r < 0.8))
        return torch.where(dropped, 0.0, r.clamp(0.8, 1.28))
    positive = batch.scores[:, None] > 0  # topr
    return torch.where(positive, 0.5, 2.0 * r.clamp(0.0, 1.0))


@pytest.mark.parametrize("variant", ["tis", "topr", "cispo"])
@FAST
@given(batch=batches())
def test_stop_gradient_shows_in_the_gradient(variant, batch):
    """d(token-mean loss)/d logp = −sg(w)·A·mask/N: the weight is a constant, so the gradient is
    not that of r·A (which would carry an extra w·A·logp term)."""
    _, _, grad = loss_and_grad(variant, VARIANT_PARAMS[variant], batch, "token-mean")
    n = batch.mask.sum().clamp(min=1)
    expected = -_stop_gradient_weight(variant, batch) * batch.advantages * batch.mask / n
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=1e-10)


def _at_ratio_one(batch: Batch) -> Batch:
    """`batch` as one optimizer step per iteration sees it: old_logp = logp up to float32
    rounding (sampler and learner agree to ~1e-6), one advantage per response (GRPO's)."""
    g = torch.Generator().manual_seed(0)
    rounding = 1e-6 * (2 * torch.rand(batch.logp.shape, generator=g, dtype=F64) - 1)
    advantages = batch.advantages[:, :1].expand_as(batch.logp)
    return Batch(batch.logp, batch.logp + rounding, advantages, batch.mask, batch.scores)


@pytest.mark.parametrize("variant", core.PG_VARIANTS)
@FAST
@given(batch=batches())
def test_at_ratio_one_every_variant_takes_vanillas_gradient(variant, batch):
    """With one optimizer step per iteration the ratio is 1 up to rounding, and every built-in
    variant at its defaults then has REINFORCE's gradient −A·mask in every aggregation (GSPO's
    d s/d logp = s/|y| summed over the response's |y| tokens gives the same). So a learning run of
    one variant is a learning run of each (examples/topr_arithmetic.py's run, in CI, stands for
    all; tests/project/test_learning.py says so), and a variant with a wrong sign or a lost term
    fails here. Away from ratio 1 they differ."""
    at_one = _at_ratio_one(batch)
    for mode in core.AGG_MODES:
        _, _, grad = loss_and_grad(variant, {}, at_one, mode)
        _, _, vanilla = loss_and_grad("vanilla", {}, at_one, mode)
        torch.testing.assert_close(grad, vanilla, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("variant", sorted(set(core.PG_VARIANTS) - {"vanilla"}))
def test_away_from_ratio_one_the_variants_gradients_differ_from_vanillas(variant):
    """The other side of the equality above: it is the ratio's, not a variant that ignores
    its ratio (log-ratios of ~0.4 move every variant off REINFORCE's gradient)."""
    g = torch.Generator().manual_seed(1)
    b, t = 6, 5
    batch = Batch(logp=-3 * torch.rand(b, t, generator=g, dtype=F64),
                  old_logp=torch.zeros(b, t, dtype=F64), advantages=torch.zeros(b, t, dtype=F64),
                  mask=torch.ones(b, t, dtype=F64), scores=torch.tensor([1.0, 0, 1, 0, 0, 1],
                                                                        dtype=F64))
    batch.old_logp = batch.logp + 0.4 * torch.randn(b, t, generator=g, dtype=F64)
    batch.advantages = torch.randn(b, 1, generator=g, dtype=F64).expand(b, t)
    _, _, grad = loss_and_grad(variant, {}, batch, "token-mean")
    _, _, vanilla = loss_and_grad("vanilla", {}, batch, "token-mean")
    assert (grad - vanilla).abs().max() > 1e-3


def gae_loop(rewards, values, mask, gamma, lambdas):
    """cleanrl-style GAE per row, over the row's mask tokens only (holes skipped)."""
    advantages = [[0.0] * len(row) for row in rewards]
    for b, row in enumerate(mask):
        next_value, lastgaelam = 0.0, 0.0
        for t in reversed([t for t, m in enumerate(row) if m]):
            delta = rewards[b][t] + gamma * next_value - values[b][t]
            lastgaelam = delta + gamma * lambdas[b] * lastgaelam
            advantages[b][t] = lastgaelam
            next_value = values[b][t]
    returns = [[a + (v if m else 0.0) for a, v, m in zip(ar, vr, mr, strict=True)]
               for ar, vr, mr in zip(advantages, values, mask, strict=True)]
    return advantages, returns


@FAST
@given(batch=batches(max_t=8), gamma=st.floats(0.5, 1.0), per_row=st.booleans(),
       lam=st.floats(0.0, 1.0))
def test_vectorised_gae_equals_a_plain_loop(batch, gamma, per_row, lam):
    b = batch.mask.shape[0]
    lambdas = torch.linspace(0.0, 1.0, b, dtype=F64) if per_row else torch.full((b,), lam,
                                                                             dtype=F64)
    rewards, values = batch.advantages, batch.old_logp
    advantages, returns = core.gae(rewards, values, batch.mask, gamma=gamma,
                                   lambd=lambdas if per_row else lam)
    loop_adv, loop_ret = gae_loop(rewards.tolist(), values.tolist(), batch.mask.tolist(), gamma,
                                  lambdas.tolist())
    torch.testing.assert_close(advantages, torch.tensor(loop_adv, dtype=F64))
    torch.testing.assert_close(returns, torch.tensor(loop_ret, dtype=F64))


@FAST
@given(batch=batches(max_t=8), gamma=st.floats(0.5, 1.0))
def test_discounted_returns_are_gae_with_zero_values_and_lambda_one(batch, gamma):
    returns = core.discounted_returns(batch.advantages, batch.mask, gamma=gamma)
    loop_adv, _ = gae_loop(batch.advantages.tolist(), [[0.0] * batch.mask.shape[1]] * len(
        batch.mask), batch.mask.tolist(), gamma, [1.0] * len(batch.mask))
    torch.testing.assert_close(returns, torch.tensor(loop_adv, dtype=F64))


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_baseline"])
@FAST
@given(group_size=st.integers(2, 5), groups=st.integers(1, 4), seed=st.integers(0, 1000),
       binary=st.booleans())
def test_group_advantages_sum_to_zero_per_group(estimator, group_size, groups, seed, binary):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(group_size * groups, generator=g, dtype=F64)
    if binary:  # verifier-style 0/1 scores, including unanimous groups
        scores = (scores > 0).to(F64)
    adv = core.group_advantages(scores, group_size, estimator).reshape(groups, group_size)
    torch.testing.assert_close(adv.sum(-1), torch.zeros(groups, dtype=F64), atol=1e-9, rtol=0)


def _bf16_pair(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    low = x.to(torch.bfloat16)
    return low, low.to(torch.float32)


@pytest.mark.parametrize(("variant", "params"), CASES)
@settings(max_examples=10, deadline=None)
@given(batch=batches())
def test_bf16_inputs_give_finite_float32_results_close_to_float32(variant, params, batch):
    logp16, logp32 = _bf16_pair(batch.logp)
    old16, old32 = _bf16_pair(batch.old_logp)
    adv16, adv32 = _bf16_pair(batch.advantages)
    mask16 = batch.mask.to(torch.bfloat16)
    out = {}
    for name, (lp, old, adv) in {"bf16": (logp16, old16, adv16),
                                 "f32": (logp32, old32, adv32)}.items():
        lp = lp.clone().requires_grad_(True)
        per_token, metrics = core.policy_loss(variant, lp, old, adv, mask16, scores=batch.scores,
                                              **params)
        loss = core.agg_loss(per_token, mask16, "seq-mean-token-mean")
        (grad,) = torch.autograd.grad(loss, lp)
        out[name] = (per_token, loss, grad.float(), metrics)
    per_token, loss, grad, metrics = out["bf16"]
    assert per_token.dtype == loss.dtype == torch.float32
    assert all(torch.isfinite(x).all() for x in (per_token, loss, grad, *metrics.values()))
    torch.testing.assert_close(per_token, out["f32"][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss, out["f32"][1], atol=1e-5, rtol=1e-5)
    # The bf16 gradient is rounded to bf16 on its way back to the bf16 leaf.
    torch.testing.assert_close(grad, out["f32"][2], atol=1e-2, rtol=1e-2)


@settings(max_examples=15, deadline=None)
@given(batch=batches(max_t=8))
def test_bf16_advantages_and_kl_close_to_float32(batch):
    for dtype_in in (torch.bfloat16,):
        rewards16, rewards32 = _bf16_pair(batch.advantages)
        values16, values32 = _bf16_pair(batch.old_logp)
        mask = batch.mask.to(dtype_in)
        pairs = [
            (core.gae(rewards16, values16, mask, gamma=0.99, lambd=0.95),
             core.gae(rewards32, values32, mask, gamma=0.99, lambd=0.95)),
            (core.whiten(rewards16, mask), core.whiten(rewards32, mask)),
            (core.kl_estimate(rewards16, values16, "k3"), core.kl_estimate(rewards32, values32,
                                                                           "k3")),
            (core.discounted_returns(rewards16, mask, gamma=0.9),
             core.discounted_returns(rewards32, mask, gamma=0.9)),
        ]
        for low, high in pairs:
            low, high = (low, high) if isinstance(low, tuple) else ((low,), (high,))
            for a, b in zip(low, high, strict=True):
                assert a.dtype == torch.float32 and torch.isfinite(a).all()
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
