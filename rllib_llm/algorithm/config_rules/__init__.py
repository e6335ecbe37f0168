"""The rules of RLVRConfig that tie several settings together, one small function per group,
and the settings derived from others (`resolve_derived`). Each rule raises ValueError naming the
settings and a fix; `check_all` runs them in order after every field passed its own rule
(fields.py). (The builder, `config.py`, calls them from `validate()`.)"""

from __future__ import annotations

import importlib.util
from typing import Any

from rllib_llm import core
from rllib_llm.algorithm.config_rules.deepspeed import check_deepspeed_settings
from rllib_llm.algorithm.config_rules.distillation import check_distillation
from rllib_llm.algorithm.config_rules.placement import check_placement
from rllib_llm.algorithm.config_rules.reward_model import check_reward_model
from rllib_llm.algorithm.fields import (
    ALIASES,
    FIELDS_BY_NAME,
    changed_fields,
    did_you_mean,
    is_number,
    non_negative_int,
    refuse_changed,
    rule_broken,
)

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
    """Every rule, in order (the fields' own rules have passed)."""
    check_model(cfg)
    check_rllib_settings(cfg)
    check_combinations(cfg)
    check_distillation(cfg)
    check_reward_model(cfg)
    check_lengths(cfg)
    check_overlong(cfg)
    check_dynamic_sampling(cfg)
    check_env_config(cfg)
    check_evaluation(cfg)


def check_model(cfg) -> None:
    """model_name_or_path (and critic_ and teacher_model_name_or_path) can be loaded: a missing
    local path, or a hub id that cannot be fetched, fails here at once, naming the setting (not
    after the hub's retries, as a traceback). Those two raise FileNotFoundError, as loading
    would."""
    from rllib_llm.models import resolve_checkpoint

    for name in ("model_name_or_path", "critic_model_name_or_path",
                 "teacher_model_name_or_path"):
        value = getattr(cfg, name)
        if value is None:
            continue
        try:
            resolve_checkpoint(value, kind="model", setting=f"RLVRConfig.{name}")
        except ValueError as e:
            raise ValueError(f"RLVRConfig.{name}: {e}") from e
    try:
        cfg.model_context_length  # reads the model's config.json (from the hub for a hub id)
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"RLVRConfig.model_name_or_path={cfg.model_name_or_path!r}: its config cannot be "
            f"read ({first}); pass a local checkpoint directory, 'embedded', or a hub id that "
            "exists"
        ) from e


def check_rllib_settings(cfg) -> None:
    """RLlib's own settings that RLVR reads (grad_clip, num_env_runners) or replaces."""
    # RLlib takes any number here: -1 trained, sampling in the driver as 0 does.
    why = non_negative_int(cfg.num_env_runners)
    if why is not None:
        raise ValueError(
            f"RLVRConfig.num_env_runners={cfg.num_env_runners!r} is invalid: it {why} (0 samples "
            "in the driver process, N >= 1 in N remote env runners); set "
            ".env_runners(num_env_runners=0) to sample in the driver."
        )
    if cfg.grad_clip is not None and not (is_number(cfg.grad_clip) and cfg.grad_clip > 0):
        raise ValueError(
            f"RLVRConfig.grad_clip={cfg.grad_clip!r} is invalid: it must be a number > 0 "
            "(the largest gradient norm kept), or None for no clipping."
        )
    for name, (default, ours) in RLLIB_REPLACED.items():
        value = getattr(cfg, "_" + name if name == "train_batch_size_per_learner" else name)
        if value != default:
            raise ValueError(
                f"RLVRConfig.{name}={value!r} is RLlib's setting, which RLVR does not read: "
                f"set {ours} instead."
            )
    if cfg._torch_grad_scaler_class is not None or cfg.torch_compile_learner:
        raise ValueError(
            "RLVRConfig: RLlib's _torch_grad_scaler_class and torch_compile_learner are not "
            "supported by RLVR's learner (it runs every optimizer step of an iteration "
            "itself); remove them. Train in bfloat16 instead of float16."
        )


