"""Policy-gradient training and every advantage estimator raise held-out accuracy on the embedded
task within a short budget: a loss with the wrong sign, an estimator that rewards the wrong
responses or an update that never reaches the sampler fails here, where "weights changed" passes.
With one optimizer step per iteration every pg_variant takes vanilla's update (the ratio is 1), so
one run of it stands for all seven: examples/topr_arithmetic.py's (TOPR on GRPO advantages, run
and asked to learn by tests/project/test_examples.py); tests/core/test_core_properties.py proves
the gradients equal at ratio 1 and tests/algorithm/test_rlvr_e2e.py the updates of one iteration
through RLVR. The estimators with their own run here are those the example does not take.

Each test trains the presets (rllib_llm/recipes/embedded.py) for LEARNING_ITERATIONS iterations and asks for
MIN_GAIN accuracy points on the 500 held-out problems, measured as the mean of EVAL_SAMPLES
samples per problem (before and after on the same problems and sampling seeds). One sample per
problem has a standard deviation of sqrt(p (1 - p) / 500) = 2.2 points at p = 0.4, 3.1 points for
a difference of two; EVAL_SAMPLES = 4 halves that (1.6 points), so MIN_GAIN is nearly 4 of its
standard deviations clear of no learning (a loss with the wrong sign loses ~30 points).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rllib_llm.recipes.embedded import embedded_config, embedded_preset_config

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]

# Calibrated on the 2-core development machine (benchmarks/RESULTS.md, "Budgets of the learning
# tests"). On the split that held problems out one by one (the twins `b+a=` of 307 of the 500 test
# problems in training), 30 runs (3 per case) gained 8.0-14.7 points after 100 iterations (mean
# 12.3, standard deviation 1.4). On the split by operand pair, from the checkpoint rebuilt on it,
# 100 iterations gained only +3.0 to +6.0 (seed 1: tis +6.0, rloo +5.6, vanilla and cispo +5.5,
# topr and gspo +5.2, kimi15 +3.2, asynchronous topr +3.0): a bar 4 standard deviations clear of
# no learning did not fit. Held-out accuracy along one run (seed 1) after 50/100/150/200
# iterations: topr +5.2/+5.2/+10.4/+14.0, kimi15 +5.2/+3.2/+7.9/+12.2, so the budget is 200
# iterations, where the gain is back near the old 100-iteration figures and MIN_GAIN sits 6 to 8
# points below the runs measured. With one optimizer step per iteration the pg variants' ratios
# are 1, so their curves agree (benchmarks/RESULTS.md: identical at 50 iterations, apart after
# only through rounding): the seven runs of one update, 2 to 2.5 minutes each on 2 cores, were one
# proof seven times; then vanilla's run, 200 iterations here, was the same proof as the TOPR
# example's 150 (see the module docstring), and the example's is kept.
LEARNING_ITERATIONS = 200
# The critic presets (512 responses per iteration, 10 value-pretraining iterations) keep 100: they
# met their bars on the new split at 100 (not measured further for want of time).
CRITIC_ITERATIONS = 100
MIN_GAIN = 0.06
EVAL_SAMPLES = 4
SEED = 1

# Advantage estimators under PPO's clipped loss (RLVRConfig's default pg_variant); grpo is the
# TOPR example's.
ESTIMATORS = {
    "rloo": {"adv_estimator": "rloo"},
    # REINFORCE++: REINFORCE with the KL to the reference charged in each token's reward and
    # advantages whitened over the batch (docs/ALGORITHMS.md, "Rewards and advantages"); the KL
    # loss stays off. It stands for plain REINFORCE too: that is the same run without the KL in
    # the reward (whiten_advantages is on by default), and a wrong sign or a misplaced return in
    # the estimator fails both alike.
    "reinforce++": {"adv_estimator": "reinforce", "add_token_level_kl": True,
                    "whiten_advantages": True, "use_kl_loss": False},
}


def held_out_accuracy(algo) -> float:
    """Mean accuracy of EVAL_SAMPLES samples (seeds 0, 1, ...) on each of the 500 test problems."""
    return float(np.mean([algo.evaluate_accuracy(num_problems=500, seed=s)["pass@1"]
                          for s in range(EVAL_SAMPLES)]))


# Presets with a critic (adv_estimator='gae'; embedded_preset_config sizes them: 512 responses per
# iteration, 10 of the 100 iterations value pretraining). The "ppo" preset is ROLL's documented PPO
# config, which examples/roll_ppo.py trains in CI from ROLL's own YAML (the same settings:
# tests/algorithm/test_roll_config.py), so it is not trained twice.
# The bar per preset: vapo samples 16 responses for each of 32 prompts per iteration (VAPO's group
# sampling at the same 512 responses), and on this task the number of distinct prompts per
# iteration is what learning speed follows (benchmarks/RESULTS.md, "The critic": vapo gained +6.5
# and +7.4 in 100 iterations, the same with 1 response for each of 512 prompts +20.0). Its bar,
# 3 points, is still ~2 standard deviations of the evaluation noise clear of no learning.
CRITIC_PRESETS = {"vc_ppo": MIN_GAIN, "vapo": 0.03}


def accuracy_gain(pg_variant: str = "ppo", *, preset: str | None = None,
                  num_env_runners: int = 0, seed: int = SEED, iterations: int = LEARNING_ITERATIONS,
                  **overrides) -> tuple[float, float]:
    """(before, after) held-out accuracy around `iterations` training iterations, of the
    embedded config with `pg_variant`, or of the algorithm `preset` (which sets its own
    pg_variant) sized for the embedded task."""
    config = embedded_preset_config(preset, seed=seed, **overrides) if preset else \
        embedded_config(pg_variant, seed=seed, **overrides)
    algo = config.env_runners(num_env_runners=num_env_runners).build_algo()
    before = held_out_accuracy(algo)
    for _ in range(iterations):
        algo.train()
    after = held_out_accuracy(algo)
    algo.stop()
    print(f"held-out accuracy {before:.4f} -> {after:.4f} ({(after - before) * 100:+.1f} points)")
    return before, after


# REINFORCE (no baseline: every response of a batch pushed by its whitened score) is the noisiest
# estimator here: at 100 iterations seed 1 gained only +5.7 points (seeds 2 and 3 +12.2 and
# +11.7). At these tests' 200 iterations on the split by operand pair, plain REINFORCE gained
# +18.6 (seed 1) and +14.0 (seed 2) from 31.65% (2026-11-27), 8 points or more above MIN_GAIN;
# its run is REINFORCE++'s (ESTIMATORS), one seed, as for the other estimators.
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_advantage_estimator_raises_held_out_accuracy(name):
    before, after = accuracy_gain("ppo", **ESTIMATORS[name])
    assert after - before >= MIN_GAIN, (before, after)


def test_asynchronous_topr_raises_held_out_accuracy():
    """TOPR with a batch generated ahead on a remote env runner: every batch after the first is
    one update old, and the ratio sees it (the sampler's log-probs are old_logp)."""
    before, after = accuracy_gain("topr", num_env_runners=1, async_generation_ratio=1)
    assert after - before >= MIN_GAIN, (before, after)


def test_lora_topr_raises_held_out_accuracy():
    """TOPR training rank-8 LoRA adapters alone (9% as many weights as the embedded model), at 5x
    the full model's learning-rate schedule: adapters start at zero and need larger steps.
    Measured with seed 1: +13.4 points (+11.7 at 10x)."""
    before, after = accuracy_gain("topr", lora_rank=8,
                                  lr=[[0, 1e-4], [40_000, 2e-3], [1_000_000, 2.5e-4]])
    assert after - before >= MIN_GAIN, (before, after)


@pytest.mark.parametrize("preset", sorted(CRITIC_PRESETS))
def test_critic_preset_raises_held_out_accuracy(preset):
    before, after = accuracy_gain(preset=preset, iterations=CRITIC_ITERATIONS)
    assert after - before >= CRITIC_PRESETS[preset], (before, after)


def test_value_pretraining_fits_the_critic_to_the_initial_policys_returns():
    """VC-PPO's value pretraining on the embedded task: the value loss on each new batch (values
    of rollout time against Monte-Carlo returns) falls by a fifth within a dozen iterations (by a quarter when
    measured)
    while the actor stays frozen. Explained variance is only asked not to turn negative: on this
    task the initial policy's success is barely predictable from the prompt (a perfect per-prompt
    critic would explain ~11% of the return variance, benchmarks/RESULTS.md "The critic"), and
    pretraining leaves it near 0."""
    algo = embedded_preset_config("vc_ppo", seed=SEED, value_pretrain_steps=12, critic_lr=1e-4,
                                  mini_batch_size=128).build_algo()
    policy = {k: v.clone() for k, v in
              algo.learner_group.local_learner.module["default_policy"].model.state_dict().items()}
    runs = [algo.train()["learners"]["default_policy"] for _ in range(12)]
    assert all(r["value_pretraining"] == 1.0 for r in runs)
    losses = [r["value_loss"] for r in runs]
    print("value loss", [round(float(x), 3) for x in losses],
          "explained variance", [round(float(r["explained_variance"]), 3) for r in runs])
    assert np.mean(losses[-3:]) < 0.8 * losses[0]
    assert abs(runs[-1]["value_mean"] - runs[-1]["return_mean"]) < \
        abs(runs[0]["value_mean"] - runs[0]["return_mean"])
    assert np.mean([r["explained_variance"] for r in runs[-3:]]) > -0.05
    after = algo.learner_group.local_learner.module["default_policy"].model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in policy.items())
    algo.stop()


