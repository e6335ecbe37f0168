"""compute_advantages (docs/ALGORITHMS.md, "Rewards and advantages", steps 1–6) by hand."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from rllib_llm import core

F64 = torch.float64
RAW = {"whiten_advantages": False, "advantage_clip": None}  # steps 5–6 off


def t(x):
    return torch.tensor(x, dtype=F64)


def test_grpo_spreads_the_group_value_over_mask_tokens():
    scores = t([1.0, 0.0, 0.5, 0.5])
    mask = t([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]])
    adv, returns, rewards = core.compute_advantages(
        core.AdvantageInputs(scores, mask), core.AdvantageSettings("grpo", group_size=2, **RAW))
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # (1 − ½)/(unbiased std of (1, 0) + 1e-6)
    torch.testing.assert_close(adv, t([[a, a, 0], [-a, 0, 0], [0, 0, 0], [0, 0, 0]]))
    # The score sits on the last mask token; the empty row has none.
    torch.testing.assert_close(rewards, t([[0, 1, 0], [0, 0, 0], [0, 0, 0.5], [0, 0, 0]]))
    torch.testing.assert_close(returns, t([[1, 1, 0], [0, 0, 0], [0.5, 0.5, 0.5], [0, 0, 0]]))


def test_reinforce_with_kl_in_the_reward():
    scores, mask = t([2.0]), t([[1, 1, 1, 0]])
    token_kl = t([[0.1, 0.2, 0.3, 7.0]])  # 7.0 sits in padding
    adv, returns, rewards = core.compute_advantages(
        core.AdvantageInputs(scores, mask, token_kl=token_kl, kl_coef=0.5),
        core.AdvantageSettings("reinforce", **RAW))
    torch.testing.assert_close(rewards, t([[-0.05, -0.1, 2 - 0.15, 0]]))
    torch.testing.assert_close(returns, t([[1.7, 1.75, 1.85, 0]]))
    torch.testing.assert_close(adv, returns)


def test_whitening_then_clipping():
    scores, mask = t([2.0]), t([[1, 1, 1]])
    token_kl = t([[0.1, 0.2, 0.3]])
    adv, _, _ = core.compute_advantages(
        core.AdvantageInputs(scores, mask, token_kl=token_kl, kl_coef=0.5),
        core.AdvantageSettings("reinforce", advantage_clip=1.0))
    raw = [1.7, 1.75, 1.85]
    mu, var = statistics.mean(raw), statistics.variance(raw)  # Bessel-corrected
    expected = [max(min((x - mu) / math.sqrt(var + 1e-8), 1.0), -1.0) for x in raw]
    assert expected[2] == 1.0  # the clip bites
    torch.testing.assert_close(adv, t([expected]))


def test_reward_clip_then_batch_normalisation():
    scores, mask = t([5.0, -1.0, 0.5, 0.5]), torch.ones(4, 2, dtype=F64)
    _, _, rewards = core.compute_advantages(
        core.AdvantageInputs(scores, mask),
        core.AdvantageSettings("reinforce", reward_clip=1.0, norm_mean_type="batch",
                               norm_std_type="batch", **RAW))
    clipped = [1.0, -1.0, 0.5, 0.5]
    mu, sd = statistics.mean(clipped), statistics.stdev(clipped)
    torch.testing.assert_close(rewards[:, 1], t([(x - mu) / (sd + 1e-6) for x in clipped]))
    assert rewards[:, 0].tolist() == [0.0] * 4


def test_group_estimator_with_kl_adds_the_kl_return():
    scores, mask = t([1.0, 0.0]), t([[1, 1], [1, 1]])
    token_kl = t([[0.2, 0.4], [0.0, 0.0]])
    adv, _, _ = core.compute_advantages(
        core.AdvantageInputs(scores, mask, token_kl=token_kl, kl_coef=1.0),
        core.AdvantageSettings("reinforce_baseline", group_size=2, **RAW))
    # Group value ±½ on every token, minus the KL still to come: Σ_{k≥t} kl_k.
    torch.testing.assert_close(adv, t([[0.5 - 0.6, 0.5 - 0.4], [-0.5, -0.5]]))


def test_gae_through_the_pipeline():
    scores, mask, values = t([1.0]), t([[1, 1]]), t([[0.5, 0.2]])
    gamma, lam = 0.9, 0.8
    adv, returns, _ = core.compute_advantages(
        core.AdvantageInputs(scores, mask, values=values),
        core.AdvantageSettings("gae", gamma=gamma, lambd=lam, **RAW))
    adv1 = 1.0 - 0.2
    adv0 = gamma * 0.2 - 0.5 + gamma * lam * adv1
    torch.testing.assert_close(adv, t([[adv0, adv1]]))
    torch.testing.assert_close(returns, t([[adv0 + 0.5, adv1 + 0.2]]))


def test_turn_rewards_are_dense_rewards_where_they_were_paid():
    # One response of 3 agent tokens with a hole (an env token) after the first; a turn reward
    # of 0.5 on the first token, the score 1.0 on the last.
    scores, mask = t([1.0]), t([[1, 0, 1, 1]])
    turns = t([[0.5, 0.0, 0.0, 0.0]])
    values = t([[0.1, 9.0, 0.2, 0.3]])  # 9.0 sits in the hole: never read
    gamma, lam = 0.9, 0.8
    adv, returns, rewards = core.compute_advantages(
        core.AdvantageInputs(scores, mask, values=values, turn_rewards=turns),
        core.AdvantageSettings("gae", gamma=gamma, lambd=lam, **RAW))
    torch.testing.assert_close(rewards, t([[0.5, 0.0, 0.0, 1.0]]))
    d3 = 1.0 - 0.3
    d2 = gamma * 0.3 - 0.2
    d0 = 0.5 + gamma * 0.2 - 0.1
    a3, a2 = d3, d2 + gamma * lam * d3
    a0 = d0 + gamma * lam * a2
    torch.testing.assert_close(adv, t([[a0, 0.0, a2, a3]]))
    torch.testing.assert_close(returns, t([[a0 + 0.1, 0.0, a2 + 0.2, a3 + 0.3]]))
    # Normalisation acts on the score alone: the turn reward keeps its size.
    _, _, rewards = core.compute_advantages(
        core.AdvantageInputs(t([1.0, 3.0]), t([[1, 1], [1, 1]]),
                             turn_rewards=t([[0.5, 0.0], [0.0, 0.0]])),
        core.AdvantageSettings("reinforce", norm_mean_type="batch", norm_std_type="batch", **RAW))
    torch.testing.assert_close(rewards, t([[0.5, -(2 ** -0.5)], [0.0, 2 ** -0.5]]),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="turn_rewards"):
        core.compute_advantages(core.AdvantageInputs(scores, mask, turn_rewards=t([[0.5, 0.0]])),
                                core.AdvantageSettings("reinforce"))


def test_decoupled_gae_critic_returns_use_critic_lambd():
    scores, mask, values = t([1.0]), t([[1, 1]]), t([[0.5, 0.2]])
    adv, returns, _ = core.compute_advantages(
        core.AdvantageInputs(scores, mask, values=values),
        core.AdvantageSettings("gae", gamma=0.9, lambd=0.8, critic_lambd=1.0, **RAW))
    # λ = 1: returns are the Monte-Carlo returns, whatever the values: (γ·1, 1).
    torch.testing.assert_close(returns, t([[0.9, 1.0]]))
    torch.testing.assert_close(adv[0, 1], torch.tensor(0.8, dtype=F64))  # actor keeps λ = 0.8


def test_length_adaptive_lambda_in_the_pipeline():
    mask = torch.zeros(2, 200, dtype=F64)
    mask[0, :40], mask[1, :] = 1, 1
    scores = t([1.0, -1.0])
    values = torch.linspace(0, 1, 200, dtype=F64).expand(2, 200) * mask
    adv, _, rewards = core.compute_advantages(
        core.AdvantageInputs(scores, mask, values=values),
        core.AdvantageSettings("gae", length_adaptive_alpha=0.05, **RAW))
    expected, _ = core.gae(rewards, values, mask, gamma=1.0, lambd=t([0.5, 0.9]))
    torch.testing.assert_close(adv, expected)


def test_register_adv_estimator():
    @core.register_adv_estimator("test_score_only", needs_groups=False, override=True)
    def score_only(inputs: core.EstimatorInputs):
        spread = inputs.scores[:, None] * inputs.mask
        return spread, spread

    adv, _, _ = core.compute_advantages(core.AdvantageInputs(t([3.0]), t([[1, 0]])),
                                        core.AdvantageSettings("test_score_only", **RAW))
    assert adv.tolist() == [[3.0, 0.0]]
    assert "test_score_only" in core.registered_names("adv_estimator")


@pytest.mark.parametrize("estimator", core.ADV_ESTIMATORS)
def test_every_estimator_whitens_to_zero_mean_and_stays_in_the_clip(estimator):
    g = torch.Generator().manual_seed(0)
    mask = (torch.rand(6, 5, generator=g) > 0.3).to(F64)
    mask[:, 0] = 1
    scores = torch.randn(6, generator=g, dtype=F64)
    values = torch.randn(6, 5, generator=g, dtype=F64)
    inputs = core.AdvantageInputs(scores, mask, values=values)
    adv, returns, _ = core.compute_advantages(
        inputs, core.AdvantageSettings(estimator, group_size=3, advantage_clip=None))
    assert core.masked_mean(adv, mask).abs().item() < 1e-9
    assert (adv[mask == 0] == 0).all() and (returns[mask == 0] == 0).all()
    clipped, _, _ = core.compute_advantages(
        inputs, core.AdvantageSettings(estimator, group_size=3, advantage_clip=0.5))
    assert clipped.abs().max().item() <= 0.5


def test_compute_advantages_takes_a_batch_and_its_settings():
    """A batch's tensors and one frozen settings object built once (STYLE.md habit 18), not 18
    keyword parameters."""
    import dataclasses
    import inspect

    assert list(inspect.signature(core.compute_advantages).parameters) == [
        "inputs", "settings", "running_stats"]
    settings = core.AdvantageSettings("grpo", group_size=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.gamma = 0.5
