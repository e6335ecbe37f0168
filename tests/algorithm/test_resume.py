"""A resumed run is the same run: N iterations, save, M more equals N, restore into a fresh
algorithm, M more — metrics and parameters identical (one torch learner, and two FSDP2 learners
whose checkpoint is their shards, which then restore into other learner counts too). And every
env runner draws its own samples."""

from __future__ import annotations

import pytest
import torch
from ray.rllib.core import (
    COMPONENT_LEARNER,
    COMPONENT_LEARNER_GROUP,
    COMPONENT_OPTIMIZER,
    DEFAULT_MODULE_ID,
)

from rllib_llm.recipes.embedded import embedded_config

pytestmark = pytest.mark.usefixtures("ray_session")  # tests/conftest.py

# Every piece of state that shapes the next update is in play: running reward statistics and an
# adaptive KL coefficient (learner connector), shuffled mini-batches (learner RNG), Adam, the lr
# schedule, the data order and the sampler's seeds.
RESUMABLE = dict(rollout_batch_size=4, num_return_sequences_in_group=4, response_length=4,
                 ppo_epochs=2, mini_batch_size=8, norm_mean_type="running",
                 norm_std_type="running", add_token_level_kl=True, target_kl=0.01,
                 use_kl_loss=False)
COMPARED = [("env_runners", "episode_return_mean"), ("env_runners", "accuracy"),
            ("env_runners", "response_length_mean"), ("learners", "pg_loss"),
            ("learners", "loss"), ("learners", "kl_in_reward_coef"),
            ("learners", "advantage_abs_mean"), ("learners", "default_optimizer_learning_rate")]


def build(num_env_runners: int = 0, *, learner_strategy: str = "torch", num_learners: int = 0):
    return (embedded_config("ppo", seed=11, learner_strategy=learner_strategy, **RESUMABLE)
            .training(shuffle_batch_per_epoch=True)
            .learners(num_learners=num_learners)
            .env_runners(num_env_runners=num_env_runners).build_algo())


def summary(result) -> dict:
    out = {}
    for section, key in COMPARED:
        part = result[section]
        value = part["default_policy"].get(key) if section == "learners" else part.get(key)
        out[key] = float(value)
    return out


def weights(algo) -> dict[str, torch.Tensor]:
    model = algo.learner_group.local_learner.module["default_policy"].model
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def gathered_weights(algo) -> dict[str, torch.Tensor]:
    """The module's weights whole, from local or remote (sharded) learners."""
    return {k: torch.as_tensor(v).clone()
            for k, v in algo.learner_group.get_weights()[DEFAULT_MODULE_ID].items()}


def adam_moments(algo) -> dict[tuple[int, str], torch.Tensor]:
    """Adam's moments as a checkpoint holds them (torch Adam's format; gathered whole from
    FSDP2 learners' shards)."""
    state = algo.get_state(components=f"{COMPONENT_LEARNER_GROUP}/{COMPONENT_LEARNER}")
    (optim,) = state[COMPONENT_LEARNER_GROUP][COMPONENT_LEARNER][COMPONENT_OPTIMIZER].values()
    return {(int(i), key): torch.as_tensor(entry[key]).clone()
            for i, entry in optim["state"]["state"].items() for key in ("exp_avg", "exp_avg_sq")}


@pytest.mark.parametrize("num_env_runners", [0, 2])
def test_save_and_restore_continue_exactly_the_same_run(tmp_path, num_env_runners):
    n, m = 2, 2
    algo = build(num_env_runners)
    for _ in range(n):
        algo.train()
    algo.save_to_path(str(tmp_path))
    straight = [summary(algo.train()) for _ in range(m)]
    straight_weights = weights(algo)
    algo.stop()

    resumed_algo = build(num_env_runners)
    resumed_algo.restore_from_path(str(tmp_path))
    if num_env_runners:
        # The restored weights and their version reached every remote runner.
        versions = resumed_algo.env_runner_group.foreach_env_runner(
            lambda r: r.engine.weight_version, local_env_runner=False)
        assert versions == [n] * num_env_runners
    resumed = [summary(resumed_algo.train()) for _ in range(m)]
    assert resumed == straight
    for name, value in weights(resumed_algo).items():
        assert torch.equal(value, straight_weights[name]), name
    resumed_algo.stop()


