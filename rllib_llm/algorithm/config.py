"""`RLVRConfig`: RLlib AlgorithmConfig for RL with verifiable rewards on language models.

    config = RLVRConfig().environment("math_verify").training(pg_variant="topr", lr=1e-5)
    algo = config.build()
    algo.train()

Every RLVR setting is declared once, with its documentation and rule, in `fields.py`; this
class sets their defaults, accepts them (and ROLL's aliases) in `.training()`, and validates
them — and the rules that tie several of them together — when the algorithm is built.
"""

from __future__ import annotations

import copy
import difflib
import functools
import importlib.util
import inspect
import math
from typing import Any

from ray._common.deprecation import DEPRECATED_VALUE
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from rllib_llm import core
from rllib_llm.algorithm.deepspeed_checks import check_deepspeed_settings
from rllib_llm.algorithm.fields import (
    ALIASES,
    FIELDS,
    FIELDS_BY_NAME,
    changed_fields,
    check_field,
)
from rllib_llm.algorithm.placement_checks import check_placement

# RLlib settings whose unit is an env step (a token here) or that RLVR's fields replace: a
# non-default value is rejected, naming the field to use instead.
RLLIB_REPLACED = {
    "minibatch_size": (None, "mini_batch_size (responses per optimizer step; RLlib's "
                             "minibatch_size counts env steps, which are tokens here)"),
    "train_batch_size_per_learner": (None, "rollout_batch_size (prompts per iteration) and "
                                           "num_return_sequences_in_group"),
    "train_batch_size": (32, "rollout_batch_size (prompts per iteration) and "
                             "num_return_sequences_in_group"),
    "num_epochs": (1, "ppo_epochs (.training(num_epochs=k) sets it)"),
}
# The most responses one iteration may hold: ROLL's largest recipes use 512 x 16 = 8192; a
# million is an allocation failure waiting to happen, not a plan.
MAX_RESPONSES_PER_ITERATION = 2**20
# Env-config keys the training fields own (the env runner sets them from those fields).
ENV_KEYS_FROM_TRAINING = ("model", "prompt_length", "response_length", "seed")
# Settings only the critic (adv_estimator='gae') reads: with a critic-free estimator they must
# keep their defaults. (gamma stays free: REINFORCE discounts with it too.)
CRITIC_FIELDS = ("lambd", "critic_lambd", "length_adaptive_alpha", "value_clip",
                 "critic_model_name_or_path", "critic_shares_trunk", "critic_lr",
                 "value_loss_coef", "value_pretrain_steps")


