"""What the learner connector takes out of the loss, and the scores it shapes: DAPO's overlong
reward shaping (the scores the advantages come from carry the hand-computed penalty), overlong
filtering (a truncated response leaves the loss mask and nothing else changes) and masked
importance sampling (tokens whose recomputed ratio leaves the bounds leave the mask)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm import core
from rllib_llm.exchange.columns import ACTION_MASK, ADVANTAGES, SCORES, TRUNCATED
from rllib_llm.learner import connector as stages
from rllib_llm.learner.connector import PackAndComputeAdvantages
from rllib_llm.recipes.embedded import embedded_config

SPACE = gym.spaces.Discrete(50)
RESPONSE_LENGTH = 6
# One group of four: (agent tokens, reward, truncated). The last hits the limit without EOS.
ROWS = [(2, 1.0, False), (4, 0.0, False), (5, 1.0, False), (6, 0.0, True)]


class NoModelModule(torch.nn.Module):
    """The connector asks its module for a reference model, a critic, a teacher, a device and, to
    recompute old_logp, the learner's log-probs: here `learner_logp`, a stand-in whose values the
    tests choose (the module's own scoring is tested in tests/learner/test_token_logp.py)."""

    has_reference = False
    has_critic = False
    has_teacher = False

    def __init__(self, learner_logp: torch.Tensor | None = None):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.learner_logp = learner_logp

    def unwrapped(self):
        return self

    def score_tokens(self, rows, reference: bool):
        assert not reference
        return self.learner_logp[:, : rows[ACTION_MASK].shape[1]]


def episode(length: int, reward: float, truncated: bool) -> SingleAgentEpisode:
    actions = list(range(10, 10 + length))
    infos = [{"prompt_ids": [1, 2], "group_id": "g"}] + [{} for _ in actions]
    return SingleAgentEpisode(
        observations=[2, *actions], infos=infos, actions=actions,
        rewards=[0.0] * (length - 1) + [reward], terminated=not truncated, truncated=truncated,
        extra_model_outputs={"action_logp": np.full(length, -0.5, np.float32)},
        observation_space=SPACE, action_space=SPACE, len_lookback_buffer=0,
    ).to_numpy()


def connect(learner_logp=None, metrics=None, **overrides) -> dict[str, torch.Tensor]:
    cfg = embedded_config("ppo", adv_estimator="grpo", rollout_batch_size=1,
                          num_return_sequences_in_group=4, response_length=RESPONSE_LENGTH,
                          whiten_advantages=False, advantage_clip=None, **overrides)
    connector = PackAndComputeAdvantages(config=cfg, pad_token_id=0)
    episodes = [episode(*row) for row in ROWS]
    out = connector(rl_module={DEFAULT_MODULE_ID: NoModelModule(learner_logp)}, batch={},
                    episodes=episodes, metrics=metrics)
    return out[DEFAULT_MODULE_ID]


class Metrics:
    """The connector's metrics logger, keeping the last value of each name."""

    def __init__(self):
        self.values: dict[str, float] = {}

    def log_value(self, key, value, **kwargs):
        self.values[key[-1] if isinstance(key, tuple) else key] = value


def test_the_truncated_column_says_which_responses_hit_the_limit():
    assert connect()[TRUNCATED].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_the_overlong_penalty_is_added_to_the_scores_before_the_advantages():
    plain, shaped = connect(), connect(overlong_buffer_len=2, overlong_penalty_factor=0.5)
    # L_max 6, L_cache 2: lengths 2, 4 -> 0; 5 -> -0.5 x 0.5; 6 -> -1 x 0.5.
    assert plain[SCORES].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert shaped[SCORES].tolist() == [1.0, 0.0, 0.75, -0.5]
    # GRPO on the shaped scores, by hand: (s - mean) / (std + eps), broadcast over the tokens.
    scores = torch.tensor([1.0, 0.0, 0.75, -0.5])
    want = (scores - scores.mean()) / (scores.std() + 1e-6)
    got = shaped[ADVANTAGES][:, 0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(plain[ADVANTAGES][:, 0], got)


def test_an_auto_overlong_buffer_is_a_fifth_of_the_response_and_follows_it():
    # DAPO: 4,096 of 20,480 tokens. L_max 6: L_cache 1, so only the length-6 response pays, -1.
    shaped = connect(overlong_buffer_len="auto")
    assert shaped[SCORES].tolist() == [1.0, 0.0, 1.0, -1.0]
    cfg = embedded_config("ppo", overlong_buffer_len="auto", response_length=20480)
    assert cfg.resolved_overlong_buffer_len == 4096
    cfg.training(response_length=3)
    assert cfg.resolved_overlong_buffer_len == 1  # at least one token
    assert embedded_config("ppo").resolved_overlong_buffer_len is None


def test_masking_truncated_completions_drops_their_tokens_and_changes_nothing_else():
    plain, masked = connect(), connect(mask_truncated_completions=True)
    assert masked[ACTION_MASK][3].sum() == 0  # the truncated response: out of the loss
    assert torch.equal(masked[ACTION_MASK][:3], plain[ACTION_MASK][:3])
    # It still counts in its group's baseline: the advantages are the unmasked run's.
    assert torch.equal(masked[ADVANTAGES], plain[ADVANTAGES])
    # And the loss's normalisers count only the rows left (core.agg_counts).
    counts = core.agg_counts(masked[ACTION_MASK])
    assert counts.num_seqs.item() == 3 and counts.num_tokens.item() == 2 + 4 + 5


def test_masked_importance_sampling_drops_the_tokens_outside_the_bounds():
    # The sampler reported -0.5 for every token; the learner's recomputed log-probs differ by
    # log(3) on row 1's second token and by 0.4 on every token of row 2 (product e^2, mean e^0.4).
    learner = torch.full((4, RESPONSE_LENGTH), -0.5)
    learner[1, 1] += math.log(3.0)
    learner[2] += 0.4
    plain = connect(learner, recompute_old_logp=True)
    metrics = Metrics()
    token = connect(learner, metrics, recompute_old_logp=True, rollout_rs_level="token")
    dropped = plain[ACTION_MASK] - token[ACTION_MASK]
    assert dropped.nonzero().tolist() == [[1, 1]]  # ratio 3 > 2; e^0.4 = 1.49 is kept
    assert metrics.values["rollout_rs_masked_frac"] == pytest.approx(1 / 17)  # of 2+4+5+6
    assert metrics.values["rollout_rs_seq_masked_frac"] == pytest.approx(1 / 4)
    sequence = connect(learner, recompute_old_logp=True, rollout_rs_level="sequence")
    # Row 1's product is 3 and row 2's e^2 = 7.4: both dropped whole.
    assert sequence[ACTION_MASK].sum(-1).tolist() == [2, 0, 0, 6]
    geometric = connect(learner, recompute_old_logp=True, rollout_rs_level="geometric",
                        rollout_rs_threshold=1.45)
    # Geometric means: row 1 3^(1/4) = 1.32 (kept), row 2 e^0.4 = 1.49 (dropped).
    assert geometric[ACTION_MASK].sum(-1).tolist() == [2, 4, 0, 6]
    assert torch.equal(token[ADVANTAGES], plain[ADVANTAGES])  # the baselines are untouched


@pytest.mark.parametrize("overrides,match", [
    ({"overlong_buffer_len": 7}, "overlong_buffer_len=7 is longer than response_length=6"),
    ({"overlong_penalty_factor": 0.5}, "overlong_penalty_factor=0.5 has no effect"),
    ({"overlong_buffer_len": 0}, "overlong_buffer_len"),
    ({"overlong_buffer_len": "half"}, "or 'auto', or None"),
    ({"overlong_penalty_factor": -1.0}, "overlong_penalty_factor"),
    ({"rollout_rs_level": "token"}, "rollout_rs_level='token' needs recompute_old_logp"),
    ({"rollout_rs_threshold_lower": 0.5}, "rollout_rs_threshold_lower=0.5 has no effect"),
    ({"rollout_rs_level": "token", "recompute_old_logp": True, "rollout_rs_threshold": 0.9},
     "rollout_rs_threshold=0.9 must be > 1"),
    ({"rollout_rs_level": "token", "recompute_old_logp": True,
      "rollout_rs_threshold_lower": 1.2}, "rollout_rs_threshold_lower=1.2 must be < 1"),
])
def test_bad_overlong_settings_are_refused_naming_them(overrides, match):
    cfg = embedded_config("ppo", response_length=RESPONSE_LENGTH)
    with pytest.raises(ValueError, match=match):
        cfg.training(**overrides).validate()


def test_a_stage_whose_setting_is_off_returns_no_metric_and_changes_no_column():
    """The stages run in order on one batch; each optional one, off, leaves it as it was."""
    cfg = embedded_config("ppo", adv_estimator="grpo", rollout_batch_size=1,
                          num_return_sequences_in_group=4, response_length=RESPONSE_LENGTH)
    settings = stages.ConnectorSettings.from_config(cfg, pad_token_id=0)
    batch = stages.ConnectorBatch(episodes=[episode(*row) for row in ROWS], kl_coef=0.0)
    module = NoModelModule()
    assert stages.STAGES[0] is stages.pack and stages.pack(batch, module, settings) == {}
    before = {name: column.clone() for name, column in batch.columns.items()}
    assert stages.old_log_probs(batch, module, settings) == {stages.OLD_LOGP_RECOMPUTED: 0.0}
    for stage in (stages.reference_log_probs, stages.critic_values, stages.token_kl,
                  stages.overlong_shaping, stages.distillation, stages.rejection_mask):
        assert stage(batch, module, settings) == {}, stage.__name__
    assert batch.columns.keys() == before.keys() and batch.token_kl is None
    assert all(torch.equal(batch.columns[name], column) for name, column in before.items())