def check_combinations(cfg) -> None:
    """Estimator, groups, engine, asynchrony, batch sizes, dtype, learners and LoRA fit
    together."""
    n = cfg.num_return_sequences_in_group
    needs = core.adv_estimator_info(cfg.adv_estimator)
    check_critic(cfg, needs.needs_critic)
    if needs.needs_groups and n < 2:
        raise ValueError(
            f"RLVRConfig.num_return_sequences_in_group={n} is too small for "
            f"adv_estimator={cfg.adv_estimator!r}: a group baseline needs >= 2 responses "
            "per prompt. Set num_return_sequences_in_group >= 2."
        )
    if "group" in (cfg.norm_mean_type, cfg.norm_std_type) and n < 2:
        raise ValueError(
            f"RLVRConfig.norm_mean_type/norm_std_type='group' needs "
            f"num_return_sequences_in_group >= 2, got {n}."
        )
    check_placement(cfg)  # (before the engine's check, which needs vLLM installed)
    check_rollout_engine(cfg)
    check_async(cfg)
    check_partial_rollouts(cfg)
    if cfg.tis_lower_bound > cfg.tis_upper_bound:
        raise ValueError(
            f"RLVRConfig.tis_lower_bound={cfg.tis_lower_bound} exceeds tis_upper_bound="
            f"{cfg.tis_upper_bound}; the truncation interval must satisfy lower <= upper."
        )
    check_batch_sizes(cfg)
    if cfg.model_dtype == "float16":
        raise ValueError(
            "RLVRConfig.model_dtype='float16' is not supported for training: float16 weights "
            "and Adam moments without float32 master weights and loss scaling underflow. Use "
            "'bfloat16' (same memory, float32's range) or 'float32'."
        )
    check_learners(cfg)
    check_lora(cfg)
    check_autocast(cfg)


def check_autocast(cfg) -> None:
    """Mixed precision casts float32 weights; DeepSpeed has its own bf16; the sampler's follows
    the learners'."""
    if cfg.autocast_dtype is None:
        refuse_changed(cfg, ("sampler_autocast",),
                       "samples under autocast_dtype, but autocast_dtype=None: there is no "
                       "autocast to sample under. Set autocast_dtype='bfloat16', or leave it off.")
        return
    if cfg.model_dtype != "float32":
        raise ValueError(
            f"RLVRConfig.autocast_dtype={cfg.autocast_dtype!r} runs learners in mixed precision "
            f"over float32 weights, but model_dtype={cfg.model_dtype!r}: set "
            "model_dtype='float32' (or autocast_dtype=None to train in model_dtype).")
    if cfg.learner_strategy == "deepspeed":
        raise ValueError(
            f"RLVRConfig.autocast_dtype={cfg.autocast_dtype!r} is not combined with "
            "learner_strategy='deepspeed': set autocast_dtype=None and model_dtype='bfloat16' "
            "(DeepSpeed's bf16, with float32 master weights).")


def check_lora(cfg) -> None:
    """LoRA settings need lora_rank, and peft installed."""
    if not cfg.lora_rank:
        refuse_changed(cfg, ("lora_alpha", "lora_target_modules"),
                       "configure LoRA adapters, but lora_rank=0 trains the full model, so they "
                       "would do nothing. Set lora_rank > 0.")
        return
    if importlib.util.find_spec("peft") is None:
        raise ValueError(f"RLVRConfig.lora_rank={cfg.lora_rank} needs the peft library: "
                         "pip install 'rllib_llm[lora]'.")


def check_learners(cfg) -> None:
    """Several learners (DDP or DeepSpeed) share every mini-batch's prompt groups equally."""
    learners = cfg.num_learners
    check_deepspeed_settings(cfg)
    if learners <= 1 or cfg.in_evaluation:
        return
    n = cfg.num_return_sequences_in_group
    groups = (cfg.mini_batch_size or cfg.rollout_batch_size * n) // n
    if groups % learners:
        raise ValueError(
            f"RLVRConfig.num_learners={learners}: each learner trains on an equal share of "
            f"every mini-batch's whole prompt groups, and a mini-batch holds {groups} groups "
            f"(mini_batch_size={cfg.mini_batch_size}, rollout_batch_size="
            f"{cfg.rollout_batch_size}, num_return_sequences_in_group={n}). Make the number "
            f"of groups per mini-batch a multiple of {learners}."
        )
    if cfg.weight_sync_backend != "object_store":
        raise ValueError(
            f"RLVRConfig.weight_sync_backend={cfg.weight_sync_backend!r} with num_learners="
            f"{learners}: the broadcast group has one sending learner; several learners sync "
            "through the object store (weight_sync_backend='object_store'), from learner 0."
        )


