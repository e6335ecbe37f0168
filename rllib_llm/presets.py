"""Presets: tested settings for the embedded default, shared by the demo, examples, tests and
benchmarks (so none of them imports another's script).

    from rllib_llm.presets import embedded_config
    algo = embedded_config("topr", seed=0).build_algo()
"""

from __future__ import annotations

# The embedded default's settings, calibrated on a 2-core CPU (benchmarks/RESULTS.md): a fresh
# Adam at the full learning rate wrecks the tiny model within 10 steps, so the rate warms up over
# the first 20k sampled tokens (RLlib's piecewise schedule); 32 prompts x 8 responses per
# iteration keep the group baselines informative. TOPR needs no KL anchor, so the reference
# model's forward pass is skipped.
EMBEDDED_TRAINING = {
    "lr": [[0, 2e-5], [20_000, 2e-4]],
    "rollout_batch_size": 32,
    "num_return_sequences_in_group": 8,
    "response_length": 6,
    "temperature": 1.0,
    "adv_estimator": "grpo",
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
