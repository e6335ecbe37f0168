"""`RLVRConfig`: RLlib AlgorithmConfig for RL with verifiable rewards on language models.

    config = RLVRConfig().environment("math_verify").training(pg_variant="topr", lr=1e-3)
    algo = config.build()
    algo.train()

Every RLVR setting is declared once, with its documentation and rule, in `fields.py`; this
class sets their defaults, accepts them (and ROLL's aliases) in `.training()`, and validates
them — and the rules that tie several of them together — when the algorithm is built.
"""

from __future__ import annotations

import copy
import difflib
import inspect
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from rllib_llm import core
from rllib_llm.algorithm.fields import ALIASES, FIELDS, FIELDS_BY_NAME, check_field


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
        engine options and the `weight_sync_*` options (fields.py)."""
        if rollout_engine is not None:
            self.rollout_engine = rollout_engine
        ours = [k for k in kwargs
                if k.startswith(("vllm_", "weight_sync_")) and k in FIELDS_BY_NAME]
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
        # Tune passes flat dicts: accept ROLL's aliases there too.
        config_dict = dict(config_dict)
        for alias, name in ALIASES.items():
            if alias in config_dict:
                config_dict[name] = config_dict.pop(alias)
        return super().update_from_dict(config_dict)

    # --- validation -----------------------------------------------------------------------------
    def validate(self) -> None:
        # Registered names are valid names; a config rebuilt in another process (a Tune trial's)
        # brings the driver's registrations along.
        self.user_registrations = self._registrations()
        super().validate()
        for f in FIELDS:
            check_field(f.name, getattr(self, f.name), in_evaluation=self.in_evaluation)
        self._validate_combinations()
        self._validate_evaluation()

    def _validate_combinations(self) -> None:
        n = self.num_return_sequences_in_group
        needs = core.adv_estimator_info(self.adv_estimator)
        if needs.needs_critic:
            raise ValueError(
                f"RLVRConfig.adv_estimator={self.adv_estimator!r} needs a critic (value model), "
                "which rllib_llm does not ship yet. Use 'grpo', 'rloo', 'reinforce_baseline' or "
                "'reinforce'."
            )
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
        self._validate_rollout_engine()
        if self.tis_lower_bound > self.tis_upper_bound:
            raise ValueError(
                f"RLVRConfig.tis_lower_bound={self.tis_lower_bound} exceeds tis_upper_bound="
                f"{self.tis_upper_bound}; the truncation interval must satisfy lower <= upper."
            )
        runners = max(1, self.num_env_runners)
        # (An evaluation config's env runners are the evaluation ones: they take no batch.)
        if self.rollout_batch_size % runners and not self.in_evaluation:
            raise ValueError(
                f"RLVRConfig.rollout_batch_size={self.rollout_batch_size} must be divisible by "
                f"num_env_runners={self.num_env_runners}, so every runner samples whole groups."
            )
        total = self.rollout_batch_size * n
        if self.mini_batch_size is not None and total % self.mini_batch_size:
            raise ValueError(
                f"RLVRConfig.mini_batch_size={self.mini_batch_size} must divide the "
                f"{total} responses of an iteration (rollout_batch_size * "
                "num_return_sequences_in_group)."
            )
        if self.num_learners > 1:
            raise ValueError(
                f"RLVRConfig.num_learners={self.num_learners}: data-parallel learners would split "
                "prompt groups across shards; use num_learners <= 1 (DeepSpeed arrives later)."
            )

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
                "recompute_old_logp=True (or None): vLLM reports log-probs renormalised over the "
                "top-p nucleus, not the learner's log-probs."
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
        """`recompute_old_logp` with its None resolved: on for the vLLM engine only."""
        if self.recompute_old_logp is None:
            return self.rollout_engine == "vllm"
        return bool(self.recompute_old_logp)

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_llm.learner.module import RLVRModule

        return RLModuleSpec(
            module_class=RLVRModule,
            model_config={
                "model_name_or_path": self.model_name_or_path,
                "model_dtype": self.model_dtype,
                "temperature": self.temperature,
                "use_reference": self.uses_reference,
            },
        )

    def get_default_learner_class(self):
        from rllib_llm.learner.learner import RLVRLearner

        return RLVRLearner

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