def check_critic(cfg, needs_critic: bool) -> None:
    """Critic settings need an estimator that reads a critic, and must fit together."""
    if not needs_critic:
        refuse_changed(cfg, CRITIC_FIELDS,
                       f"configure the critic (or GAE), but adv_estimator={cfg.adv_estimator!r} "
                       "uses no critic, so they would do nothing. Set adv_estimator='gae', or "
                       "leave them at their defaults.")
        return
    if cfg.critic_lr is not None:
        check_lr(cfg.critic_lr, "critic_lr")
    if cfg.critic_shares_trunk and cfg.critic_model_name_or_path is not None:
        raise ValueError(
            f"RLVRConfig.critic_model_name_or_path={cfg.critic_model_name_or_path!r} with "
            "critic_shares_trunk=True: a value head on the policy's trunk starts from the "
            "policy's checkpoint. Drop one of the two."
        )
    if not cfg.critic_shares_trunk and changed_fields(cfg, ("value_loss_coef",)):
        raise ValueError(
            f"RLVRConfig.value_loss_coef={cfg.value_loss_coef!r} only weighs the value loss "
            "against the actor loss on a shared trunk (critic_shares_trunk=True); a separate "
            "critic has its own Adam optimizer, which a loss scale does not change. Set "
            "critic_lr instead, or critic_shares_trunk=True."
        )


def check_batch_sizes(cfg) -> None:
    """Prompts per runner, responses per iteration, mini- and micro-batches fit together."""
    n = cfg.num_return_sequences_in_group
    runners = max(1, cfg.num_env_runners)
    # (An evaluation config's env runners are the evaluation ones: they take no batch.)
    if cfg.rollout_batch_size % runners and not cfg.in_evaluation:
        raise ValueError(
            f"RLVRConfig.rollout_batch_size={cfg.rollout_batch_size} must be divisible by "
            f"num_env_runners={cfg.num_env_runners}, so every runner samples whole groups."
        )
    total = cfg.rollout_batch_size * n
    if total > MAX_RESPONSES_PER_ITERATION:
        raise ValueError(
            f"RLVRConfig.rollout_batch_size={cfg.rollout_batch_size} * "
            f"num_return_sequences_in_group={n} = {total} responses per iteration is over "
            f"the limit of {MAX_RESPONSES_PER_ITERATION}; use fewer prompts per iteration."
        )
    if cfg.mini_batch_size is not None and (total % cfg.mini_batch_size or
                                             cfg.mini_batch_size % n):
        raise ValueError(
            f"RLVRConfig.mini_batch_size={cfg.mini_batch_size} must be a multiple of "
            f"num_return_sequences_in_group={n} (mini-batches hold whole prompt groups) and "
            f"divide the {total} responses of an iteration (rollout_batch_size * "
            "num_return_sequences_in_group)."
        )
    size = cfg.mini_batch_size or total
    if cfg.micro_batch_size is not None and cfg.micro_batch_size > size:
        raise ValueError(
            f"RLVRConfig.micro_batch_size={cfg.micro_batch_size} exceeds the mini-batch of "
            f"{size} responses; set micro_batch_size <= mini_batch_size."
        )


def check_lengths(cfg) -> None:
    """prompt_length + response_length fit the model's context."""
    context = cfg.model_context_length
    if context is None:
        return
    if cfg.response_length >= context:
        raise ValueError(
            f"RLVRConfig.response_length={cfg.response_length} leaves no room for a prompt "
            f"in the model's context of {context} tokens (max_position_embeddings of "
            f"{cfg.model_name_or_path!r}); use a smaller response_length."
        )
    if cfg.prompt_length is not None and cfg.prompt_length + cfg.response_length > context:
        raise ValueError(
            f"RLVRConfig.prompt_length={cfg.prompt_length} + response_length="
            f"{cfg.response_length} exceeds the model's context of {context} tokens "
            f"(max_position_embeddings of {cfg.model_name_or_path!r}); lower them, or set "
            "prompt_length=None to use what the response leaves."
        )


