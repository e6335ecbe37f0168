"""The environment an env runner samples from: its config, building it by name, checking it in
the driver before any runner starts, and each remote runner's share of the prompts."""

from __future__ import annotations

from typing import Any


def env_config_for(config, worker_index: int) -> dict[str, Any]:
    """The env config runner `worker_index` (0: the driver's) builds its env from under `config`:
    the user's `env_config` plus the model, prompt and response lengths and a per-runner seed."""
    env_config = dict(config.env_config)
    env_config.update(
        model=config.model_name_or_path,
        prompt_length=config.resolved_prompt_length,
        response_length=config.response_length,
        seed=(config.seed or 0) + worker_index,
    )
    return env_config


def make_env(env_id, env_config: dict[str, Any]):
    """The env `environment(env_id)` names (registered name or class), built from `env_config`."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    from rllib_llm.envs import register_envs

    register_envs()
    if isinstance(env_id, str):
        if not _global_registry.contains(ENV_CREATOR, env_id):
            raise ValueError(
                f"environment({env_id!r}) is not a registered environment; rllib_llm "
                "registers 'math_verify' (register yours with ray.tune.register_env)."
            )
        return _global_registry.get(ENV_CREATOR, env_id)(env_config)
    if env_id is None:
        raise ValueError("RLVRConfig needs an environment: call .environment('math_verify').")
    return env_id(env_config)


def check_env(config) -> None:
    """Build the training env as the driver's runner would, and close it: its dataset and
    settings are checked here, in this process, with the env's own error.

    RLVR runs this before any runner starts. A remote runner whose env fails to build dies in
    its constructor, and the driver then sees only RLlib's `IndexError` while it looks for the
    runner's spaces, tens of seconds later. Cheap: the driver's runner builds the same env
    next, from the process's cached tokenizer and problem set (envs/problem_set.py).
    """
    env = make_env(config.env, env_config_for(config, 0))
    close = getattr(env, "close", None)
    if close is not None:
        close()


def share_prompts(env, *, worker_index: int, num_runners: int, seed: int) -> None:
    """Remote runner i of n draws share i - 1 of every epoch's prompts, from the order all
    runners seed alike: the runners of an iteration never sample the same prompt. (An env
    without `shard_order` walks its own order, seeded per runner.)"""
    shard_order = getattr(env, "shard_order", None)
    if num_runners and worker_index and shard_order is not None:
        shard_order(worker_index - 1, num_runners, seed)
