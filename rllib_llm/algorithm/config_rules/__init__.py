"""The rules of RLVRConfig that tie several settings together, and the settings derived from
others (`resolve_derived`): the one place to read which rules exist and in which order.

Each rule is a function of the config that raises ValueError naming the settings, the rule and
a fix, and returns nothing; it lives in the module of its topic, `<topic>_rules.py` (model,
sampling, placement, batch, learner, DeepSpeed, FSDP2, advantage, distillation, reward model,
RLlib's settings, evaluation), named so that no rule module shares its name with a module of the
code it checks. Defaults come from
`fields.FIELDS` (`changed_fields`, `refuse_changed`), never from a copy here. `check_all` runs
`CHECKS` in order after every field passed its own rule (fields.py); the builder, `config.py`,
calls both from `validate()`.
"""

from __future__ import annotations

from collections.abc import Callable

from rllib_llm.algorithm.config_rules.advantage_rules import (
    check_critic,
    check_dynamic_sampling,
    check_groups,
)
from rllib_llm.algorithm.config_rules.batch_rules import check_batch_sizes
from rllib_llm.algorithm.config_rules.deepspeed_rules import check_deepspeed_settings
from rllib_llm.algorithm.config_rules.distillation_rules import check_distillation
from rllib_llm.algorithm.config_rules.evaluation_rules import check_evaluation
from rllib_llm.algorithm.config_rules.fsdp2_rules import check_fsdp2
from rllib_llm.algorithm.config_rules.learner_rules import (
    check_autocast,
    check_learners,
    check_lora,
    check_model_dtype,
)
from rllib_llm.algorithm.config_rules.model_rules import check_lengths, check_model, check_overlong
from rllib_llm.algorithm.config_rules.placement_rules import check_cuda_ipc_sync, check_placement
from rllib_llm.algorithm.config_rules.reward_model_rules import check_reward_model
from rllib_llm.algorithm.config_rules.rllib_rules import check_env_config, check_rllib_settings
from rllib_llm.algorithm.config_rules.sampling_rules import (
    check_async,
    check_partial_rollouts,
    check_rollout_engine,
    check_rollout_rejection,
    check_tis_bounds,
)

# Every rule, in the order `check_all` runs them: the first broken one is the error a user
# sees, so the order is part of the behaviour (the model loads before anything reads its
# context; placement before the engine's rule, which needs vLLM installed).
CHECKS: tuple[Callable[..., None], ...] = (
    check_model,
    check_rllib_settings,
    check_critic,
    check_groups,
    check_placement,
    check_cuda_ipc_sync,
    check_rollout_engine,
    check_rollout_rejection,
    check_async,
    check_partial_rollouts,
    check_tis_bounds,
    check_batch_sizes,
    check_model_dtype,
    check_deepspeed_settings,
    check_fsdp2,
    check_learners,
    check_lora,
    check_autocast,
    check_distillation,
    check_reward_model,
    check_lengths,
    check_overlong,
    check_dynamic_sampling,
    check_env_config,
    check_evaluation,
)


def resolve_derived(cfg) -> None:
    """Set what other settings decide, before the rules check them (a step of its own, so that
    checking never changes the config)."""
    k = cfg.async_generation_ratio
    if k and not cfg.in_evaluation:
        # RLlib's weight push (sync_weights) is an asynchronous call that RLlib drops while as
        # many calls of its kind as this limit are queued on a runner; behind k batches of
        # generation up to k pushes and k syncs of the runners' counters wait there. (Measured:
        # with RLlib's default of 1, pushes were dropped and batches fell behind max_staleness.)
        cfg.max_requests_in_flight_per_env_runner = max(
            cfg.max_requests_in_flight_per_env_runner, 2 * k + 2)


def check_all(cfg) -> None:
    """Raise ValueError for the first of `CHECKS` that `cfg` breaks (the fields' own rules have
    passed)."""
    for check in CHECKS:
        check(cfg)