def check_dynamic_sampling(cfg) -> None:
    """Dynamic sampling filters prompt groups, so there must be groups; its cap must be read."""
    if cfg.dynamic_sampling and cfg.num_return_sequences_in_group < 2:
        raise ValueError(
            "RLVRConfig.dynamic_sampling=True keeps prompt groups whose rewards differ, which "
            f"needs num_return_sequences_in_group >= 2 (got "
            f"{cfg.num_return_sequences_in_group}).")
    if not cfg.dynamic_sampling and changed_fields(cfg, ("dynamic_sampling_max_rounds",)):
        raise ValueError(
            f"RLVRConfig.dynamic_sampling_max_rounds={cfg.dynamic_sampling_max_rounds} has no "
            "effect without dynamic_sampling=True; set that too.")


def check_overlong(cfg) -> None:
    """The overlong buffer fits inside the response (L_cache <= L_max), and its factor is read."""
    buffer = cfg.resolved_overlong_buffer_len
    if buffer is not None and buffer > cfg.response_length:
        raise ValueError(
            f"RLVRConfig.overlong_buffer_len={buffer} is longer than response_length="
            f"{cfg.response_length}: the penalty ramps over the last overlong_buffer_len tokens "
            "before response_length; use at most response_length.")
    if buffer is None and cfg.overlong_penalty_factor != 1.0:
        raise ValueError(
            f"RLVRConfig.overlong_penalty_factor={cfg.overlong_penalty_factor} has no effect "
            "without overlong_buffer_len; set overlong_buffer_len (the penalty's ramp) too.")


def check_env_config(cfg) -> None:
    """env_config leaves alone what the training fields own (the env runners pass those)."""
    owned = {"model": cfg.model_name_or_path, "prompt_length": cfg.resolved_prompt_length,
             "response_length": cfg.response_length, "seed": cfg.seed}
    env_config = dict(cfg.env_config or {})
    for key in ENV_KEYS_FROM_TRAINING:
        if key in env_config and env_config[key] != owned[key]:
            field = {"model": "model_name_or_path", "seed": "seed (.debugging(seed=...))"}.get(
                key, key)
            raise ValueError(
                f"env_config[{key!r}]={env_config[key]!r} conflicts with RLVRConfig.{field}="
                f"{owned[key]!r}, which the env runners pass to every env; set it there and "
                f"drop it from env_config."
            )


def check_evaluation(cfg) -> None:
    """RLlib's evaluation settings that RLVR.evaluate honours or rejects (see there), and the
    evaluation config: its overrides' names and values (by the same rules as the training
    config's, in their evaluation form: temperature 0 is greedy there)."""
    if cfg.in_evaluation:
        return
    interval = cfg.evaluation_interval
    if interval is not None and non_negative_int(interval) is not None:
        raise ValueError(
            f"RLVRConfig.evaluation_interval={interval!r} is invalid: it must be an integer >= 1 "
            "(evaluate every that many iterations), or 0 or None (never evaluate)."
        )
    check_evaluation_config(cfg)
    if cfg.evaluation_duration != 10 or cfg.evaluation_duration_unit != "episodes":
        raise ValueError(
            f"RLVRConfig.evaluation_duration={cfg.evaluation_duration!r} "
            f"(evaluation_duration_unit={cfg.evaluation_duration_unit!r}) is not used: RLVR "
            "evaluates a fixed set of held-out problems. Leave evaluation_duration at its "
            "default and set eval_num_problems (and eval_num_samples responses per problem)."
        )
    if cfg.evaluation_interval:  # evaluation will run: its problems must be held out
        from rllib_llm.algorithm.held_out_evaluation import check_held_out

        check_held_out(cfg, cfg.get_evaluation_config_object())


def check_evaluation_config(cfg) -> None:
    """`evaluation_config`'s overrides: known names, values by their evaluation rules, and the
    evaluation config they make valid as a whole (what building the algorithm would check)."""
    overrides = cfg.evaluation_config
    if overrides is None or (isinstance(overrides, dict) and not overrides):
        return
    if isinstance(overrides, dict):
        check_evaluation_config_keys(cfg, overrides)
        for key, value in overrides.items():
            name = ALIASES.get(key, key)
            why = rule_broken(name, value, in_evaluation=True) if name in FIELDS_BY_NAME else None
            if why is not None:
                raise ValueError(f"RLVRConfig.evaluation_config[{key!r}]={value!r} is invalid: "
                                 f"it {why}.")
    try:
        cfg.get_evaluation_config_object().validate()
    except ValueError as e:
        raise ValueError(f"RLVRConfig.evaluation_config makes an invalid evaluation config: "
                         f"{e}") from e


