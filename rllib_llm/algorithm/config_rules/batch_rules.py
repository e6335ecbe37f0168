"""The rule of batch sizes: prompts per env runner, responses per iteration, mini- and
micro-batches of whole prompt groups."""

from __future__ import annotations

# The most responses one iteration may hold: ROLL's largest recipes use 512 x 16 = 8192; a
# million is an allocation failure waiting to happen, not a plan.
MAX_RESPONSES_PER_ITERATION = 2**20


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
