"""Asynchronous training (async_generation_ratio = k): runners generate k batches ahead, every
batch is k updates old and never older than max_staleness, the ratio's old_logp are the log-probs
of the weights that sampled, a killed runner is restored, a checkpoint resumes the same run."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import torch
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm import RLVRConfig
from rllib_llm.algorithm import async_sampling as a
from rllib_llm.exchange.columns import ACTION_LOGP, GROUP_ID, WEIGHT_VERSION
from rllib_llm.recipes.embedded import embedded_config

# 4 prompts x 4 responses, 4 tokens: a cheap iteration. TOPR: an off-policy variant.
SMALL = dict(rollout_batch_size=4, num_return_sequences_in_group=4, response_length=4,
             lr=1e-3)


def episode(version: int | list[int], group: str) -> SingleAgentEpisode:
    """A two-token episode of prompt group `group`, its tokens sampled by `version`."""
    versions = np.broadcast_to(np.asarray(version), (2,))
    return SingleAgentEpisode(
        observations=[0, 1, 2], actions=[1, 1], rewards=[0.0, 0.0],
        infos=[{GROUP_ID: group}, {}, {}], terminated=True,
        extra_model_outputs={WEIGHT_VERSION: versions.copy(),
                             ACTION_LOGP: np.zeros(2, dtype=np.float32)},
        len_lookback_buffer=0)


# --- the staleness bookkeeping, by hand ------------------------------------------------------
def test_staleness_is_the_learners_version_minus_the_oldest_token_version():
    mixed = episode([3, 5], "g")  # a response whose generation went on across an update
    episodes = [episode(5, "g"), mixed, episode(7, "h")]
    assert a.staleness(episodes, 7).tolist() == [2, 4, 0]


def test_a_group_with_one_stale_episode_is_stale_whole():
    episodes = [episode(4, "g"), episode(1, "g"), episode(4, "h"), episode(2, "i")]
    assert a.stale_groups(episodes, 4, max_staleness=1) == {"g", "i"}
    assert a.stale_groups(episodes, 4, max_staleness=3) == set()


def test_staleness_metrics_by_hand():
    metrics = a.staleness_metrics(np.array([0, 1, 1, 2]), bound=2)
    assert metrics == {a.STALENESS_MEAN: 1.0, a.STALENESS_MAX: 2.0,
                       "staleness_0_fraction": 0.25, "staleness_1_fraction": 0.5,
                       "staleness_2_fraction": 0.25}


# --- settings --------------------------------------------------------------------------------
def async_config(**training) -> RLVRConfig:
    return (RLVRConfig().environment("math_verify", env_config={"dataset": "arithmetic"})
            .training(pg_variant="topr", async_generation_ratio=1, **training)
            .env_runners(num_env_runners=1))


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c.env_runners(num_env_runners=0), "needs remote env runners"),
    (lambda c: c.env_runners(weight_sync_backend="gloo"), "pushes weights through the object "
                                                          "store"),
    (lambda c: c.training(async_generation_ratio=2, max_staleness=1),
     "max_staleness=1 is below async_generation_ratio=2"),
    (lambda c: c.training(recompute_old_logp=True), "Set rollout_is_level='token'"),
    (lambda c: c.training(async_generation_ratio=-1), "async_generation_ratio=-1 is invalid"),
    (lambda c: c.training(async_generation_ratio=0.5), "must be an integer >= 0"),
    (lambda c: c.training(max_staleness=-1), "max_staleness=-1 is invalid"),
    (lambda c: c.training(async_generation_ratio=0, partial_rollout_max_split=2),
     "partial_rollout_max_split=2 needs asynchronous training"),
    (lambda c: c.training(partial_rollout_max_split=7, response_length=6),
     "partial_rollout_max_split=7 is over response_length=6"),
    (lambda c: c.training(partial_rollout_max_split=0), "partial_rollout_max_split=0 is invalid"),
])
def test_settings_that_cannot_run_asynchronously_are_rejected(change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        change(async_config()).validate()


def test_old_logp_are_the_samplers_in_asynchronous_training_unless_told_otherwise():
    sync_vllm = RLVRConfig().env_runners(rollout_engine="vllm")
    assert sync_vllm.recomputes_old_logp  # synchronous: vLLM's kernels are corrected
    async_vllm = async_config().env_runners(rollout_engine="vllm")
    assert not async_vllm.recomputes_old_logp  # asynchronous: the ratio must see the lag
    decoupled = async_config(recompute_old_logp=True, rollout_is_level="token")
    decoupled.validate()
    assert decoupled.recomputes_old_logp
    assert async_config().resolved_max_staleness == 1
    assert async_config(max_staleness=3).resolved_max_staleness == 3
    # Partial rollouts: a group is handed out at most N calls after it started.
    assert async_config(partial_rollout_max_split=3).resolved_max_staleness == 4
    assert async_config(partial_rollout_max_split=3, max_staleness=1).resolved_max_staleness == 1


def test_no_weight_push_waits_behind_the_generation_in_flight_long_enough_to_be_dropped():
    # RLlib drops a set_state call while as many as max_requests_in_flight_per_env_runner are
    # queued on a runner (default 1); k batches ahead queue up to k pushes and k counter syncs.
    config = async_config().training(async_generation_ratio=3)
    config.validate()
    assert config.max_requests_in_flight_per_env_runner == 8


# --- training --------------------------------------------------------------------------------
class Recorder:
    """Wraps the local learner's update: the learner's version, weights and the episodes of each
    update, and the batch every loss was computed on."""

    def __init__(self, algo):
        self.learner = algo.learner_group.local_learner
        self.updates: list[tuple[int, list[SingleAgentEpisode]]] = []
        self.loss_batches: list[dict[str, torch.Tensor]] = []
        self.weights: dict[int, dict[str, torch.Tensor]] = {}  # version -> the policy's weights
        update, loss = self.learner.update, self.learner.micro_batch_loss
        model = self.learner.module["default_policy"].model

        def recording_update(*args, training_data, **kwargs):
            version = self.learner.weight_version()
            self.weights[version] = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self.updates.append((version, list(training_data.episodes)))
            return update(*args, training_data=training_data, **kwargs)

        def recording_loss(*, config, batch, fwd_out):
            self.loss_batches.append({k: v.detach().clone() for k, v in batch.items()
                                      if isinstance(v, torch.Tensor)})
            return loss(config=config, batch=batch, fwd_out=fwd_out)

        self.learner.update = recording_update
        self.learner.micro_batch_loss = recording_loss

    def lags(self) -> list[list[int]]:
        return [a.staleness(eps, version).tolist() for version, eps in self.updates]


def pytestmark_ray(test):
    """Ray (tests/conftest.py) and slow: remote env runners training for several iterations,
    outside `make test-fast`."""
    return pytest.mark.slow(pytest.mark.usefixtures("ray_session")(test))


@pytestmark_ray
def test_the_issues_call_trains_with_remote_runners_and_reports_staleness_and_idle_times():
    """Not about moving weights: the schedule (staleness, idle times) is its subject; the update of async
    training is checked by the other tests of this file."""
    algo = (RLVRConfig().environment("math_verify")
            .training(pg_variant="topr", async_generation_ratio=1, max_staleness=2)
            .env_runners(num_env_runners=1).build_algo())
    results = [algo.train() for _ in range(3)]
    algo.stop()
    assert [r["async_sampling"]["staleness_mean"] for r in results] == [0.0, 1.0, 1.0]
    last = results[-1]
    assert last["async_sampling"]["batches_in_flight"] == 1.0
    assert last["async_sampling"]["learner_wait_s"] >= 0.0
    assert last["env_runners"]["time_idle_s"] >= 0.0
    assert last["learners"]["default_policy"]["old_logp_recomputed"] == 0.0


@pytestmark_ray
@pytest.mark.parametrize("k", [1, 2])
def test_runners_generate_k_batches_ahead_so_each_batch_is_k_updates_old(k):
    algo = embedded_config("topr", seed=0, **SMALL, async_generation_ratio=k) \
        .env_runners(num_env_runners=1).build_algo()
    recorder = Recorder(algo)
    results = [algo.train() for _ in range(k + 3)]
    algo.stop()
    # The first k batches were sampled by the initial weights, then the lag stays at k.
    assert recorder.lags() == [[min(i, k)] * 16 for i in range(k + 3)]
    assert [r["async_sampling"]["staleness_max"] for r in results] == \
        [float(min(i, k)) for i in range(k + 3)]
    assert all(r["async_sampling"]["batches_in_flight"] == k for r in results)
    # The ratio sees the lag: at the first (only) optimizer step of an update on a stale batch
    # the policy differs from the one that sampled; on the first batch it is the same.
    kls = [r["learners"]["default_policy"]["approx_kl"] for r in results]
    assert abs(kls[0]) < 1e-9 and all(kl > 1e-6 for kl in kls[1:]), kls


@pytestmark_ray
def test_the_ratios_old_logp_are_the_log_probs_of_the_weights_that_sampled(tmp_path):
    from rllib_llm.outputs.checkpoints import load_policy

    algo = embedded_config("topr", seed=0, **SMALL, async_generation_ratio=1) \
        .env_runners(num_env_runners=1).build_algo()
    recorder = Recorder(algo)
    algo.save_to_path(str(tmp_path / "v0"))
    algo.train()  # update 1, on batch 0 (sampled by version 0); batch 1 sampled meanwhile by v0
    algo.save_to_path(str(tmp_path / "v1"))
    algo.train()  # update 2: the learner holds version 1, batch 1 is version 0
    algo.stop()
    version, episodes = recorder.updates[1]
    assert version == 1 and a.staleness(episodes, version).tolist() == [1] * 16
    batch = recorder.loss_batches[1]
    mask = batch["action_mask"].bool()
    sampler = torch.zeros_like(batch["old_logp"])
    for i, e in enumerate(episodes):  # the learner batch keeps the episodes' order
        logp = torch.tensor(e.get_extra_model_outputs(ACTION_LOGP))
        sampler[i, :len(logp)] = logp
    assert torch.equal(batch["old_logp"][mask], sampler[mask])  # old_logp are the sampler's

    def teacher_forced(policy_dir) -> torch.Tensor:
        with torch.no_grad():
            return load_policy(policy_dir).score_tokens(batch, reference=False).float()

    v0, v1 = teacher_forced(tmp_path / "v0"), teacher_forced(tmp_path / "v1")
    assert torch.allclose(v0[mask], sampler[mask], atol=1e-5)  # ... of the weights that sampled
    assert (v1[mask] - sampler[mask]).abs().max() > 1e-3  # not the learner's at update time


@pytestmark_ray
def test_partial_rollouts_go_on_under_new_weights_each_token_keeping_its_own(tmp_path):
    """partial_rollout_max_split=4: one token per segment, so responses go on across calls and
    weight versions. Each token the learner trains on carries the log-prob of the weights its
    version names (teacher-forced), responses of two versions are among them, and no batch lags
    more than k + N."""
    from rllib_llm.learner.packing import episode_tokens

    algo = embedded_config("topr", seed=0, **SMALL, async_generation_ratio=1,
                           partial_rollout_max_split=4).env_runners(num_env_runners=1).build_algo()
    recorder = Recorder(algo)
    results = [algo.train() for _ in range(5)]
    model = algo.learner_group.local_learner.module["default_policy"].model
    algo.stop()
    assert all(len(lags) == 16 and max(lags) <= 1 + 4 for lags in recorder.lags())
    assert max(max(lags) for lags in recorder.lags()) > 1  # continued responses lag more than k
    assert sum(r["async_sampling"]["num_dropped_episodes"] for r in results) == 0
    assert max(r["env_runners"]["partial_mixed_version_fraction"] for r in results) > 0
    mixed = 0
    for _, episodes in recorder.updates:
        for e in episodes:
            item = episode_tokens(e)
            versions = e.get_extra_model_outputs(WEIGHT_VERSION)
            mixed += len(set(versions.tolist())) > 1
            prompt, response = (torch.as_tensor(item.prompt_ids), torch.as_tensor(item.response_ids))
            ids = torch.cat([prompt, response])[None]
            for version in set(versions.tolist()):
                with torch.no_grad():
                    model.load_state_dict(recorder.weights[version])
                    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1]
                logp = torch.log_softmax(logits.float(), -1).gather(
                    -1, response[:, None])[:, 0]
                at = torch.as_tensor(versions == version)
                torch.testing.assert_close(
                    logp[at], torch.as_tensor(e.get_extra_model_outputs(ACTION_LOGP))[at],
                    atol=1e-5, rtol=0)
    assert mixed > 0


@pytestmark_ray
def test_episodes_older_than_max_staleness_are_dropped_and_sampled_again():
    """Not about moving weights: which episodes are dropped for their weight version is its subject."""
    algo = embedded_config("topr", seed=0, **SMALL, async_generation_ratio=1, max_staleness=1) \
        .env_runners(num_env_runners=1).build_algo()
    recorder = Recorder(algo)
    algo.sync_weights = lambda: None  # the pushes of updates 1 and 2 fail
    results = [algo.train(), algo.train()]
    del algo.sync_weights  # RLVR.sync_weights again
    results += [algo.train() for _ in range(3)]
    algo.stop()
    # Updates 3 and 4 were to train on batches 2 and 3, sampled by version 0 (batch 3 was asked
    # for before update 3 found the runner behind) while the learner held versions 2 and 3:
    # every episode dropped, the runner sent the weights, the prompts sampled again.
    dropped = [r["async_sampling"]["num_dropped_episodes"] for r in results]
    assert dropped == [0.0, 0.0, 16.0, 16.0, 0.0]
    assert [r["async_sampling"]["dropped_fraction"] for r in results] == [0, 0, 0.5, 0.5, 0]
    assert results[-1]["async_sampling"]["num_dropped_episodes_lifetime"] == 32.0
    # No update trained on an episode older than max_staleness, and every one on a whole batch.
    assert recorder.lags() == [[0] * 16, [1] * 16, [0] * 16, [0] * 16, [1] * 16]


@pytestmark_ray
def test_a_killed_env_runner_is_restored_and_asynchronous_training_goes_on(kill_env_runner):
    """Not about moving weights: the runner's restart and the pipeline going on are its subject."""
    algo = (embedded_config("topr", seed=0, **SMALL, async_generation_ratio=1)
            .env_runners(num_env_runners=2)
            .fault_tolerance(restart_failed_env_runners=True).build_algo())
    recorder = Recorder(algo)
    algo.train()
    kill_env_runner(algo, 1)
    results = [algo.train() for _ in range(2)]
    # Ray restarts the killed runner's process and RLlib brings it back (bounded wait).
    deadline = time.monotonic() + 120
    while algo.env_runner_group.num_healthy_remote_workers() < 2 and \
            time.monotonic() < deadline:
        results.append(algo.train())
        time.sleep(0.5)
    assert algo.env_runner_group.num_healthy_remote_workers() == 2
    results += [algo.train() for _ in range(2)]
    assert sum(r["async_sampling"]["num_resampled_parts"] for r in results) >= 1
    versions = algo.env_runner_group.foreach_env_runner(
        lambda r: r.engine.weight_version, local_env_runner=False)
    algo.stop()
    # Every update trained on a whole batch, none older than max_staleness (= 1).
    assert all(len(lags) == 16 and max(lags) <= 1 for lags in recorder.lags())
    assert min(versions) >= 4  # the restored runner samples with the learner's weights


