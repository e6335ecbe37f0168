"""RLVR on RLlib end to end: every critic-free variant trains and takes vanilla's update at one
optimizer step, weights sync with versions, micro-batching changes nothing, bf16 checkpoints, Tune
sweeps. That training and every estimator learn is tests/project/test_learning.py's."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from rllib_llm.recipes.embedded import embedded_config

VARIANTS = ["vanilla", "ppo", "tis", "topr", "cispo", "kimi15", "gspo"]
TINY = dict(rollout_batch_size=2, num_return_sequences_in_group=2, response_length=4)


pytestmark = pytest.mark.usefixtures("ray_session")  # tests/conftest.py


def learner_weights(algo) -> dict[str, torch.Tensor]:
    module = algo.learner_group.local_learner.module["default_policy"]
    return {k: v.detach().clone() for k, v in module.model.state_dict().items()}


# The KL loss on: the reference model's path is exercised too. 4 groups of 4 give some groups
# with mixed verdicts, hence nonzero advantages (asserted below).
EVERY_VARIANT = dict(use_kl_loss=True, rollout_batch_size=4, num_return_sequences_in_group=4,
                     response_length=4)


@pytest.fixture(scope="module")
def vanilla_weights_after_one_iteration(ray_session) -> dict[str, torch.Tensor]:
    algo = embedded_config("vanilla", **EVERY_VARIANT).build_algo()
    algo.train()
    weights = learner_weights(algo)
    algo.stop()
    return weights


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_critic_free_variant_trains(variant, vanilla_weights_after_one_iteration):
    algo = embedded_config(variant, **EVERY_VARIANT).build_algo()
    before = learner_weights(algo)
    result = algo.train()
    after = learner_weights(algo)
    runners, learner = result["env_runners"], result["learners"]["default_policy"]
    assert runners["num_env_steps_sampled_lifetime"] > 0
    assert 0.0 <= runners["accuracy"] <= 1.0
    for key in ("pg_loss", "entropy", "clipfrac", "ratio_mean", "approx_kl", "kl_loss"):
        assert np.isfinite(learner[key]), key
    assert set(result["timers"]) >= {"sample", "learn", "weight_sync"}
    assert learner["advantage_abs_mean"] > 0 and learner["num_optimizer_steps"] == 1
    # The update reached the weights and the env runner received them with a new version.
    assert any(not torch.equal(before[k], after[k]) for k in before)
    runner = algo.env_runner_group.local_env_runner
    assert runner.engine.weight_version == 1
    assert torch.equal(runner.module.model.state_dict()["lm_head.weight"],
                       after["lm_head.weight"])
    algo.stop()
    # One optimizer step per iteration: the ratio is 1 up to rounding, and the update is the one
    # vanilla takes from the same batch (tests/core/test_core_properties.py, "ratio one"), so
    # one learning run at one step (examples/topr_arithmetic.py's, in CI through
    # tests/project/test_examples.py) speaks for every variant. A wrong sign would
    # miss vanilla's weights by ~2 learning rates (4e-5) on every moved weight.
    for k, v in vanilla_weights_after_one_iteration.items():
        torch.testing.assert_close(after[k], v, atol=1e-6, rtol=0, msg=k)


def test_episodes_record_the_weight_version_that_sampled_them():
    algo = embedded_config("ppo", **TINY).build_algo()
    algo.train()
    episodes = algo.env_runner_group.local_env_runner.sample()
    versions = {int(v) for e in episodes for v in e.get_extra_model_outputs("weight_version")}
    assert versions == {1}
    algo.stop()


def test_micro_batching_does_not_change_the_update():
    weights = []
    for micro in (None, 1):
        algo = embedded_config("topr", seed=3, micro_batch_size=micro, **TINY).build_algo()
        algo.train()
        weights.append(learner_weights(algo))
        algo.stop()
    for k in weights[0]:
        torch.testing.assert_close(weights[0][k], weights[1][k], atol=1e-6, rtol=1e-5)


def test_bf16_module_syncs_and_checkpoints(tmp_path):
    algo = embedded_config("ppo", model_dtype="bfloat16", **TINY).build_algo()
    algo.train()
    trained = learner_weights(algo)
    assert trained["lm_head.weight"].dtype == torch.bfloat16
    algo.save_to_path(str(tmp_path))
    algo.stop()
    restored = embedded_config("ppo", model_dtype="bfloat16", **TINY).build_algo()
    restored.restore_from_path(str(tmp_path))
    for k, v in learner_weights(restored).items():
        assert torch.equal(v, trained[k]), k
    restored.stop()


def test_tune_sweeps_a_training_field(tmp_path):
    from ray import tune

    from rllib_llm import RLVR

    param_space = embedded_config("topr", **TINY).training(
        pg_variant=tune.grid_search(["topr", "cispo"])
    )
    tuner = tune.Tuner(
        RLVR,
        param_space=param_space,
        run_config=tune.RunConfig(stop={"training_iteration": 1}, storage_path=str(tmp_path),
                                  verbose=0),
    )
    results = tuner.fit()
    assert not results.errors
    assert sorted(r.config["pg_variant"] for r in results) == ["cispo", "topr"]


def test_learner_scores_sampled_tokens_exactly_as_the_sampler_did():
    """The importance ratio starts at 1: learner log-probs equal the engine's behaviour ones."""
    from rllib_llm.learner.packing import episode_tokens, pack

    algo = embedded_config("ppo", **TINY).build_algo()
    runner = algo.env_runner_group.local_env_runner
    episodes = runner.sample()
    batch = pack([episode_tokens(e) for e in episodes], runner.env.tokenizer.pad_token_id)
    module = algo.learner_group.local_learner.module["default_policy"]
    logp = module.score_tokens(batch, reference=False)
    mask = batch["action_mask"].bool()
    torch.testing.assert_close(logp[mask], batch["old_logp"][mask], atol=1e-5, rtol=0)
    algo.stop()


