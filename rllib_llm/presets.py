"""Presets: tested settings for the embedded default, shared by the demo, examples, tests and
benchmarks (so none of them imports another's script).

    from rllib_llm.presets import embedded_config
    algo = embedded_config("topr", seed=0).build_algo()
"""

from __future__ import annotations

# The embedded default's settings, calibrated on a 2-core CPU (benchmarks/RESULTS.md, "The demo"):
# +34 to +37 points of held-out accuracy after 600 iterations in four runs. The learning rate is
# a piecewise-linear schedule over sampled tokens (RLlib's; ~1,700 tokens per iteration here): a
# fresh Adam at the full rate wrecks the tiny model within 10 steps, so it warms up over the first
# 40k tokens (~25 iterations) to 4e-4, then decays to 5e-5 at 1M tokens (~600 iterations); the
# decay is what takes the gain from a ~28-point plateau at a constant rate to 37. 64 prompts x 8
# responses per iteration keep the group baselines informative and the gradient quiet enough for
# that rate (32 prompts: +30 after 600 iterations, at half the cost per iteration). Advantages are
# not clipped: a group's rare correct answer keeps its full weight. TOPR needs no KL anchor, so
# the reference model's forward pass is skipped.
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

# Iterations of `make demo` (python -m rllib_llm.demo): a budget in iterations, not minutes, so
# every machine gets the same result, a slower one later.
DEMO_ITERATIONS = 600


def embedded_config(pg_variant: str = "topr", *, seed: int = 0, **overrides):
    """The RLVRConfig of the demo and the learning tests."""
    from rllib_llm import RLVRConfig

    training = {**EMBEDDED_TRAINING, "pg_variant": pg_variant, **overrides}
    return (
        RLVRConfig()
        .environment("math_verify", env_config={"dataset": "arithmetic"})
        .training(**training)
        .debugging(seed=seed, log_level="ERROR")
    )
