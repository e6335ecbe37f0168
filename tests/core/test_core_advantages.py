"""Returns, GAE, group baselines, reward normalisation and whitening, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rllib_llm import core

F64 = torch.float64


def t(x):
    return torch.tensor(x, dtype=F64)


def test_discounted_returns_skip_holes_and_padding():
    rewards = t([[1.0, 50.0, 2.0, 99.0]])  # 50 sits in a hole, 99 in padding: both ignored
    mask = t([[1.0, 0.0, 1.0, 0.0]])
    returns = core.discounted_returns(rewards, mask, gamma=0.5)
    # The hole is skipped: G_2 = 2, G_0 = 1 + 0.5·2.
    torch.testing.assert_close(returns, t([[2.0, 0.0, 2.0, 0.0]]))


def test_gae_by_hand():
    rewards, values = t([[0.0, 1.0]]), t([[0.5, 0.2]])
    mask = t([[1.0, 1.0]])
    gamma, lam = 0.9, 0.8
    delta1 = 1.0 - 0.2  # last token: V_next = 0
    delta0 = 0.0 + gamma * 0.2 - 0.5
    adv1, adv0 = delta1, delta0 + gamma * lam * delta1
    advantages, returns = core.gae(rewards, values, mask, gamma=gamma, lambd=lam)
    torch.testing.assert_close(advantages, t([[adv0, adv1]]))
    torch.testing.assert_close(returns, t([[adv0 + 0.5, adv1 + 0.2]]))


def test_gae_skips_holes_and_never_reads_padding_values():
    rewards = t([[0.0, 7.0, 1.0, 3.0]])
    values = t([[0.5, 100.0, 0.2, 100.0]])
    mask = t([[1.0, 0.0, 1.0, 0.0]])
    advantages, returns = core.gae(rewards, values, mask, gamma=1.0, lambd=1.0)
    # With γ = λ = 1, Â_t = Σ r − V_t over mask tokens: Â_2 = 1 − 0.2, Â_0 = 1 − 0.5.
    torch.testing.assert_close(advantages, t([[0.5, 0.0, 0.8, 0.0]]))
    torch.testing.assert_close(returns, t([[1.0, 0.0, 1.0, 0.0]]))


def test_gae_per_row_lambda():
    rewards, values, mask = t([[0.0, 1.0]] * 2), t([[0.5, 0.0]] * 2), t([[1.0, 1.0]] * 2)
    advantages, _ = core.gae(rewards, values, mask, gamma=1.0, lambd=t([0.0, 1.0]))
    # λ = 0: Â_0 = δ_0 = 0 + 0 − 0.5; λ = 1: Â_0 = δ_0 + δ_1 = −0.5 + 1.
    torch.testing.assert_close(advantages[:, 0], t([-0.5, 0.5]))


def test_length_adaptive_lambda_by_hand():
    lam = core.length_adaptive_lambda(torch.tensor([0, 10, 40, 200]), 0.05)
    # 1 − 1/(0.05·l): l = 10 → −1 → 0; 40 → 0.5; 200 → 0.9; l = 0 → 0.
    torch.testing.assert_close(lam, torch.tensor([0.0, 0.0, 0.5, 0.9]))


def test_group_estimators_by_hand():
    scores = t([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])  # two groups of 3
    std0 = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # unbiased std of (1, 0, 0)
    grpo = core.group_advantages(scores, 3, "grpo")
    torch.testing.assert_close(grpo[:3], t([2 / 3, -1 / 3, -1 / 3]) / (std0 + 1e-6))
    torch.testing.assert_close(grpo[3:], -grpo[:3], atol=1e-12, rtol=0)  # (0, 1, 1) mirrors
    rloo = core.group_advantages(scores, 3, "rloo")
    # score − mean of the other two: 1 − 0, 0 − ½, 0 − ½.
    torch.testing.assert_close(rloo[:3], t([1.0, -0.5, -0.5]))
    baseline = core.group_advantages(scores, 3, "reinforce_baseline")
    torch.testing.assert_close(baseline[:3], t([2 / 3, -1 / 3, -1 / 3]))


def test_unanimous_group_gives_zero_grpo_advantage():
    adv = core.group_advantages(t([1.0, 1.0, 0.0, 0.0]), 2, "grpo")
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_register_group_estimator():
    @core.register_group_estimator("test_max_baseline", override=True)
    def max_baseline(grouped):
        return grouped - grouped.amax(dim=-1, keepdim=True)

    adv = core.group_advantages(t([1.0, 3.0, 2.0, 2.0]), 2, "test_max_baseline")
    assert adv.tolist() == [-2.0, 0.0, 0.0, 0.0]


SCORES = t([1.0, 3.0, 2.0, 6.0])


def test_reward_norm_by_hand():
    group = core.reward_norm(SCORES, 2, mean_type="group", std_type="group")
    s1, s2 = math.sqrt(2), math.sqrt(8)  # unbiased std of (1, 3) and (2, 6)
    torch.testing.assert_close(group, t([-1 / (s1 + 1e-6), 1 / (s1 + 1e-6),
                                         -2 / (s2 + 1e-6), 2 / (s2 + 1e-6)]))
    shift_only = core.reward_norm(SCORES, 2, mean_type="batch", std_type=None)
    torch.testing.assert_close(shift_only, SCORES - 3.0)
    scale_only = core.reward_norm(SCORES, 2, mean_type=None, std_type="batch")
    torch.testing.assert_close(scale_only, SCORES / (SCORES.std() + 1e-6))
    mixed = core.reward_norm(SCORES, 2, mean_type="group", std_type="batch")
    torch.testing.assert_close(mixed, t([-1.0, 1.0, -2.0, 2.0]) / (SCORES.std() + 1e-6))
    assert core.reward_norm(SCORES, 2, mean_type=None, std_type=None).tolist() == SCORES.tolist()


def test_running_reward_norm_uses_all_batches_seen():
    stats = core.RunningMeanStd()
    first = core.reward_norm(SCORES, 2, mean_type="running", std_type="running",
                             running_stats=stats)
    torch.testing.assert_close(first, (SCORES - 3.0) / (SCORES.std() + 1e-6))
    second_batch = t([10.0, 0.0])
    second = core.reward_norm(second_batch, 2, mean_type="running", std_type="running",
                              running_stats=stats)
    seen = torch.cat([SCORES, second_batch])
    torch.testing.assert_close(second, (second_batch - seen.mean()) / (seen.std() + 1e-6))
    assert stats.count == 6


def test_running_mean_std_state_round_trip():
    stats = core.RunningMeanStd()
    stats.update(t([1.0, 2.0, 4.0]))
    copy = core.RunningMeanStd()
    copy.load_state_dict(stats.state_dict())
    assert (copy.count, copy.mean, copy.var) == (3, pytest.approx(7 / 3), pytest.approx(
        t([1.0, 2.0, 4.0]).var().item()))


def test_whiten_by_hand():
    values = t([[1.0, 2.0, 99.0], [3.0, -5.0, -5.0]])
    mask = t([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    # Tokens 1, 2, 3: mean 2, unbiased var 1.
    expected = t([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]) / math.sqrt(1 + 1e-8)
    torch.testing.assert_close(core.whiten(values, mask), expected)
    rescaled = core.whiten(values, mask, shift_mean=False)
    torch.testing.assert_close(rescaled, (expected + 2.0) * mask)
