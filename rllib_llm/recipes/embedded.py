"""Tested settings for the embedded default, shared by the demo, examples, tests and benchmarks
(so none of them imports another's script). The named algorithm presets (RLVRConfig.preset)
live in rllib_llm/algorithm/presets.py; `embedded_preset_config` sizes one for the embedded task,
and `embedded_tool_config` is tool use ("math_tool") on it.

    from rllib_llm.recipes.embedded import (demo_config, embedded_config,
                                            embedded_preset_config, embedded_tool_config)
    algo = embedded_config("topr", seed=0).build_algo()
    algo = demo_config("topr", seed=0).build_algo()  # the demo's recipe
    algo = embedded_preset_config("vapo", seed=0).build_algo()
    algo = embedded_tool_config("topr", seed=0).build_algo()
"""

from __future__ import annotations

# The embedded default's settings, calibrated by hand on a 2-core CPU (benchmarks/RESULTS.md, "The
# demo's earlier, hand-calibrated recipe"; the learning tests' settings, and the demo's before
# DEMO_OVERRIDES): +30 points of held-out accuracy after 600 iterations on the split by operand pair
# (+34 to +37 in four runs on the earlier split, whose test problems' twins b+a= were trained on).
# The learning rate is a piecewise-linear schedule over sampled tokens (RLlib's; ~1,700 tokens per
# iteration here): a fresh Adam at the full rate wrecks the tiny model within 10 steps, so it warms
# up over the first 40k tokens (~25 iterations) to 4e-4, then decays to 5e-5 at 1M tokens (~600
# iterations); the decay is what takes the gain from a ~28-point plateau at a constant rate to 37.
# 64 prompts x 8 responses per iteration keep the group baselines informative and the gradient quiet
# enough for that rate (32 prompts: +30 after 600 iterations, at half the cost per iteration).
# Advantages are not clipped: a group's rare correct answer keeps its full weight. TOPR needs no KL
# anchor, so the reference model's forward pass is skipped.
EMBEDDED_TRAINING = {
    "lr": [[0, 2e-5], [40_000, 4e-4], [1_000_000, 5e-5]],
    "rollout_batch_size": 64,
    "num_return_sequences_in_group": 8,
    "response_length": 6,
    "temperature": 1.0,
    "adv_estimator": "grpo",
    "advantage_clip": None,
    "use_kl_loss": False,
}

# The demo's recipe (`make demo`, examples/embedded_topr.yaml) on top of EMBEDDED_TRAINING, found
# by `rllib-llm sweep examples/sweep_demo_recipe.yaml` and two narrower sweeps after it
# (benchmarks/RESULTS.md, "The demo's recipe from a sweep"): 128 prompts x 8 responses per
# iteration in eight optimizer steps (mini-batches of 128 responses: TOPR's truncated ratio keeps
# the later, off-policy steps stable), at half the peak rate, decaying to 5e-5 by 1M sampled tokens
# (~300 iterations of this batch): +37 to +41 points in 300 iterations on 3 seeds. With 64 prompts
# the best schedule gained +26 in 300; twice the batch costs about twice the time per iteration,
# so the demo takes about the compute of the earlier 600 iterations. The learning tests keep
# EMBEDDED_TRAINING, which their budgets were calibrated on.
DEMO_OVERRIDES = {
    "rollout_batch_size": 128,
    "mini_batch_size": 128,
    "lr": [[0, 2e-5], [40_000, 2e-4], [1_000_000, 5e-5]],
}
DEMO_TRAINING = {**EMBEDDED_TRAINING, **DEMO_OVERRIDES}

# Iterations of `make demo` (python -m rllib_llm.recipes.demo): a budget in iterations, not
# minutes, so every machine gets the same result, a slower one later.
DEMO_ITERATIONS = 300


def embedded_config(pg_variant: str = "topr", *, seed: int = 0, **overrides):
    """The RLVRConfig of the demo and the learning tests."""
    from rllib_llm.algorithm import RLVRConfig

    training = {**EMBEDDED_TRAINING, "pg_variant": pg_variant, **overrides}
    return (
        RLVRConfig()
        .environment("math_verify", env_config={"dataset": "arithmetic"})
        .training(**training)
        .debugging(seed=seed, log_level="ERROR")
    )


def demo_config(pg_variant: str = "topr", *, seed: int = 0, **overrides):
    """The RLVRConfig of the demo: embedded_config with DEMO_OVERRIDES, then `overrides`."""
    return embedded_config(pg_variant, seed=seed, **{**DEMO_OVERRIDES, **overrides})