# Tool use: "math_tool" (two-digit products, the sandboxed python tool) from `embedded_tool`,
# which calls the tool on ~30% of the problems and answers ~12% right without it
# (embedded_tool/README.md). Measured with this test's seed, run for 30 iterations: held-out
# accuracy 30.9% -> 84.1% (+53 points), tool calls per episode 0.34 -> 0.91 after 20 iterations
# and 0.96 after 30 (benchmarks/RESULTS.md, "Tool use"; the old split). On the split by operand
# pair, from the rebuilt checkpoint, this test (20 iterations): 34.7% -> 86.4% (+51.7 points),
# tool calls per episode 0.38 -> 1.0. At 10 iterations (2026-11-28), seed 1: 34.7% -> 75.2%
# (+40.5), tool calls 0.38 -> 0.84; seed 2: +40.9, 0.31 -> 0.80 (the last 3 iterations' calls
# 0.43 and 0.44 above the first 3's, tool errors at most 6.2% of calls there): 10 iterations keep
# the bar 20 points under both at half the training (3.3 s per iteration alone on 2 cores, each
# episode's tool call a sandboxed process). A run that never learns that calling pays stays near
# 30%.
TOOL_ITERATIONS = 10
TOOL_MIN_GAIN = 0.2


def test_topr_learns_to_call_the_sandboxed_tool_and_accuracy_rises():
    from rllib_llm.recipes.embedded import embedded_tool_config

    algo = embedded_tool_config("topr", seed=SEED).build_algo()
    before = held_out_accuracy(algo)
    runs = [algo.train()["env_runners"] for _ in range(TOOL_ITERATIONS)]
    after = held_out_accuracy(algo)
    algo.stop()
    calls = [r["tool_calls_mean"] for r in runs]
    print(f"held-out accuracy {before:.4f} -> {after:.4f}; tool calls per episode "
          f"{[round(float(c), 2) for c in calls]}; tool errors per call "
          f"{[round(float(r['tool_error_fraction']), 3) for r in runs]}")
    assert after - before >= TOOL_MIN_GAIN, (before, after)
    assert np.mean(calls[-3:]) >= np.mean(calls[:3]) + 0.3, calls
    # The tool ran: its outputs are what the answers copy, not errors or timeouts. Counted at
    # every call (episodes that end on the turn limit too), errors were 0-9.3% of calls per
    # iteration with this seed, 1.9-6.2% in the last 3 (2026-11-26): the bound leaves 2x.
    assert max(r["tool_error_fraction"] for r in runs[-3:]) < 0.15
    assert max(r["tool_timeout_fraction"] for r in runs) == 0.0