@pytestmark_ray
def test_held_out_evaluation_on_the_training_runners_waits_for_the_generation_in_flight():
    """Not about moving weights: the order of evaluation and generation, by weight version, is its subject."""
    # Without evaluation runners the training runners score the held-out problems: the call
    # queues behind the batches they generate ahead and the latest weight push, so it scores the
    # learner's current policy, and the pipeline goes on.
    algo = embedded_config("topr", seed=0, **SMALL, async_generation_ratio=1) \
        .env_runners(num_env_runners=1) \
        .evaluation(evaluation_interval=1,
                    evaluation_config={"eval_num_problems": 8, "temperature": 0}) \
        .build_algo()
    results = [algo.train() for _ in range(3)]
    # A call sent now (as evaluation's is) runs after the last push: with the learner's weights.
    versions = algo.env_runner_group.foreach_env_runner(
        lambda r: r.engine.weight_version, local_env_runner=False)
    assert versions == [algo.learner_version()] == [3]
    algo.stop()
    assert all(r["evaluation"]["num_problems"] == 8 for r in results)
    assert [r["async_sampling"]["staleness_mean"] for r in results] == [0.0, 1.0, 1.0]


@pytestmark_ray
def test_a_checkpoint_taken_in_asynchronous_training_resumes_the_same_run(tmp_path):
    """The resumed run's next iterations equal the unbroken run's, from weights that training
    moved (an equal pair of unmoved runs would not show that the checkpoint holds them)."""
    def build():
        return embedded_config("topr", seed=0, **SMALL, async_generation_ratio=2) \
            .env_runners(num_env_runners=1).build_algo()

    def summary(result) -> tuple:
        learner = result["learners"]["default_policy"]
        return (result["env_runners"]["accuracy"], result["async_sampling"]["staleness_mean"],
                float(learner["loss"]), float(learner["approx_kl"]))

    algo = build()
    for _ in range(3):
        algo.train()
    algo.save_to_path(str(tmp_path))  # with two batches generated ahead of the learner
    saved = {k: torch.as_tensor(v).clone()
             for k, v in algo.learner_group.get_weights()["default_policy"].items()}
    straight = [summary(algo.train()) for _ in range(3)]
    algo.stop()
    resumed = build()
    initial = resumed.learner_group.get_weights()["default_policy"]
    assert max(float((saved[k] - torch.as_tensor(v)).abs().max())
               for k, v in initial.items()) > 1e-3  # three updates moved the saved weights
    resumed.restore_from_path(str(tmp_path))
    restored = resumed.learner_group.get_weights()["default_policy"]
    assert all(torch.equal(torch.as_tensor(restored[k]), v) for k, v in saved.items())
    assert [summary(resumed.train()) for _ in range(3)] == straight
    resumed.stop()


def test_a_roll_config_maps_async_generation_ratio():
    from rllib_llm.algorithm.roll_config import load_roll_config

    roll = load_roll_config({"pg_variant": "topr", "async_generation_ratio": 2})
    assert roll.settings["async_generation_ratio"] == 2
    assert not roll.unmapped