# Tool use on the embedded task ("math_tool" with two-digit products, `embedded_tool`): the
# checkpoint calls the tool on about a third of the problems, and RL has to learn that calling
# it pays. An episode is a tool call (29 agent tokens), the tool's output (env tokens), then the
# answer and EOS; `response_length` holds all of it, env tokens included. Calibrated in
# benchmarks/RESULTS.md ("Tool use"). The learning rate warms up over the first 20k sampled agent
# tokens (~5 iterations) and then stays: episodes grow as the policy learns to call the tool, so
# a schedule in tokens would move with what is learned.
EMBEDDED_TOOL_TRAINING = {
    "model_name_or_path": "embedded_tool",
    "lr": [[0, 2e-5], [20_000, 3e-4]],
    "rollout_batch_size": 32,
    "num_return_sequences_in_group": 8,
    "response_length": 64,
    "temperature": 1.0,
    "adv_estimator": "grpo",
    "advantage_clip": None,
    "use_kl_loss": False,
}
# The env_config of "math_tool" on the embedded task: two-digit products, a tool call then the
# answer.
EMBEDDED_TOOL_ENV = {"dataset": "arithmetic", "dataset_kwargs": {"ops": "*"}, "max_turns": 2}


def embedded_tool_config(pg_variant: str = "topr", *, seed: int = 0, **overrides):
    """The RLVRConfig of tool use on the embedded task ("math_tool", `embedded_tool`)."""
    from rllib_llm.algorithm import RLVRConfig

    training = {**EMBEDDED_TOOL_TRAINING, "pg_variant": pg_variant, **overrides}
    return (
        RLVRConfig()
        .environment("math_tool", env_config=dict(EMBEDDED_TOOL_ENV))
        .training(**training)
        .debugging(seed=seed, log_level="ERROR")
    )


# What `embedded_preset_config` sets on top of an algorithm preset: the sizes of the embedded task
# (EMBEDDED_TRAINING's learning-rate schedule, response length and sampling temperature, used for
# the critic too) and EMBEDDED_RESPONSES responses per iteration, as many prompts as that makes.
EMBEDDED_SIZES = {k: EMBEDDED_TRAINING[k] for k in ("lr", "response_length", "temperature")}
# A ROLL config on the embedded model (examples/roll_ppo.py, `rllib-llm train` of a ROLL file that
# names no model): ROLL's 2048 + 4096 tokens and a 7B model's learning rate become the embedded
# context (prompt_length None = what the 6-token response leaves of it) and the learning-rate
# schedule and sampling temperature calibrated for it. Everything else stays as the file says.
EMBEDDED_ROLL_OVERRIDES = {"prompt_length": None, **EMBEDDED_SIZES}
EMBEDDED_ROLL_ENV = {"env": "math_verify", "env_config": {"dataset": "arithmetic"}}
EMBEDDED_RESPONSES = 512
# Value pretraining on the embedded task, in iterations, for presets that pretrain (50 in VAPO's
# run of thousands of steps; 10 here of a 100-iteration test budget).
EMBEDDED_VALUE_PRETRAIN_STEPS = 10
# Length-adaptive GAE on the embedded task. VAPO's lambda = 1 - 1/(alpha * l) grows with the
# response length l; its alpha = 0.05 suits responses of thousands of tokens (l = 2000: 0.99) and
# gives every response shorter than 20 tokens lambda = 0, pure TD(0) on a barely trained critic:
# on the embedded task's responses of at most 6 tokens the "vapo" preset then lost 25 points in
# 100 iterations (benchmarks/RESULTS.md, "The critic"). Here alpha makes a full-length response's
# lambda 0.95 (ROLL's PPO default) and a shorter one's less, as VAPO intends.
EMBEDDED_LENGTH_ADAPTIVE_ALPHA = 1 / (0.05 * EMBEDDED_TRAINING["response_length"])


def embedded_preset_config(preset: str, *, seed: int = 0, **overrides):
    """RLVRConfig.preset(preset) sized for the embedded task (EMBEDDED_SIZES, and the critic's
    EMBEDDED_VALUE_PRETRAIN_STEPS and EMBEDDED_LENGTH_ADAPTIVE_ALPHA), then overrides."""
    from rllib_llm.algorithm import RLVRConfig

    config = RLVRConfig.preset(preset)
    prompts = max(1, EMBEDDED_RESPONSES // config.num_return_sequences_in_group)
    sizes = {**EMBEDDED_SIZES, "rollout_batch_size": prompts}
    if config.value_pretrain_steps:
        sizes["value_pretrain_steps"] = EMBEDDED_VALUE_PRETRAIN_STEPS
    if config.length_adaptive_alpha is not None:
        sizes["length_adaptive_alpha"] = EMBEDDED_LENGTH_ADAPTIVE_ALPHA
    return (
        config.environment("math_verify", env_config={"dataset": "arithmetic"})
        .training(**{**sizes, **overrides})
        .debugging(seed=seed, log_level="ERROR")
    )
