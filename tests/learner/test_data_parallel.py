"""Several learners (num_learners >= 2, DDP on gloo): the same update as one learner on the same
batch, prompt groups never split, RLlib's step counters counting every row once."""

from __future__ import annotations

import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import LEARNER_RESULTS

from rllib_llm.learner import data_parallel as dp
from rllib_llm.recipes.embedded import embedded_config

pytestmark_ray = pytest.mark.usefixtures("ray_session")  # tests/conftest.py


# --- the shares, by hand ---------------------------------------------------------------------
def test_each_rank_takes_whole_groups_and_together_they_take_every_row_once():
    rows = torch.tensor([8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 6, 7])  # 6 groups of 2, shuffled
    shares = [dp.rank_rows(rows, group_size=2, rank=r, world=3) for r in range(3)]
    assert [s.tolist() for s in shares] == [[8, 9, 2, 3], [10, 11, 4, 5], [0, 1, 6, 7]]
    assert dp.rank_rows(rows, group_size=2, rank=0, world=1) is rows


def test_a_mini_batch_that_cannot_be_shared_equally_is_an_error():
    with pytest.raises(ValueError, match="cannot be shared equally by 2 learners"):
        dp.rank_rows(torch.arange(12), group_size=4, rank=0, world=2)


def test_the_step_counters_of_the_ranks_add_up_to_the_batch():
    class Batch:
        policy_batches = {"p": list(range(7))}

        def env_steps(self):
            return 23

    shares = [dp.BatchShare(Batch(), r, 3) for r in range(3)]
    assert sum(len(s.policy_batches["p"]) for s in shares) == 7
    assert sum(s.env_steps() for s in shares) == 23


def test_the_config_rejects_learners_that_would_split_a_mini_batch_unequally():
    cfg = embedded_config("topr", rollout_batch_size=6, num_return_sequences_in_group=4)
    with pytest.raises(ValueError, match="a mini-batch holds 6 groups"):
        cfg.learners(num_learners=4).validate()
    cfg.learners(num_learners=3).validate()
    with pytest.raises(ValueError, match="weight_sync_backend='gloo' with num_learners=2"):
        embedded_config("topr", rollout_batch_size=6, weight_sync_backend="gloo") \
            .env_runners(num_env_runners=1).learners(num_learners=2).validate()


# --- two DDP learners against one --------------------------------------------------------------
# 4 prompts x 4 responses; 2 mini-batches of 2 groups (one group per learner each), 2 micro-batches
# of 2 rows per learner (DDP's no_sync in the first), 2 epochs with the groups shuffled: 4 steps.
SETTINGS = dict(rollout_batch_size=4, num_return_sequences_in_group=4, response_length=6,
                mini_batch_size=8, micro_batch_size=2, ppo_epochs=2, lr=1e-3)
CASES = {
    "topr-grpo-kl": dict(pg_variant="topr", use_kl_loss=True, kl_loss_coef=0.1),
    "ppo-gae-critic": dict(pg_variant="ppo", adv_estimator="gae", use_kl_loss=False,
                           critic_shares_trunk=True, whiten_advantages=True),
}


def _build(case: dict, num_learners: int):
    cfg = embedded_config(case["pg_variant"], seed=3, **SETTINGS,
                          **{k: v for k, v in case.items() if k != "pg_variant"})
    return cfg.learners(num_learners=num_learners).build_algo()


@pytestmark_ray
@pytest.mark.parametrize("case", list(CASES))
def test_two_learners_take_the_update_of_one_learner(case):
    one, two = _build(CASES[case], 0), _build(CASES[case], 2)
    try:
        episodes = one.env_runner_group.local_env_runner.sample()
        # (A local learner's weights alias its parameters: copy them.)
        before = {k: torch.as_tensor(v).clone()
                  for k, v in one.learner_group.get_weights()[DEFAULT_MODULE_ID].items()}
        results = {}
        for name, algo in (("one", one), ("two", two)):
            algo.metrics.aggregate(algo.update_learners(episodes), key=LEARNER_RESULTS)
            results[name] = algo.metrics.peek((LEARNER_RESULTS, DEFAULT_MODULE_ID))
        w1 = one.learner_group.get_weights()[DEFAULT_MODULE_ID]
        w2 = two.learner_group.get_weights()[DEFAULT_MODULE_ID]
        # Both learners of the pair hold the same weights, and they are the one learner's.
        states = two.learner_group.foreach_learner(
            lambda learner: learner.module[DEFAULT_MODULE_ID].unwrapped().state_dict())
        w2b = states.result_or_errors[1].get()
    finally:
        one.stop()
        two.stop()
    moved = max(float((torch.as_tensor(w1[k]) - torch.as_tensor(before[k])).abs().max())
                for k in w1)
    assert moved > 1e-3  # 4 Adam steps at lr 1e-3 moved the weights
    for k in w1:
        assert torch.allclose(torch.as_tensor(w2[k]), torch.as_tensor(w1[k]), atol=2e-5), k
        assert torch.equal(torch.as_tensor(w2b[k]), torch.as_tensor(w2[k])), k
    r1, r2 = results["one"], results["two"]
    assert r1["num_optimizer_steps"] == r2["num_optimizer_steps"] == 4
    # RLlib's counter: every one of the 16 rows trained once, not once per learner.
    assert r1["num_module_steps_trained"] == r2["num_module_steps_trained"] == 16
    for name in ("loss", "pg_loss", "grad_norm", "entropy", "advantage_mean"):
        assert r2[name] == pytest.approx(r1[name], rel=1e-4, abs=1e-6), name
    if case == "topr-grpo-kl":
        assert r2["kl_loss"] == pytest.approx(r1["kl_loss"], rel=1e-4, abs=1e-7)
    else:
        assert r2["value_loss"] == pytest.approx(r1["value_loss"], rel=1e-4)