def test_in_one_process_the_sampler_samples_with_the_learners_own_model():
    """num_env_runners=0: no second copy of the policy; the sampler sees every update."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    algo = embedded_config("topr", **TINY).build_algo()
    try:
        runner, learner = algo.env_runner_group.local_env_runner, algo.learner_group.local_learner
        model = learner.module[DEFAULT_MODULE_ID].model
        assert runner.module.model is model
        algo.train()
        assert runner.engine.model is model and runner.engine.weight_version == 1
    finally:
        algo.stop()
    lora = embedded_config("topr", **TINY, lora_rank=4).build_algo()  # adapters: a merged copy
    try:
        assert lora.env_runner_group.local_env_runner.module.model is not \
            lora.learner_group.local_learner.module[DEFAULT_MODULE_ID].model
    finally:
        lora.stop()


def test_remote_env_runners_split_the_prompts_without_duplicates():
    algo = embedded_config("topr", **TINY).env_runners(num_env_runners=2).build_algo()
    try:
        draws = algo.env_runner_group.foreach_env_runner(
            lambda r: [info["prompt_index"] for _, info in (r.env.reset() for _ in range(300))],
            local_env_runner=False)
    finally:
        algo.stop()
    flat = [i for d in draws for i in d]
    assert len(draws) == 2 and len(set(flat)) == len(flat) == 600


def test_remote_env_runners_train_and_survive_a_killed_runner(kill_env_runner):
    algo = (embedded_config("topr", **TINY)
            .env_runners(num_env_runners=2)
            .fault_tolerance(restart_failed_env_runners=True)
            .build_algo())
    first = algo.train()
    assert first["env_runners"]["num_env_steps_sampled_lifetime"] > 0
    kill_env_runner(algo, 1)
    # Training goes on with the surviving runner while RLlib restarts the killed one (bounded).
    deadline = time.monotonic() + 120
    result = algo.train()
    while algo.env_runner_group.num_healthy_remote_workers() < 2 and time.monotonic() < deadline:
        result = algo.train()
        time.sleep(0.5)
    assert result["env_runners"]["num_env_steps_sampled_lifetime"] > \
        first["env_runners"]["num_env_steps_sampled_lifetime"]
    assert algo.env_runner_group.num_healthy_remote_workers() == 2
    # The restored runner samples with the learner's current weights.
    versions = algo.env_runner_group.foreach_env_runner(
        lambda r: r.engine.weight_version, local_env_runner=False)
    assert len(set(versions)) == 1 and versions[0] > 0
    algo.stop()