@pytest.mark.slow  # learner processes: outside test-fast
def test_fsdp2_learners_resume_exactly_and_their_shards_restore_into_one_torch_learner(
        tmp_path):
    """Two FSDP2 learners (their checkpoint holds each one's shards, torch.distributed.checkpoint)
    resume as one torch learner does: the same metrics and the same weights bit for bit as the
    unbroken run. Their shards restore into a torch learner in the driver too (DCP reshards
    them): the weights and Adam's moments saved, exactly."""
    n, m = 2, 2
    algo = build(learner_strategy="fsdp2", num_learners=2)
    for _ in range(n):
        algo.train()
    algo.save_to_path(str(tmp_path))
    saved, saved_adam = gathered_weights(algo), adam_moments(algo)
    straight = [summary(algo.train()) for _ in range(m)]
    straight_weights = gathered_weights(algo)
    algo.stop()
    assert (tmp_path / "learner_group" / "learner" / "fsdp2_shards" / ".metadata").is_file()

    resumed_algo = build(learner_strategy="fsdp2", num_learners=2)
    resumed_algo.restore_from_path(str(tmp_path))
    resumed = [summary(resumed_algo.train()) for _ in range(m)]
    resumed_weights = gathered_weights(resumed_algo)
    resumed_algo.stop()
    assert resumed == straight
    assert max(float((straight_weights[k] - saved[k]).abs().max()) for k in saved) > 1e-4
    for name, value in resumed_weights.items():
        assert torch.equal(value, straight_weights[name]), name

    # Into one torch learner in the driver (an FSDP2 learner of another count reads them the
    # same way, each its slices; a learner process more would double this test's time).
    single = build()
    try:
        single.restore_from_path(str(tmp_path))
        restored, restored_adam = gathered_weights(single), adam_moments(single)
    finally:
        single.stop()
    assert restored.keys() == saved.keys()
    for name, value in restored.items():
        assert torch.equal(value, saved[name]), name
    assert restored_adam.keys() == saved_adam.keys()
    for key, value in restored_adam.items():
        assert torch.equal(value, saved_adam[key]), key


def test_each_env_runner_draws_its_own_samples():
    algo = (embedded_config("topr", seed=3, rollout_batch_size=4, num_return_sequences_in_group=2,
                            response_length=4)
            .env_runners(num_env_runners=2).build_algo())
    algo.train()
    episodes = algo.sample_batch().episodes
    seeds = dict(algo.env_runner_group.foreach_env_runner(
        lambda r: (r.worker_index, r.sampling_params(r.sample_calls - 1).seed),
        local_env_runner=False))
    assert len(set(seeds.values())) == 2 and None not in seeds.values()
    pairs = [(e.get_infos(0)["prompt_index"], seeds[int(e.get_infos(0)["group_id"].split("-")[0])])
             for e in episodes]
    per_group = pairs[::2]  # one (prompt, seed) per group of 2 responses
    assert len(set(per_group)) == len(per_group)
    algo.stop()


def test_a_resumed_ppo_run_keeps_its_critic_and_does_not_repeat_value_pretraining(tmp_path):
    """Critic weights, its Adam and the count of value-pretraining iterations are checkpointed:
    saved inside the pretraining phase, the resumed run finishes it (no more, no less) and then
    continues exactly as the straight run did."""

    def build_ppo():
        return embedded_config("ppo", seed=4, adv_estimator="gae", num_return_sequences_in_group=1,
                               rollout_batch_size=4, response_length=4, value_pretrain_steps=2,
                               critic_lr=1e-3).build_algo()

    def critic_summary(result) -> tuple:
        learner = result["learners"]["default_policy"]
        return (learner["value_pretraining"], learner["value_loss"],
                learner["explained_variance"], learner.get("pg_loss"))

    algo = build_ppo()
    algo.train()  # one of the two pretraining iterations
    algo.save_to_path(str(tmp_path))
    straight = [critic_summary(algo.train()) for _ in range(2)]
    critic = {k: v.clone() for k, v in
              algo.learner_group.local_learner.module["default_policy"].critic.state_dict().items()}
    algo.stop()
    assert [s[0] for s in straight] == [1.0, 0.0]  # the second pretraining iteration, then PPO

    resumed_algo = build_ppo()
    resumed_algo.restore_from_path(str(tmp_path))
    assert [critic_summary(resumed_algo.train()) for _ in range(2)] == straight
    restored = resumed_algo.learner_group.local_learner.module["default_policy"].critic.state_dict()
    for name, value in restored.items():
        assert torch.equal(value, critic[name]), name
    resumed_algo.stop()
