"""`RLVR`: the training loop, read top to bottom — sample, update, sync weights, each timed."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    TIMERS,
)
from ray.tune.result import TRAINING_ITERATION

from rllib_llm.algorithm.async_sampling import (
    ASYNC_RESULTS,
    BATCHES_IN_FLIGHT,
    DROPPED_FRACTION,
    LEARNER_WAIT_S,
    NUM_DROPPED,
    NUM_RESAMPLED_PARTS,
    AsyncSampler,
    Batch,
    staleness,
    staleness_metrics,
)
from rllib_llm.algorithm.checkpoint_files import (
    check_whole,
    checkpoint_root,
    save_in_trial,
    save_whole,
)
from rllib_llm.algorithm.cluster_fit import fit_check
from rllib_llm.algorithm.collapse import CollapseWatch
from rllib_llm.algorithm.config_rules.evaluation_rules import check_held_out
from rllib_llm.algorithm.config_rules.placement_rules import (
    samples_with_learner_model,
    shares_learner_model,
)
from rllib_llm.algorithm.dynamic_sampling import DYNAMIC_RESULTS, fill_batch
from rllib_llm.algorithm.fields import check_field
from rllib_llm.algorithm.held_out_evaluation import evaluation_metrics, shard_seed
from rllib_llm.algorithm.learner_faults import dead_learners, learners_died
from rllib_llm.algorithm.reward_workers import (
    REWARD_MODEL_RESULTS,
    RewardWorkers,
    merge_round_metrics,
)
from rllib_llm.algorithm.sample_errors import call_or_error, raise_if_failed
from rllib_llm.algorithm.sync_sampling import sample_remote
from rllib_llm.algorithm.weight_sync import direct_weight_sync
from rllib_llm.exchange.devices import announce
from rllib_llm.learner.learner_group import SHARDED_PARTS
from rllib_llm.rollout.env_setup import check_env
from rllib_llm.rollout.eval_shard import EvalShard
from rllib_llm.rollout.sampler_state import SAMPLER_STATE

logger = logging.getLogger(__name__)

# The settings a collapse warning names: those that size a step, and the entropy bonus.
COLLAPSE_SETTINGS = ("lr", "grad_clip", "pg_clip", "entropy_coef", "temperature")

# Our part of the algorithm's checkpoint: each remote env runner's sampler state (RLlib saves
# only the driver's env runner, which does not sample when there are remote ones), and in
# asynchronous training the batches generated ahead.
REMOTE_SAMPLERS = "rlvr_remote_samplers"
ASYNC_BATCHES = "rlvr_async_batches"

# Timer names (under timers/ in the results): the phases of one iteration.
SAMPLE_TIMER = "sample"  # generate + verify (split further in env_runners/time_*_s)
LEARN_TIMER = "learn"
SYNC_TIMER = "weight_sync"


class RLVR(Algorithm):
    @classmethod
    def get_default_config(cls):
        from rllib_llm.algorithm.config import RLVRConfig

        return RLVRConfig(cls)

    def setup(self, config) -> None:
        # A bad dataset or env setting fails now, with its own message, not as a remote
        # runner's death (env_runner.check_env says how that reads).
        check_env(config)
        # Actors the cluster cannot hold would wait forever, silently: say so first.
        with fit_check(config):
            super().setup(config)
        # The direct weight sync (weight_sync.py) when `weight_sync_backend` asks for one, else
        # None: `sync_weights()` goes through RLlib's object store.
        self.direct_sync = direct_weight_sync(config, self.learner_group,
                                              self.env_runner_group)
        if shares_learner_model(config):
            # One process samples and learns in turn: its sampler samples with the learner's
            # own model, not a second copy of it (a weight sync then copies nothing). A LoRA
            # learner's model holds adapters, and the sampler merged weights: no sharing there.
            self.env_runner_group.local_env_runner.share_policy_model(
                self.learner_group.local_learner.module[DEFAULT_MODULE_ID].model)
        if config.num_env_runners == 0:
            runner = self.env_runner_group.local_env_runner
            announce("the driver's env runner", runner.device,
                     "sampling with the learner's model"
                     if samples_with_learner_model(config) else "")
        # The reward model's actors (reward_workers.py), or None without a reward model.
        self.reward_workers = None
        if config.reward_model_name_or_path is not None:
            from rllib_llm.models import load_tokenizer

            self.reward_workers = RewardWorkers(config,
                                                load_tokenizer(config.model_name_or_path))
        self._collapse_watch = CollapseWatch(
            {name: getattr(config, name) for name in COLLAPSE_SETTINGS})
        self._async = None
        if config.async_generation_ratio:
            self._async = AsyncSampler(
                self.env_runner_group, ahead=config.async_generation_ratio,
                max_staleness=config.resolved_max_staleness, num_parts=config.num_env_runners,
                num_prompts=config.rollout_batch_size // config.num_env_runners,
                restore_runners=self._restore_training_runners,
                resync_runners=lambda ids: self.env_runner_group.sync_weights(
                    from_worker_or_learner_group=self.learner_group, to_worker_indices=ids,
                    inference_only=True),
                restore_timeout_s=config.env_runner_restore_timeout_s)

    def step(self) -> dict[str, Any]:
        """RLlib's iteration, then one look at its result for a collapse (collapse.py)."""
        results = super().step()
        warning = self._collapse_watch.observe(results, iteration=self.iteration + 1)
        if warning is not None:
            logger.warning(warning)
        return results

    def training_step(self) -> None:
        with self.metrics.log_time((TIMERS, SAMPLE_TIMER), reduce="mean", window=1):
            batch = self.sample_batch()
        self.metrics.aggregate(batch.runner_metrics, key=ENV_RUNNER_RESULTS)
        for name, value in batch.metrics.items():
            self.metrics.log_value((ASYNC_RESULTS, name), value, window=1)
        episodes = batch.episodes

        with self.metrics.log_time((TIMERS, LEARN_TIMER), reduce="mean", window=1):
            learner_results = self.update_learners(episodes)
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)

        with self.metrics.log_time((TIMERS, SYNC_TIMER), reduce="mean", window=1):
            self.sync_weights()

    def update_learners(self, episodes: list) -> list[dict[str, Any]]:
        """One update of every learner on `episodes` (what `train()` does between sampling and
        the weight sync, without either): their results, as `LearnerGroup.update` gives them.
        A remote learner that dies stops it with one line naming it (algorithm/learner_faults.py).
        """
        n = self.config.num_learners
        # With several learners, the whole batch for each (one object in the object store, a
        # ref per learner; learner/data_parallel.py says why): RLlib's episode sharding would
        # cut it into equal numbers of tokens, splitting prompt groups.
        data = {"episodes": episodes} if n <= 1 else {"episodes_refs": [ray.put(episodes)] * n}
        try:
            return self.learner_group.update(
                **data,
                timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                    (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)},
                # The whole batch in one call: RLVRLearner runs the ppo_epochs x mini-batch
                # optimizer steps itself, counting responses and keeping prompt groups whole
                # (RLlib's iterator counts env steps, which are tokens here).
                num_epochs=1,
                minibatch_size=None,
            )
        except RayError:
            dead = dead_learners(self.learner_group) if self.learner_group.is_remote else []
            if not dead:
                raise  # an error in the update itself
            # RLlib logged each learner's error; a survivor's collective error is only noise.
            raise learners_died(dead, n) from None

    def learner_version(self) -> int:
        """The version of the learner's weights: RLlib's weights sequence number, one per
        update, which every weight sync hands to the env runners with the weights."""
        results = self.learner_group.foreach_learner(lambda learner: learner.weight_version())
        return int(results.result_or_errors[0].get())

    def sync_weights(self) -> None:
        """Learner -> env runners, the last phase of `training_step`: a direct sync (broadcast
        or CUDA IPC) when configured and possible, else RLlib's object-store sync (which also
        updates the driver's env runner). Afterwards every healthy runner holds the learner's
        weights and `learner_version()`."""
        direct = self.direct_sync
        if direct is not None and direct.sync():
            return
        self.env_runner_group.sync_weights(
            from_worker_or_learner_group=self.learner_group, inference_only=True
        )
        if direct is not None:
            direct.mark_local_env_runner_fresh()

    def restore_env_runners(self, env_runner_group) -> list[int]:
        """RLlib restores a runner with the driver's runner's weights, which a direct sync leaves
        behind: send restored runners the learner's, and set the sync up again with them."""
        restored = super().restore_env_runners(env_runner_group)
        if restored and self.direct_sync is not None and \
                env_runner_group is self.env_runner_group:
            env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group, to_worker_indices=restored,
                inference_only=True, timeout_seconds=self.config.weight_sync_timeout_s,
            )
            self.direct_sync.mark_local_env_runner_fresh()
            self.direct_sync.invalidate()
        return restored

    def _restore_training_runners(self) -> list[int]:
        """What RLlib does before each iteration, for a wait inside one: bring back the failed
        training runners and tell the `on_env_runners_recreated` callbacks."""
        restored = self.restore_env_runners(self.env_runner_group)
        if restored:
            self._make_on_env_runners_recreated_callbacks(
                config=self.config, env_runner_group=self.env_runner_group,
                restored_env_runner_indices=restored)
        return restored

    def cleanup(self) -> None:
        super().cleanup()
        if getattr(self, "reward_workers", None) is not None:
            self.reward_workers.stop()

    # --- checkpoints ------------------------------------------------------------------------------
    def save_to_path(self, path=None, *, state=None, filesystem=None,
                     use_msgpack: bool = False) -> str:
        """RLlib's `save_to_path`, written whole or not at all: into a temporary directory beside
        `path`, `COMPLETE_FILE` last, then renamed into place (checkpoint_files.py). Tune's
        checkpoints (`Trainable.save` -> `save_checkpoint`) are written here too. A full disk
        raises CheckpointWriteError, one line with the path, and leaves nothing behind.
        FSDP2 learners write their weights and Adam's state as their own shards in it (on a local
        path; `RLVRLearnerGroup.save_shards`), never gathered whole."""
        save = super().save_to_path

        def write(to, fs) -> str:
            if state is not None or fs is not None or not self.learner_group.saves_shards:
                return save(to, state=state, filesystem=fs, use_msgpack=use_msgpack)
            saved = save(to, state=self.get_state(not_components=list(SHARDED_PARTS)),
                         use_msgpack=use_msgpack)
            self.learner_group.save_shards(
                Path(saved, COMPONENT_LEARNER_GROUP, COMPONENT_LEARNER))
            return saved

        return save_whole(
            write, path, filesystem=filesystem,
            training_iteration=(state or {}).get(TRAINING_ITERATION, self.training_iteration))

    def save(self, checkpoint_dir: str | None = None):
        """Tune's `Trainable.save`, whose copy of the checkpoint into a trial's directory leaves
        nothing part-written (checkpoint_files.save_in_trial)."""
        return save_in_trial(super().save, getattr(self, "_storage", None), checkpoint_dir)

    def restore_from_path(self, path, *args, **kwargs) -> None:
        """RLlib's restore, after checking that the checkpoint is whole: a torn or foreign one is
        refused with one line naming it and the newest whole one beside it (CheckpointError),
        not a pickle error. With `component`, the checkpoint is the directory `path` lies in."""
        root = checkpoint_root(path, kwargs.get("component"), kwargs.get("filesystem"))
        if root is not None:
            check_whole(root)
        super().restore_from_path(path, *args, **kwargs)

    @classmethod
    def from_checkpoint(cls, path, filesystem=None, **kwargs) -> RLVR:
        """RLlib's `from_checkpoint`, refusing a torn checkpoint before anything is built.
        (`Algorithm.from_checkpoint` checks only once the algorithm is built, in
        `restore_from_path`, and dies on a torn constructor file first.)"""
        root = checkpoint_root(getattr(path, "path", path), None,
                               getattr(path, "filesystem", filesystem))
        if root is not None:
            check_whole(root)
        return super().from_checkpoint(path, filesystem, **kwargs)

    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        group = self.env_runner_group
        if group is not None and group.num_remote_env_runners() > 0:
            states = group.foreach_env_runner(
                lambda r: (r.worker_index, r.get_state(components=SAMPLER_STATE)),
                local_env_runner=False)
            state[REMOTE_SAMPLERS] = {index: s[SAMPLER_STATE] for index, s in states}
        if self._async is not None:
            state[ASYNC_BATCHES] = self._async.get_state()
        return state

    def set_state(self, state) -> None:
        """RLlib's restore (it syncs the restored weights and their version to every runner;
        tests/algorithm/test_resume.py checks it), plus each remote runner's sampler state."""
        super().set_state(state)
        samplers = state.get(REMOTE_SAMPLERS)
        group = self.env_runner_group
        if samplers and group is not None:
            group.foreach_env_runner(
                lambda r: r.set_state({SAMPLER_STATE: samplers[r.worker_index]})
                if r.worker_index in samplers else None,
                local_env_runner=False)
        if self._async is not None and ASYNC_BATCHES in state:
            self._async.set_state(state[ASYNC_BATCHES])

    def sample_batch(self, learner_version: int | None = None) -> Batch:
        """The first phase of `training_step`: one round of sampling, or with
        `dynamic_sampling` as many as it takes to hold `rollout_batch_size` informative groups
        (dynamic_sampling.py); each episode's reward combined with the reward model's score when
        there is one. `learner_version` (default: `learner_version()`) measures the episodes'
        staleness. Logs the dynamic-sampling and reward-model metrics to `self.metrics`."""
        if learner_version is None:
            learner_version = self.learner_version()
        cfg = self.config
        if not cfg.dynamic_sampling:
            batch = self._sample_rewarded(learner_version)
        else:
            batch, metrics = fill_batch(
                lambda prompts: self._sample_rewarded(learner_version, prompts),
                cfg.rollout_batch_size, cfg.dynamic_sampling_max_rounds)
            for name, value in metrics.items():
                self.metrics.log_value((DYNAMIC_RESULTS, name), value, window=1)
        for name, value in merge_round_metrics(batch.reward_rounds).items():
            self.metrics.log_value((REWARD_MODEL_RESULTS, name), value, window=1)
        return batch

    def _sample_rewarded(self, learner_version: int, num_prompts: int | None = None) -> Batch:
        """A round of `_sample`, its episodes' final rewards combined with the reward model's
        scores when there is one (reward_workers.py): the reward every later step sees. The
        round's reward-model metrics ride in the batch (`Batch.reward_rounds`)."""
        batch = self._sample(learner_version, num_prompts)
        if self.reward_workers is None:
            return batch
        return dataclasses.replace(
            batch, reward_rounds=[*batch.reward_rounds, self.reward_workers.apply(batch.episodes)])

    def _sample(self, learner_version: int, num_prompts: int | None = None) -> Batch:
        """This iteration's episodes: generated ahead (asynchronous training: a whole batch), or
        now by the remote env runners alive (sync_sampling.py: a dead runner's share goes to
        the others, or waits for RLlib to restore it) or by the local one when there are none;
        `num_prompts` prompts in all (None: rollout_batch_size)."""
        if self._async is not None:
            return self._async.next_batch(learner_version)
        start = time.perf_counter()
        group = self.env_runner_group
        resampled = 0
        if group.num_remote_env_runners() == 0:
            runner = group.local_env_runner
            episodes = runner.sample(num_prompts=num_prompts)
            runner_metrics = [runner.get_metrics()]
        else:
            cfg = self.config
            episodes, runner_metrics, resampled = sample_remote(
                group, num_prompts, num_parts=cfg.num_env_runners,
                part_size=cfg.rollout_batch_size // cfg.num_env_runners,
                restore=self._restore_training_runners,
                timeout_s=cfg.env_runner_restore_timeout_s)
        metrics = staleness_metrics(staleness(episodes, learner_version), 0)
        metrics.update({NUM_DROPPED: 0.0, DROPPED_FRACTION: 0.0, BATCHES_IN_FLIGHT: 0.0,
                        NUM_RESAMPLED_PARTS: float(resampled),
                        LEARNER_WAIT_S: time.perf_counter() - start})
        return Batch(episodes, runner_metrics, metrics)

    # --- evaluation -----------------------------------------------------------------------------
    def evaluate(self, parallel_train_future=None) -> dict[str, Any]:
        """Score the current policy on held-out problems; RLlib's `Algorithm.step` calls this every
        `evaluation_interval` iterations and files the result under "evaluation".

        Honours RLlib's evaluation settings: the evaluation config (`evaluation_config`
        overrides: `temperature`, 0 = greedy; `top_p`; `response_length`; the `eval_*` fields)
        decides what is sampled, and the evaluation env runners (`evaluation_num_env_runners`,
        or the evaluation group's local runner when 0) share the problems out, after receiving
        the learner's weights. A `custom_evaluation_function` replaces all of this, as in RLlib.

        Returns:
            pass@1, pass@k, num_problems, samples_per_problem, num_samples and
            response_length_mean (`rllib_llm.algorithm.held_out_evaluation`).
        """
        if self.config.custom_evaluation_function:
            return super().evaluate(parallel_train_future)
        self._evaluation_callback("on_evaluate_start")
        results = evaluation_metrics(self.score_held_out(self.evaluation_config))
        self._evaluation_callback("on_evaluate_end", evaluation_metrics=results)
        return results

    def evaluate_accuracy(self, *, num_problems: int | None = None,
                          temperature: float | None = None,
                          seed: int | None = None) -> dict[str, Any]:
        """`evaluate()` with the evaluation config's `eval_num_problems`, `temperature` and
        sampling seed (default: the config's `seed`, or 0) replaced for this call."""
        cfg = self.evaluation_config.copy(copy_frozen=False)
        for name, value in (("eval_num_problems", num_problems), ("temperature", temperature)):
            if value is not None:
                check_field(name, value, in_evaluation=True)
                setattr(cfg, name, value)
        return evaluation_metrics(self.score_held_out(cfg, seed))

    def score_held_out(self, eval_config, seed: int | None = None) -> list[EvalShard]:
        """What `evaluate()` reduces: every evaluating runner's shard of the held-out problems
        under `eval_config` (an evaluation config), one shard per runner, sampled from `seed`
        (default: the config's `seed`, or 0)."""
        check_held_out(self.config, eval_config)
        base = (self.config.seed or 0) if seed is None else seed
        group, ids = self._evaluation_runners()
        if not ids:
            return [group.local_env_runner.evaluate(config=eval_config, seed=shard_seed(base, 0))]

        def score(runner):
            shard = ids.index(runner.worker_index)
            # An error in evaluate() comes back as a value, not a 60 s restart (sample_errors.py).
            return call_or_error(runner, "evaluate()", lambda: runner.evaluate(
                config=eval_config, shard=shard, num_shards=len(ids), seed=shard_seed(base, shard)))

        shards = group.foreach_env_runner(score, remote_worker_ids=ids, local_env_runner=False)
        raise_if_failed(shards)
        return shards

    def _evaluation_runners(self):
        """The group that evaluates, holding the learner's current weights, and its healthy
        remote runners (none: its local runner evaluates).

        The evaluation group (RLlib builds one when `evaluation_interval` or
        `evaluation_num_env_runners` is set) receives the weights through the object store, as
        in RLlib. Without one the training runners evaluate: they hold the weights already,
        except the driver's runner behind a direct sync, which catches up if it is the one.
        """
        group = self.eval_env_runner_group
        if group is not None:
            group.sync_weights(from_worker_or_learner_group=self.learner_group,
                               inference_only=True)
        else:
            group = self.env_runner_group
        ids = group.healthy_env_runner_ids() if group.num_remote_env_runners() else []
        if not ids and group is self.env_runner_group and self.direct_sync is not None:
            self.direct_sync.refresh_local_env_runner()
        return group, ids

    def _evaluation_callback(self, name: str, **kwargs) -> None:
        """RLlib's evaluation callbacks (`on_evaluate_start`, `on_evaluate_end`)."""
        make_callback(name, callbacks_objects=self.callbacks,
                      callbacks_functions=getattr(self.config, f"callbacks_{name}"),
                      kwargs=dict(algorithm=self, metrics_logger=self.metrics, **kwargs))
