"""The rules of sampling and its lag behind the learner: the rollout engine and what its
log-probs need, importance sampling and rejection of off-policy tokens, asynchronous
generation and partial rollouts."""

from __future__ import annotations

from rllib_llm.algorithm.fields import changed_fields


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
            f"RLVRConfig.weight_sync_backend={cfg.weight_sync_backend!r} sends to "
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
            f"async_generation_ratio={k}: a direct sync needs every runner's answer at once, "
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


def check_tis_bounds(cfg) -> None:
    """Truncated importance sampling's interval is not empty."""
    if cfg.tis_lower_bound > cfg.tis_upper_bound:
        raise ValueError(
            f"RLVRConfig.tis_lower_bound={cfg.tis_lower_bound} exceeds tis_upper_bound="
            f"{cfg.tis_upper_bound}; the truncation interval must satisfy lower <= upper."
        )
