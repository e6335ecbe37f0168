"""A resumed run is the same run: N iterations, save, M more equals N, restore into a fresh
algorithm, M more — metrics and parameters identical. And every env runner draws its own samples."""

from __future__ import annotations

import pytest
import torch

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


def build(num_env_runners: int = 0):
    return (embedded_config("ppo", seed=11, **RESUMABLE)
            .training(shuffle_batch_per_epoch=True)
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