class RLVRConfig(AlgorithmConfig):
    """Configuration of `RLVR`. See `rllib_llm.algorithm.fields` for every setting."""

    def __init__(self, algo_class=None):
        from rllib_llm.algorithm.rlvr import RLVR

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
        ours = {}
        rllib_params = inspect.signature(AlgorithmConfig.training).parameters
        for key in list(kwargs):
            if key in ALIASES:
                ours[ALIASES[key]] = kwargs.pop(key)
            elif key in FIELDS_BY_NAME:
                ours[key] = kwargs.pop(key)
            elif key not in rllib_params:
                close = difflib.get_close_matches(key, [*FIELDS_BY_NAME, *ALIASES], n=3)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                raise ValueError(
                    f"RLVRConfig.training() got an unknown setting {key!r}.{hint} Settings are "
                    "listed in rllib_llm/algorithm/fields.py and the README."
                )
        super().training(**kwargs)
        for key, value in ours.items():
            setattr(self, key, value)
        return self

    def env_runners(self, *, rollout_engine: str | None = None, **kwargs) -> RLVRConfig:
        """RLlib's env_runners(), plus `rollout_engine` ('torch' or 'vllm'), the `vllm_*`
        engine options, `max_tokens_per_generate_batch` and the `weight_sync_*` options
        (fields.py)."""
        if rollout_engine is not None:
            self.rollout_engine = rollout_engine
        ours = [k for k in kwargs if k in FIELDS_BY_NAME and (
            k.startswith(("vllm_", "weight_sync_")) or k == "max_tokens_per_generate_batch")]
        for key in ours:
            setattr(self, key, kwargs.pop(key))
        super().env_runners(**kwargs)
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
        # Tune passes flat dicts: accept ROLL's aliases there too. A dict made by to_dict()
        # carries RLlib's num_epochs at its default next to ppo_epochs: that is no alias use.
        config_dict = dict(config_dict)
        for alias, name in ALIASES.items():
            if alias not in config_dict:
                continue
            value = config_dict.pop(alias)
            if alias in RLLIB_REPLACED and value == RLLIB_REPLACED[alias][0]:
                continue
            given = config_dict.get(name, FIELDS_BY_NAME[name].default)
            if given not in (value, FIELDS_BY_NAME[name].default):
                raise ValueError(
                    f"RLVRConfig: {alias}={value!r} and {name}={given!r} both set {name}; "
                    f"set only {name}."
                )
            config_dict[name] = value
        return super().update_from_dict(config_dict)

    def get_state(self) -> dict[str, Any]:
        # RLlib drops every attribute equal to -1 (its DEPRECATED_VALUE) from the state it copies
        # configs with, so a field set to -1 came back as its default and passed validation.
        # Keep -1 wherever it is a real value; only RLlib's deprecated placeholders go.
        state = super().get_state()
        for name, value in vars(self).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                    value == DEPRECATED_VALUE and name not in _deprecated_attributes():
                state[name] = value
        return state

    # --- validation -----------------------------------------------------------------------------
    def validate(self) -> None:
        # Registered names are valid names; a config rebuilt in another process (a Tune trial's)
        # brings the driver's registrations along.
        self.user_registrations = self._registrations()
        _check_lr(self.lr)  # before RLlib's own check, whose message names no fix
        super().validate()
        for f in FIELDS:
            check_field(f.name, getattr(self, f.name), in_evaluation=self.in_evaluation)
        self._validate_rllib_settings()
        self._validate_combinations()
        self._validate_lengths()
        self._validate_env_config()
        self._validate_evaluation()

    def _validate_rllib_settings(self) -> None:
        """RLlib's own settings that RLVR reads (grad_clip) or replaces."""
        if self.grad_clip is not None and not (_finite(self.grad_clip) and self.grad_clip > 0):
            raise ValueError(
                f"RLVRConfig.grad_clip={self.grad_clip!r} is invalid: it must be a number > 0 "
                "(the largest gradient norm kept), or None for no clipping."
            )
        for name, (default, ours) in RLLIB_REPLACED.items():
            value = getattr(self, "_" + name if name == "train_batch_size_per_learner" else name)
            if value != default:
                raise ValueError(
                    f"RLVRConfig.{name}={value!r} is RLlib's setting, which RLVR does not read: "
                    f"set {ours} instead."
                )
        if self._torch_grad_scaler_class is not None or self.torch_compile_learner:
            raise ValueError(
                "RLVRConfig: RLlib's _torch_grad_scaler_class and torch_compile_learner are not "
                "supported by RLVR's learner (it runs every optimizer step of an iteration "
                "itself); remove them. Train in bfloat16 instead of float16."
            )

    def _validate_combinations(self) -> None:
        n = self.num_return_sequences_in_group
        needs = core.adv_estimator_info(self.adv_estimator)
        self._validate_critic(needs.needs_critic)
        if needs.needs_groups and n < 2:
            raise ValueError(
                f"RLVRConfig.num_return_sequences_in_group={n} is too small for "
                f"adv_estimator={self.adv_estimator!r}: a group baseline needs >= 2 responses "
                "per prompt. Set num_return_sequences_in_group >= 2."
            )
        if "group" in (self.norm_mean_type, self.norm_std_type) and n < 2:
            raise ValueError(
                f"RLVRConfig.norm_mean_type/norm_std_type='group' needs "
                f"num_return_sequences_in_group >= 2, got {n}."
            )
        check_placement(self)  # (before the engine's check, which needs vLLM installed)
        self._validate_rollout_engine()
        self._validate_async()
        if self.tis_lower_bound > self.tis_upper_bound:
            raise ValueError(
                f"RLVRConfig.tis_lower_bound={self.tis_lower_bound} exceeds tis_upper_bound="
                f"{self.tis_upper_bound}; the truncation interval must satisfy lower <= upper."
            )
        self._validate_batch_sizes()
        if self.model_dtype == "float16":
            raise ValueError(
                "RLVRConfig.model_dtype='float16' is not supported for training: float16 weights "
                "and Adam moments without float32 master weights and loss scaling underflow. Use "
                "'bfloat16' (same memory, float32's range) or 'float32'."
            )
        self._validate_learners()
        self._validate_lora()

    def _validate_lora(self) -> None:
        """LoRA settings need lora_rank, and peft installed."""
        if not self.lora_rank:
            changed = changed_fields(self, ("lora_alpha", "lora_target_modules"))
            if changed:
                raise ValueError(
                    f"RLVRConfig: {', '.join(changed)} configure LoRA adapters, but lora_rank=0 "
                    "trains the full model, so they would do nothing. Set lora_rank > 0."
                )
            return
        if importlib.util.find_spec("peft") is None:
            raise ValueError(f"RLVRConfig.lora_rank={self.lora_rank} needs the peft library: "
                             "pip install 'rllib_llm[lora]'.")

    def _validate_learners(self) -> None:
        """Several learners (DDP or DeepSpeed) share every mini-batch's prompt groups equally."""
        learners = self.num_learners
        check_deepspeed_settings(self)
        if learners <= 1 or self.in_evaluation:
            return
        n = self.num_return_sequences_in_group
        groups = (self.mini_batch_size or self.rollout_batch_size * n) // n
        if groups % learners:
            raise ValueError(
                f"RLVRConfig.num_learners={learners}: each learner trains on an equal share of "
                f"every mini-batch's whole prompt groups, and a mini-batch holds {groups} groups "
                f"(mini_batch_size={self.mini_batch_size}, rollout_batch_size="
                f"{self.rollout_batch_size}, num_return_sequences_in_group={n}). Make the number "
                f"of groups per mini-batch a multiple of {learners}."
            )
        if self.weight_sync_backend != "object_store":
            raise ValueError(
                f"RLVRConfig.weight_sync_backend={self.weight_sync_backend!r} with num_learners="
                f"{learners}: the broadcast group has one sending learner; several learners sync "
                "through the object store (weight_sync_backend='object_store'), from learner 0."
            )

    def _validate_critic(self, needs_critic: bool) -> None:
        """Critic settings need an estimator that reads a critic, and must fit together."""
        if not needs_critic:
            changed = changed_fields(self, CRITIC_FIELDS)
            if changed:
                raise ValueError(
                    f"RLVRConfig: {', '.join(changed)} configure the critic (or GAE), but "
                    f"adv_estimator={self.adv_estimator!r} uses no critic, so they would do "
                    "nothing. Set adv_estimator='gae', or leave them at their defaults."
                )
            return
        if self.critic_lr is not None:
            _check_lr(self.critic_lr, "critic_lr")
        if self.critic_shares_trunk and self.critic_model_name_or_path is not None:
            raise ValueError(
                f"RLVRConfig.critic_model_name_or_path={self.critic_model_name_or_path!r} with "
                "critic_shares_trunk=True: a value head on the policy's trunk starts from the "
                "policy's checkpoint. Drop one of the two."
            )
        if not self.critic_shares_trunk and self.value_loss_coef != 1.0:
            raise ValueError(
                f"RLVRConfig.value_loss_coef={self.value_loss_coef!r} only weighs the value loss "
                "against the actor loss on a shared trunk (critic_shares_trunk=True); a separate "
                "critic has its own Adam optimizer, which a loss scale does not change. Set "
                "critic_lr instead, or critic_shares_trunk=True."
            )

    def _validate_batch_sizes(self) -> None:
        """Prompts per runner, responses per iteration, mini- and micro-batches fit together."""
        n = self.num_return_sequences_in_group
        runners = max(1, self.num_env_runners)
        # (An evaluation config's env runners are the evaluation ones: they take no batch.)
        if self.rollout_batch_size % runners and not self.in_evaluation:
            raise ValueError(
                f"RLVRConfig.rollout_batch_size={self.rollout_batch_size} must be divisible by "
                f"num_env_runners={self.num_env_runners}, so every runner samples whole groups."
            )
        total = self.rollout_batch_size * n
        if total > MAX_RESPONSES_PER_ITERATION:
            raise ValueError(
                f"RLVRConfig.rollout_batch_size={self.rollout_batch_size} * "
                f"num_return_sequences_in_group={n} = {total} responses per iteration is over "
                f"the limit of {MAX_RESPONSES_PER_ITERATION}; use fewer prompts per iteration."
            )
        if self.mini_batch_size is not None and (total % self.mini_batch_size or
                                                 self.mini_batch_size % n):
            raise ValueError(
                f"RLVRConfig.mini_batch_size={self.mini_batch_size} must be a multiple of "
                f"num_return_sequences_in_group={n} (mini-batches hold whole prompt groups) and "
                f"divide the {total} responses of an iteration (rollout_batch_size * "
                "num_return_sequences_in_group)."
            )
        size = self.mini_batch_size or total
        if self.micro_batch_size is not None and self.micro_batch_size > size:
            raise ValueError(
                f"RLVRConfig.micro_batch_size={self.micro_batch_size} exceeds the mini-batch of "
                f"{size} responses; set micro_batch_size <= mini_batch_size."
            )

    def _validate_lengths(self) -> None:
        context = self.model_context_length
        if context is None:
            return
        if self.response_length >= context:
            raise ValueError(
                f"RLVRConfig.response_length={self.response_length} leaves no room for a prompt "
                f"in the model's context of {context} tokens (max_position_embeddings of "
                f"{self.model_name_or_path!r}); use a smaller response_length."
            )
        if self.prompt_length is not None and self.prompt_length + self.response_length > context:
            raise ValueError(
                f"RLVRConfig.prompt_length={self.prompt_length} + response_length="
                f"{self.response_length} exceeds the model's context of {context} tokens "
                f"(max_position_embeddings of {self.model_name_or_path!r}); lower them, or set "
                "prompt_length=None to use what the response leaves."
            )

    def _validate_env_config(self) -> None:
        owned = {"model": self.model_name_or_path, "prompt_length": self.resolved_prompt_length,
                 "response_length": self.response_length, "seed": self.seed}
        env_config = dict(self.env_config or {})
        for key in ENV_KEYS_FROM_TRAINING:
            if key in env_config and env_config[key] != owned[key]:
                field = {"model": "model_name_or_path", "seed": "seed (.debugging(seed=...))"}.get(
                    key, key)
                raise ValueError(
                    f"env_config[{key!r}]={env_config[key]!r} conflicts with RLVRConfig.{field}="
                    f"{owned[key]!r}, which the env runners pass to every env; set it there and "
                    f"drop it from env_config."
                )

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

    def _validate_evaluation(self) -> None:
        """RLlib's evaluation settings that RLVR.evaluate honours or rejects (see there)."""
        if self.in_evaluation:
            return
        if self.evaluation_duration != 10 or self.evaluation_duration_unit != "episodes":
            raise ValueError(
                f"RLVRConfig.evaluation_duration={self.evaluation_duration!r} "
                f"(evaluation_duration_unit={self.evaluation_duration_unit!r}) is not used: RLVR "
                "evaluates a fixed set of held-out problems. Leave evaluation_duration at its "
                "default and set eval_num_problems (and eval_num_samples responses per problem)."
            )
        if self.evaluation_interval:  # evaluation will run: its problems must be held out
            from rllib_llm.algorithm.evaluation import check_held_out

            check_held_out(self, self.get_evaluation_config_object())

    def _validate_rollout_engine(self) -> None:
        from rllib_llm.rollout.vllm_engine import INSTALL_HINT, vllm_installed

        if self.rollout_engine == "vllm" and not vllm_installed():
            raise ValueError(
                f"RLVRConfig.rollout_engine='vllm' needs vLLM, which is not installed: "
                f"{INSTALL_HINT}. Or use rollout_engine='torch'."
            )
        if self.rollout_is_level is not None and not self.recomputes_old_logp:
            raise ValueError(
                f"RLVRConfig.rollout_is_level={self.rollout_is_level!r} needs "
                "recompute_old_logp=True: the weights compare the learner's recomputed old_logp "
                "with the sampler's log-probs, which are equal without recomputation."
            )
        # (RLlib derives an evaluation config with its own, usually 0, env runners: not ours.)
        if self.weight_sync_backend != "object_store" and self.num_env_runners < 1 and \
                not self.in_evaluation:
            raise ValueError(
                f"RLVRConfig.weight_sync_backend={self.weight_sync_backend!r} broadcasts to "
                "remote env runners, but num_env_runners=0 samples in the driver, where the "
                "weights arrive by a memory copy anyway. Set num_env_runners >= 1 or "
                "weight_sync_backend='object_store'."
            )
        if self.rollout_engine == "vllm" and self.top_p < 1 and not self.recomputes_old_logp:
            raise ValueError(
                f"RLVRConfig.top_p={self.top_p} with rollout_engine='vllm' needs "
                "recompute_old_logp=True (and in asynchronous training rollout_is_level too): "
                "vLLM reports log-probs renormalised over the top-p nucleus, not the learner's "
                "log-probs."
            )

    def _validate_async(self) -> None:
        """async_generation_ratio and max_staleness: what the pipeline needs and can bound."""
        k = self.async_generation_ratio
        if self.max_staleness is not None and self.max_staleness < k:
            raise ValueError(
                f"RLVRConfig.max_staleness={self.max_staleness} is below async_generation_ratio="
                f"{k}: generating {k} batches ahead makes every batch {k} updates old, so every "
                f"one would be dropped. Set max_staleness >= {k}, or None (= {k})."
            )
        if not k or self.in_evaluation:
            return
        # RLlib's weight push (sync_weights) is an asynchronous call that RLlib drops while as many
        # calls of its kind as this limit are queued on a runner; behind k batches of generation
        # up to k pushes and k syncs of the runners' counters wait there. (Measured: with RLlib's
        # default of 1, pushes were dropped and batches fell behind max_staleness.)
        self.max_requests_in_flight_per_env_runner = max(
            self.max_requests_in_flight_per_env_runner, 2 * k + 2)
        if self.num_env_runners < 1:
            raise ValueError(
                f"RLVRConfig.async_generation_ratio={k} needs remote env runners "
                "(.env_runners(num_env_runners=N), N >= 1): with num_env_runners=0 the driver "
                "samples, and it cannot while its learner updates. Or set "
                "async_generation_ratio=0."
            )
        if self.weight_sync_backend != "object_store":
            raise ValueError(
                f"RLVRConfig.weight_sync_backend={self.weight_sync_backend!r} with "
                f"async_generation_ratio={k}: a broadcast needs every runner to join at once, "
                "which would wait for the generation in flight; asynchronous training pushes "
                "weights through the object store (weight_sync_backend='object_store')."
            )
        if self.recomputes_old_logp and self.rollout_is_level is None:
            raise ValueError(
                f"RLVRConfig.recompute_old_logp=True with async_generation_ratio={k} and no "
                "rollout_is_level: the recomputed old_logp are the learner's current policy, so "
                "the pg_variant's ratio would not see the episodes' lag, and nothing would "
                "correct it. Set rollout_is_level='token' (or 'sequence'): the rollout weights "
                "pi_old / pi_behaviour correct the lag (decoupled PPO); or recompute_old_logp="
                "False (or None): the ratio then uses the sampler's log-probs."
            )

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
        """`max_staleness` with its None resolved: async_generation_ratio."""
        return self.async_generation_ratio if self.max_staleness is None else self.max_staleness

    @property
    def critic_spec(self) -> dict[str, Any] | None:
        """The module's critic (model_config["critic"]), or None for a critic-free estimator."""
        core.restore_registrations(self.user_registrations)  # a remote process knows built-ins
        if not core.adv_estimator_info(self.adv_estimator).needs_critic:
            return None
        return {"model_name_or_path": self.critic_model_name_or_path or self.model_name_or_path,
                "shares_trunk": self.critic_shares_trunk}

    @property
    def lora_spec(self) -> dict[str, Any] | None:
        """The module's LoRA adapters (model_config["lora"]), or None for full fine-tuning."""
        if not self.lora_rank:
            return None
        alpha = 2 * self.lora_rank if self.lora_alpha is None else self.lora_alpha
        return {"rank": self.lora_rank, "alpha": alpha,
                "target_modules": self.lora_target_modules
                if isinstance(self.lora_target_modules, str) else list(self.lora_target_modules)}

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_llm.learner.module import RLVRModule

        return RLModuleSpec(
            module_class=RLVRModule,
            model_config={
                "model_name_or_path": self.model_name_or_path,
                "model_dtype": self.model_dtype,
                "temperature": self.temperature,
                "use_reference": self.uses_reference,
                "entropy_grad": self.entropy_coef > 0,
                "micro_batch_tokens": self.max_tokens_per_micro_batch,
                "micro_batch_rows": self.micro_batch_size,
                "gradient_checkpointing": self.gradient_checkpointing,
                "fused_kernels": self.use_fused_kernels,
                "critic": self.critic_spec,
                "lora": self.lora_spec,
            },
        )

    def get_default_learner_class(self):
        if self.learner_strategy == "deepspeed":
            from rllib_llm.learner.deepspeed_learner import DeepSpeedRLVRLearner

            return DeepSpeedRLVRLearner
        from rllib_llm.learner.learner import RLVRLearner

        return RLVRLearner

    def build_learner_group(self, *, env=None, spaces=None, rl_module_spec=None,
                            placement_group=None):
        """RLlib's LearnerGroup, with DeepSpeed learners' state gathered by all of them."""
        from rllib_llm.learner.learner_group import RLVRLearnerGroup

        if rl_module_spec is None:
            rl_module_spec = self.get_multi_rl_module_spec(env=env, spaces=spaces)
        return RLVRLearnerGroup(config=self.copy(), module_spec=rl_module_spec,
                                placement_group=placement_group)

    def build_learner_connector(self, input_observation_space, input_action_space, device=None):
        from ray.rllib.connectors.learner import LearnerConnectorPipeline

        from rllib_llm.learner.connector import PackAndComputeAdvantages
        from rllib_llm.models import load_tokenizer

        tokenizer = load_tokenizer(self.model_name_or_path)
        return LearnerConnectorPipeline(
            connectors=[PackAndComputeAdvantages(
                input_observation_space, input_action_space, config=self,
                pad_token_id=tokenizer.pad_token_id,
            )],
            input_observation_space=input_observation_space,
            input_action_space=input_action_space,
        )


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_lr(lr: Any, name: str = "lr") -> None:
    """lr (or critic_lr): a number > 0, or RLlib's piecewise schedule [[timestep, value], ...] of
    such values with non-decreasing timesteps >= 0 starting at 0."""
    fix = ("use a number > 0 (e.g. 1e-6) or a schedule [[0, 1e-6], [20000, 1e-5]] with "
           "timesteps from 0 upwards and values > 0")
    if _finite(lr):
        if lr > 0:
            return
        raise ValueError(f"RLVRConfig.{name}={lr!r} is invalid: a learning rate <= 0 trains "
                         f"backwards or not at all; {fix}.")
    points = lr if isinstance(lr, (list, tuple)) else None
    ok = bool(points) and all(isinstance(p, (list, tuple)) and len(p) == 2 and _finite(p[0])
                              and _finite(p[1]) for p in points)
    if ok:
        times = [p[0] for p in points]
        ok = times[0] == 0 and all(b >= a for a, b in zip(times, times[1:])) and \
            all(p[1] > 0 for p in points)
    if not ok:
        raise ValueError(f"RLVRConfig.{name}={lr!r} is invalid; {fix}.")


@functools.cache
def _deprecated_attributes() -> frozenset[str]:
    """Attributes RLlib's AlgorithmConfig itself sets to DEPRECATED_VALUE (-1)."""
    return frozenset(k for k, v in vars(AlgorithmConfig()).items() if v == DEPRECATED_VALUE)


@functools.lru_cache(maxsize=16)
def _context_length(model_name_or_path: str) -> int | None:
    from rllib_llm.models.context_length import model_context_length

    return model_context_length(model_name_or_path)
