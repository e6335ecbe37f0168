"""What `RLVRConfig` tells RLlib to build on the learner side: the module spec, the learner
class of the `learner_strategy`, the learner group, and the learner connector pipeline.

RLlib calls these through the config's `get_default_rl_module_spec`, `get_default_learner_class`,
`build_learner_group` and `build_learner_connector`. The learner modules load here, when RLlib
builds the learners, not when the config is made: only the DeepSpeed strategy imports DeepSpeed.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from rllib_llm import core


def critic_spec(cfg) -> dict[str, Any] | None:
    """The module's critic (model_config["critic"]), or None for a critic-free estimator."""
    core.restore_registrations(cfg.user_registrations)  # a remote process knows built-ins
    if not core.adv_estimator_info(cfg.adv_estimator).needs_critic:
        return None
    return {"model_name_or_path": cfg.critic_model_name_or_path or cfg.model_name_or_path,
            "shares_trunk": cfg.critic_shares_trunk}


def lora_spec(cfg) -> dict[str, Any] | None:
    """The module's LoRA adapters (model_config["lora"]), or None for full fine-tuning."""
    if not cfg.lora_rank:
        return None
    alpha = 2 * cfg.lora_rank if cfg.lora_alpha is None else cfg.lora_alpha
    return {"rank": cfg.lora_rank, "alpha": alpha,
            "target_modules": cfg.lora_target_modules
            if isinstance(cfg.lora_target_modules, str) else list(cfg.lora_target_modules)}


def module_spec(cfg) -> RLModuleSpec:
    """The RLVRModule's spec, its settings read once from the config `cfg`."""
    from rllib_llm.learner.module import RLVRModule
    from rllib_llm.learner.module_settings import CriticSpec, ModuleSettings

    critic = critic_spec(cfg)
    return RLModuleSpec(
        module_class=RLVRModule,
        # RLlib hands the module a dict of it (RLVRModule reads it back: ModuleSettings.of).
        model_config=ModuleSettings(
            model_name_or_path=cfg.model_name_or_path,
            model_dtype=cfg.model_dtype,
            temperature=cfg.temperature,
            use_reference=cfg.uses_reference,
            entropy_grad=cfg.entropy_coef > 0,
            micro_batch_tokens=cfg.max_tokens_per_micro_batch,
            micro_batch_rows=cfg.micro_batch_size,
            gradient_checkpointing=cfg.gradient_checkpointing,
            fused_kernels=cfg.use_fused_kernels,
            remove_padding=cfg.use_remove_padding,
            attn_implementation=cfg.attn_implementation,
            autocast_dtype=cfg.autocast_dtype,
            critic=None if critic is None else CriticSpec(**critic),
            lora=lora_spec(cfg),
            teacher=cfg.teacher_model_name_or_path,
        ),
    )


def learner_class(learner_strategy: str) -> type:
    """The Learner class of `learner_strategy` ("torch", "deepspeed" or "fsdp2")."""
    if learner_strategy == "deepspeed":
        from rllib_llm.learner.deepspeed_learner import DeepSpeedRLVRLearner

        return DeepSpeedRLVRLearner
    if learner_strategy == "fsdp2":
        from rllib_llm.learner.fsdp2_learner import FSDP2RLVRLearner

        return FSDP2RLVRLearner
    from rllib_llm.learner.learner import RLVRLearner

    return RLVRLearner


def learner_group(cfg, rl_module_spec, placement_group):
    """RLlib's LearnerGroup for the config `cfg`, with sharded (DeepSpeed, FSDP2) learners'
    state gathered by all of them."""
    from rllib_llm.learner.learner_group import RLVRLearnerGroup

    return RLVRLearnerGroup(config=cfg.copy(), module_spec=rl_module_spec,
                            placement_group=placement_group)


def learner_connector(cfg, input_observation_space, input_action_space):
    """The learner connector pipeline: episodes -> packed train batch with advantages."""
    from ray.rllib.connectors.learner import LearnerConnectorPipeline

    from rllib_llm.learner.connector import PackAndComputeAdvantages
    from rllib_llm.models import load_tokenizer

    tokenizer = load_tokenizer(cfg.model_name_or_path)
    return LearnerConnectorPipeline(
        connectors=[PackAndComputeAdvantages(
            input_observation_space, input_action_space, config=cfg,
            pad_token_id=tokenizer.pad_token_id,
        )],
        input_observation_space=input_observation_space,
        input_action_space=input_action_space,
    )