def check_evaluation_config_keys(cfg, overrides: dict[str, Any]) -> None:
    """Every key of an `evaluation_config` dict names a setting: one of ours (or an alias), or
    one of RLlib's config attributes (RLlib would set any name silently, and ignore it)."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.tune.result import TRIAL_INFO

    known = vars(cfg)
    for key in overrides:
        if key in ALIASES or key in FIELDS_BY_NAME or key in (TRIAL_INFO, "multiagent") or \
                AlgorithmConfig._translate_special_keys(key, warn_deprecated=False) in known:
            continue
        names = list(dict.fromkeys([*FIELDS_BY_NAME, *ALIASES,
                                    *(k for k in known if not k.startswith("_"))]))
        raise ValueError(
            f"RLVRConfig.evaluation_config has an unknown setting {key!r}."
            f"{did_you_mean(key, names)} It takes "
            "RLVRConfig's settings (rllib_llm/algorithm/fields.py) and RLlib's."
        )


def check_rollout_engine(cfg) -> None:
    """The rollout engine is installed, and what its log-probs need is set."""
    from rllib_llm.rollout.vllm_engine import INSTALL_HINT, vllm_installed

    if cfg.rollout_engine == "vllm" and not vllm_installed():
        raise ValueError(
            f"RLVRConfig.rollout_engine='vllm' needs vLLM, which is not installed: "
            f"{INSTALL_HINT}. Or use rollout_engine='torch'."
        )
    if cfg.rollout_is_level is not None and not cfg.recomputes_old_logp:
        raise ValueError(
            f"RLVRConfig.rollout_is_level={cfg.rollout_is_level!r} needs "
            "recompute_old_logp=True: the weights compare the learner's recomputed old_logp "
            "with the sampler's log-probs, which are equal without recomputation."
        )
    # (RLlib derives an evaluation config with its own, usually 0, env runners: not ours.)
    if cfg.weight_sync_backend != "object_store" and cfg.num_env_runners < 1 and \
            not cfg.in_evaluation:
        raise ValueError(
            f"RLVRConfig.weight_sync_backend={cfg.weight_sync_backend!r} broadcasts to "
            "remote env runners, but num_env_runners=0 samples in the driver, where the "
            "weights arrive by a memory copy anyway. Set num_env_runners >= 1 or "
            "weight_sync_backend='object_store'."
        )
    if cfg.rollout_engine == "vllm" and cfg.top_p < 1 and not cfg.recomputes_old_logp:
        raise ValueError(
            f"RLVRConfig.top_p={cfg.top_p} with rollout_engine='vllm' needs "
            "recompute_old_logp=True (and in asynchronous training rollout_is_level too): "
            "vLLM reports log-probs renormalised over the top-p nucleus, not the learner's "
            "log-probs."
        )
    check_rollout_rejection(cfg)


def check_rollout_rejection(cfg) -> None:
    """Masked importance sampling: recomputed log-probs, lower < 1 < upper, and its bounds set
    only with its level (they would do nothing)."""
    level, upper, lower = (cfg.rollout_rs_level, cfg.rollout_rs_threshold,
                           cfg.rollout_rs_threshold_lower)
    if level is None:
        for changed in changed_fields(cfg, ("rollout_rs_threshold", "rollout_rs_threshold_lower")):
            raise ValueError(
                f"RLVRConfig.{changed} has no effect without rollout_rs_level; set "
                "rollout_rs_level ('token', 'sequence' or 'geometric') too.")
        return
    if not cfg.recomputes_old_logp:
        raise ValueError(
            f"RLVRConfig.rollout_rs_level={level!r} needs recompute_old_logp=True: it compares "
            "the learner's recomputed old_logp with the sampler's log-probs, which are equal "
            "without recomputation.")
    if not upper > 1:
        raise ValueError(f"RLVRConfig.rollout_rs_threshold={upper!r} must be > 1: it is the "
                         "largest ratio kept, and a ratio of 1 (no mismatch) must be kept.")
    if lower is not None and not lower < 1:
        raise ValueError(f"RLVRConfig.rollout_rs_threshold_lower={lower!r} must be < 1: it is "
                         "the smallest ratio kept, and a ratio of 1 must be kept.")


def check_async(cfg) -> None:
    """async_generation_ratio and max_staleness: what the pipeline needs and can bound."""
    k = cfg.async_generation_ratio
    if cfg.max_staleness is not None and cfg.max_staleness < k:
        raise ValueError(
            f"RLVRConfig.max_staleness={cfg.max_staleness} is below async_generation_ratio="
            f"{k}: generating {k} batches ahead makes every batch {k} updates old, so every "
            f"one would be dropped. Set max_staleness >= {k}, or None (= {k})."
        )
    if not k or cfg.in_evaluation:
        return
    if cfg.num_env_runners < 1:
        raise ValueError(
            f"RLVRConfig.async_generation_ratio={k} needs remote env runners "
            "(.env_runners(num_env_runners=N), N >= 1): with num_env_runners=0 the driver "
            "samples, and it cannot while its learner updates. Or set "
            "async_generation_ratio=0."
        )
    if cfg.weight_sync_backend != "object_store":
        raise ValueError(
            f"RLVRConfig.weight_sync_backend={cfg.weight_sync_backend!r} with "
            f"async_generation_ratio={k}: a broadcast needs every runner to join at once, "
            "which would wait for the generation in flight; asynchronous training pushes "
            "weights through the object store (weight_sync_backend='object_store')."
        )
    if cfg.recomputes_old_logp and cfg.rollout_is_level is None:
        raise ValueError(
            f"RLVRConfig.recompute_old_logp=True with async_generation_ratio={k} and no "
            "rollout_is_level: the recomputed old_logp are the learner's current policy, so "
            "the pg_variant's ratio would not see the episodes' lag, and nothing would "
            "correct it. Set rollout_is_level='token' (or 'sequence'): the rollout weights "
            "pi_old / pi_behaviour correct the lag (decoupled PPO); or recompute_old_logp="
            "False (or None): the ratio then uses the sampler's log-probs."
        )


def check_partial_rollouts(cfg) -> None:
    """Partial rollouts continue responses across weight versions: asynchronous training only,
    and at least one token per segment."""
    split = cfg.partial_rollout_max_split
    if split == 1:
        return
    if split > cfg.response_length:
        raise ValueError(
            f"RLVRConfig.partial_rollout_max_split={split} is over response_length="
            f"{cfg.response_length}: a segment is at least one token; use at most "
            f"{cfg.response_length}.")
    if not cfg.async_generation_ratio and not cfg.in_evaluation:
        raise ValueError(
            f"RLVRConfig.partial_rollout_max_split={split} needs asynchronous training "
            "(async_generation_ratio >= 1, as OpenRLHF's partial_rollout needs async_train): "
            "a continued response holds tokens of older weights, and only the asynchronous "
            "pipeline trains on the sampler's log-probs and bounds their lag (max_staleness). "
            "Set async_generation_ratio=1, or partial_rollout_max_split=1.")


def check_lr(lr: Any, name: str = "lr") -> None:
    """lr (or critic_lr): a number > 0, or RLlib's piecewise schedule [[timestep, value], ...] of
    such values with non-decreasing timesteps >= 0 starting at 0."""
    fix = ("use a number > 0 (e.g. 1e-6) or a schedule [[0, 1e-6], [20000, 1e-5]] with "
           "timesteps from 0 upwards and values > 0")
    if is_number(lr):
        if lr > 0:
            return
        raise ValueError(f"RLVRConfig.{name}={lr!r} is invalid: a learning rate <= 0 trains "
                         f"backwards or not at all; {fix}.")
    points = lr if isinstance(lr, (list, tuple)) else None
    ok = bool(points) and all(isinstance(p, (list, tuple)) and len(p) == 2 and is_number(p[0])
                              and is_number(p[1]) for p in points)
    if ok:
        times = [p[0] for p in points]
        ok = times[0] == 0 and all(b >= a for a, b in zip(times, times[1:])) and \
            all(p[1] > 0 for p in points)
    if not ok:
        raise ValueError(f"RLVRConfig.{name}={lr!r} is invalid; {fix}.")
