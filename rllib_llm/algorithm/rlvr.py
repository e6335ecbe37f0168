"""`RLVRConfig` and `RLVR`: RLlib's AlgorithmConfig and Algorithm for RL with verifiable
rewards on language models, in one module as RLlib's ppo.py holds PPOConfig and PPO.

    config = RLVRConfig().environment("math_verify").training(pg_variant="topr", lr=1e-5)
    algo = config.build()
    algo.train()

Every RLVR setting is declared once, with its documentation and rule, in `fields.py`; the config,
the builder, sets their defaults, accepts them (and ROLL's aliases) in `.training()`, and
validates them when the algorithm is built: each field by its own rule, then the settings
derived from others and the rules that tie several together (`config_rules/`, run in the order
its `CHECKS` lists). What it tells RLlib to build for the learners is in `learner_setup.py`.

The algorithm is the training loop, read top to bottom: sample, update, sync weights, each timed.
Users import the config from `rllib_llm` or `rllib_llm.algorithm.config` (typed by config.pyi).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import time
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    TIMERS,
)
from ray.tune.result import TRAINING_ITERATION

from rllib_llm import core
from rllib_llm.algorithm import config_rules, config_types, learner_setup
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
from rllib_llm.algorithm.config_keys import (
    real_minus_ones,
    resolve_aliases,
    split_env_runners,
    split_training,
)
from rllib_llm.algorithm.config_rules.evaluation_rules import (
    check_evaluation_config_keys,
    check_held_out,
)
from rllib_llm.algorithm.config_rules.learner_rules import check_lr
from rllib_llm.algorithm.config_rules.placement_rules import (
    samples_with_learner_model,
    shares_learner_model,
)
from rllib_llm.algorithm.dynamic_sampling import DYNAMIC_RESULTS, fill_batch
from rllib_llm.algorithm.fields import FIELDS, check_field
from rllib_llm.algorithm.held_out_evaluation import (
    evaluation_metrics,
    evaluation_runners,
    score_shards,
)
from rllib_llm.algorithm.learner_faults import dead_learners, learners_died
from rllib_llm.algorithm.reward_workers import (
    REWARD_MODEL_RESULTS,
    RewardWorkers,
    merge_round_metrics,
)
from rllib_llm.algorithm.sampler_states import sampler_states, set_sampler_states
from rllib_llm.algorithm.sync_sampling import sample_now
from rllib_llm.algorithm.weight_sync import direct_weight_sync
from rllib_llm.exchange.devices import announce
from rllib_llm.learner.learner_group import SHARDED_PARTS
from rllib_llm.rollout.env_setup import check_env
from rllib_llm.rollout.eval_shard import EvalShard

logger = logging.getLogger(__name__)

# The settings a collapse warning names: those that size a step, and the entropy bonus.
COLLAPSE_SETTINGS = ("lr", "grad_clip", "pg_clip", "entropy_coef", "temperature")

# Timer names (under timers/ in the results): the phases of one iteration.
SAMPLE_TIMER = "sample"  # generate + verify (split further in env_runners/time_*_s)
LEARN_TIMER = "learn"
SYNC_TIMER = "weight_sync"


class RLVRConfig(AlgorithmConfig):
    """Configuration of `RLVR`. See `rllib_llm.algorithm.fields` for every setting."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or RLVR)
        for f in FIELDS:
            setattr(self, f.name, copy.deepcopy(f.default))
        # What the user registered in core's registries (pg variants, estimators, ...), captured
        # by validate() and to_dict(): it travels with the config to remote learners (filed in
        # RLVRLearner.build) and to a Tune trial's process (filed by validate()), which import
        # rllib_llm afresh and know only the built-ins.
        self.user_registrations: core.Registrations = {}
        # RLlib settings with LLM-RL defaults: undiscounted rewards, a small LR, clipped grads,
        # and sampling in the driver process unless the user asks for remote env runners.
        self.gamma = 1.0
        self.lr = 1e-6
        self.grad_clip = 1.0
        self.grad_clip_by = "global_norm"
        self.num_env_runners = 0
        from rllib_llm.rollout.env_runner import RLVREnvRunner

        self.env_runner_cls = RLVREnvRunner

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> RLVRConfig:
        """A config with the algorithm preset `name` (ppo, vc_ppo, vapo, grpo, dr_grpo, dapo,
        rloo, reinforce_pp, topr: algorithm/presets.py), then `overrides` (any training field,
        or ROLL alias) on top."""
        from rllib_llm.algorithm.presets import preset_settings

        return cls().training(**preset_settings(name)).training(**overrides)

    # --- setting fields -------------------------------------------------------------------------
    def training(self, **kwargs) -> RLVRConfig:
        """Set RLVR fields (see fields.py), ROLL aliases, or any RLlib `training()` argument."""
        ours, rllib = split_training(kwargs)
        super().training(**rllib)
        for key, value in ours.items():
            setattr(self, key, value)
        return self

    def env_runners(self, **kwargs) -> RLVRConfig:
        """RLlib's env_runners(), plus the settings of the "engine" section (fields.py): the
        rollout engine, its options and memory, and the weight sync to it."""
        ours, rllib = split_env_runners(kwargs)
        for key, value in ours.items():
            setattr(self, key, value)
        super().env_runners(**rllib)
        return self

    def evaluation(self, **kwargs) -> RLVRConfig:
        """RLlib's evaluation(); an `evaluation_config` dict may set only known settings (ours,
        their aliases, RLlib's): a misspelt one is an error here, not ignored."""
        overrides = kwargs.get("evaluation_config")
        if isinstance(overrides, dict):
            check_evaluation_config_keys(self, overrides)
        super().evaluation(**kwargs)
        return self

    def to_dict(self) -> dict[str, Any]:
        # Tune sends the config to its trial's process as this dict: the user's registrations go
        # along (validate() files them there before checking the names).
        config_dict = super().to_dict()
        config_dict["user_registrations"] = self._registrations()
        return config_dict

    def _registrations(self) -> core.Registrations:
        """This process's user registrations, after filing the ones this config carries (from
        the process that built it)."""
        core.restore_registrations(self.user_registrations)
        return core.user_registrations()

    def update_from_dict(self, config_dict: dict[str, Any]) -> RLVRConfig:
        # Tune passes flat dicts: accept ROLL's aliases there too.
        return super().update_from_dict(resolve_aliases(config_dict))

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), **real_minus_ones(self)}

    # --- validation -----------------------------------------------------------------------------
    def validate(self) -> None:
        # Registered names are valid names; a config rebuilt in another process (a Tune trial's)
        # brings the driver's registrations along.
        self.user_registrations = self._registrations()
        check_lr(self.lr)  # before RLlib's own check, whose message names no fix
        super().validate()
        for f in FIELDS:
            check_field(f.name, getattr(self, f.name), in_evaluation=self.in_evaluation)
        config_rules.resolve_derived(self)
        config_rules.check_all(self)

    @property
    def model_context_length(self) -> int | None:
        """The model's max_position_embeddings (None when its config does not say)."""
        return _context_length(self.model_name_or_path)

    @property
    def resolved_prompt_length(self) -> int | None:
        """`prompt_length`, or with None what the model's context leaves after the response."""
        if self.prompt_length is not None:
            return self.prompt_length
        context = self.model_context_length
        return None if context is None else context - self.response_length

    @property
    def resolved_overlong_buffer_len(self) -> int | None:
        """`overlong_buffer_len` in tokens: 'auto' is DAPO's share, 4,096 of 20,480 = 1/5."""
        if self.overlong_buffer_len == "auto":
            return max(1, self.response_length // 5)
        return self.overlong_buffer_len

    def held_out_env_overrides(self) -> dict[str, Any]:
        """What the held-out env's config changes in env_config: the split, and the dataset when
        eval_dataset names one."""
        overrides: dict[str, Any] = {"split": self.eval_split}
        if self.eval_dataset is not None:
            overrides["dataset"] = self.eval_dataset
        return overrides

    # --- what RLlib builds ----------------------------------------------------------------------
    @property
    def uses_reference(self) -> bool:
        return bool(self.use_kl_loss or self.add_token_level_kl)

    @property
    def recomputes_old_logp(self) -> bool:
        """`recompute_old_logp` with its None resolved: on for the vLLM engine in synchronous
        training only (asynchronous training keeps the sampler's, which see the lag)."""
        if self.recompute_old_logp is None:
            return self.rollout_engine == "vllm" and not self.async_generation_ratio
        return bool(self.recompute_old_logp)

    @property
    def resolved_max_staleness(self) -> int:
        """`max_staleness` with its None resolved: the lag the pipeline produces,
        async_generation_ratio, plus with partial rollouts (N > 1) the N calls a group may take
        from its start to being handed out (`rollout.partial_rollouts`)."""
        if self.max_staleness is not None:
            return self.max_staleness
        split = self.partial_rollout_max_split
        return self.async_generation_ratio + (split if split > 1 else 0)

    @property
    def critic_spec(self) -> dict[str, Any] | None:
        """The module's critic (model_config["critic"]), or None for a critic-free estimator."""
        return learner_setup.critic_spec(self)

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return learner_setup.module_spec(self)

    def get_default_learner_class(self):
        return learner_setup.learner_class(self.learner_strategy)

    def build_learner_group(self, *, env=None, spaces=None, rl_module_spec=None,
                            placement_group=None):
        """RLlib's LearnerGroup, with sharded (DeepSpeed, FSDP2) learners' state gathered by all
        of them."""
        if rl_module_spec is None:
            rl_module_spec = self.get_multi_rl_module_spec(env=env, spaces=spaces)
        return learner_setup.learner_group(self, rl_module_spec, placement_group)

    def build_learner_connector(self, input_observation_space, input_action_space, device=None):
        return learner_setup.learner_connector(self, input_observation_space, input_action_space)


# What IDEs, type checkers and help() read (the settings are set by a loop over FIELDS).
RLVRConfig.__annotations__ = {**RLVRConfig.__dict__.get("__annotations__", {}),
                              **config_types.annotations()}
RLVRConfig.__doc__ = f"{RLVRConfig.__doc__}\n\n{config_types.settings_doc()}"


@functools.lru_cache(maxsize=16)
def _context_length(model_name_or_path: str) -> int | None:
    from rllib_llm.models.context_length import model_context_length

    return model_context_length(model_name_or_path)


class RLVR(Algorithm):
    @classmethod
    def get_default_config(cls) -> RLVRConfig:
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
        return {**state, **sampler_states(self.env_runner_group, self._async)}

    def set_state(self, state) -> None:
        """RLlib's restore (it syncs the restored weights and their version to every runner;
        tests/algorithm/test_resume.py checks it), plus each remote runner's sampler state."""
        super().set_state(state)
        set_sampler_states(state, self.env_runner_group, self._async)

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
        start, cfg = time.perf_counter(), self.config
        episodes, runner_metrics, resampled = sample_now(
            self.env_runner_group, num_prompts, cfg.rollout_batch_size, cfg.num_env_runners,
            restore=self._restore_training_runners, timeout_s=cfg.env_runner_restore_timeout_s)
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
        group, ids = evaluation_runners(self.eval_env_runner_group, self.env_runner_group,
                                        self.learner_group, self.direct_sync)
        return score_shards(group, ids, eval_config,
                            (self.config.seed or 0) if seed is None else seed)

    def _evaluation_callback(self, name: str, **kwargs) -> None:
        """RLlib's evaluation callbacks (`on_evaluate_start`, `on_evaluate_end`)."""
        make_callback(name, callbacks_objects=self.callbacks,
                      callbacks_functions=getattr(self.config, f"callbacks_{name}"),
                      kwargs=dict(algorithm=self, metrics_logger=self.metrics, **kwargs))
