"""`RLVRConfig`: RLlib AlgorithmConfig for RL with verifiable rewards on language models.

    config = RLVRConfig().environment("math_verify").training(pg_variant="topr", lr=1e-5)
    algo = config.build()
    algo.train()

Every RLVR setting is declared once, with its documentation and rule, in `fields.py`; this
class, the builder, sets their defaults, accepts them (and ROLL's aliases) in `.training()`, and
validates them when the algorithm is built: each field by its own rule, then the settings
derived from others and the rules that tie several together (`config_rules/`, run in the order
its `CHECKS` lists).
"""

from __future__ import annotations

import copy
import functools
import inspect
from typing import Any

from ray._common.deprecation import DEPRECATED_VALUE
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from rllib_llm import core
from rllib_llm.algorithm import config_rules, config_types
from rllib_llm.algorithm.config_rules.evaluation_rules import check_evaluation_config_keys
from rllib_llm.algorithm.config_rules.learner_rules import check_lr
from rllib_llm.algorithm.config_rules.rllib_rules import RLLIB_REPLACED
from rllib_llm.algorithm.fields import (
    ALIASES,
    FIELDS,
    FIELDS_BY_NAME,
    alias_note,
    check_field,
    did_you_mean,
)

# The sections (fields.py) whose settings `env_runners()` takes besides RLlib's own; every
# setting is accepted by `training()`.
ENV_RUNNER_SECTIONS = ("engine",)


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
        ours, given_as = {}, {}
        rllib_params = inspect.signature(AlgorithmConfig.training).parameters
        for key in list(kwargs):
            if key in ALIASES or key in FIELDS_BY_NAME:
                name = ALIASES.get(key, key)
                if name in given_as:  # an alias and its field: which one wins must not be order
                    raise ValueError(
                        f"RLVRConfig.training() got {given_as[name]}={ours[name]!r} and "
                        f"{key}={kwargs[key]!r}, which both set {name} ("
                        f"{alias_note(given_as[name], key)}); set only {name}."
                    )
                ours[name], given_as[name] = kwargs.pop(key), key
            elif key not in rllib_params:
                hint = did_you_mean(key, [*FIELDS_BY_NAME, *ALIASES, *rllib_params])
                raise ValueError(
                    f"RLVRConfig.training() got an unknown setting {key!r}.{hint} Settings are "
                    "listed in rllib_llm/algorithm/fields.py and docs/SETTINGS.md."
                )
        super().training(**kwargs)
        for key, value in ours.items():
            setattr(self, key, value)
        return self

    def env_runners(self, **kwargs) -> RLVRConfig:
        """RLlib's env_runners(), plus the settings of the "engine" section (fields.py): the
        rollout engine, its options and memory, and the weight sync to it."""
        ours = [k for k in kwargs if k in FIELDS_BY_NAME
                and FIELDS_BY_NAME[k].section in ENV_RUNNER_SECTIONS]
        for key in ours:
            setattr(self, key, kwargs.pop(key))
        super().env_runners(**kwargs)
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
        from rllib_llm.learner.module_settings import CriticSpec, ModuleSettings

        critic = self.critic_spec
        return RLModuleSpec(
            module_class=RLVRModule,
            # RLlib hands the module a dict of it (RLVRModule reads it back: ModuleSettings.of).
            model_config=ModuleSettings(
                model_name_or_path=self.model_name_or_path,
                model_dtype=self.model_dtype,
                temperature=self.temperature,
                use_reference=self.uses_reference,
                entropy_grad=self.entropy_coef > 0,
                micro_batch_tokens=self.max_tokens_per_micro_batch,
                micro_batch_rows=self.micro_batch_size,
                gradient_checkpointing=self.gradient_checkpointing,
                fused_kernels=self.use_fused_kernels,
                remove_padding=self.use_remove_padding,
                attn_implementation=self.attn_implementation,
                autocast_dtype=self.autocast_dtype,
                critic=None if critic is None else CriticSpec(**critic),
                lora=self.lora_spec,
                teacher=self.teacher_model_name_or_path,
            ),
        )

    def get_default_learner_class(self):
        if self.learner_strategy == "deepspeed":
            from rllib_llm.learner.deepspeed_learner import DeepSpeedRLVRLearner

            return DeepSpeedRLVRLearner
        if self.learner_strategy == "fsdp2":
            from rllib_llm.learner.fsdp2_learner import FSDP2RLVRLearner

            return FSDP2RLVRLearner
        from rllib_llm.learner.learner import RLVRLearner

        return RLVRLearner

    def build_learner_group(self, *, env=None, spaces=None, rl_module_spec=None,
                            placement_group=None):
        """RLlib's LearnerGroup, with sharded (DeepSpeed, FSDP2) learners' state gathered by all
        of them."""
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


# What IDEs, type checkers and help() read (the settings are set by a loop over FIELDS).
RLVRConfig.__annotations__ = {**RLVRConfig.__dict__.get("__annotations__", {}),
                              **config_types.annotations()}
RLVRConfig.__doc__ = f"{RLVRConfig.__doc__}\n\n{config_types.settings_doc()}"


@functools.cache
def _deprecated_attributes() -> frozenset[str]:
    """Attributes RLlib's AlgorithmConfig itself sets to DEPRECATED_VALUE (-1)."""
    return frozenset(k for k, v in vars(AlgorithmConfig()).items() if v == DEPRECATED_VALUE)


@functools.lru_cache(maxsize=16)
def _context_length(model_name_or_path: str) -> int | None:
    from rllib_llm.models.context_length import model_context_length

    return model_context_length(model_name_or_path)
