"""The rules of RLlib's own settings that RLVR reads, replaces or owns: runners, gradient
clipping, RLlib's batch settings (replaced by RLVR's fields) and the env_config keys the
training fields set."""

from __future__ import annotations

from rllib_llm.algorithm.fields import non_negative_int, positive

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
# Env-config keys the training fields own (the env runner sets them from those fields).
ENV_KEYS_FROM_TRAINING = ("model", "prompt_length", "response_length", "seed")


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
    if cfg.grad_clip is not None and positive(cfg.grad_clip) is not None:
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
