"""TOPR on the embedded default in one file: build, evaluate, train, evaluate again.

    python examples/topr_arithmetic.py [--iterations 600] [--min-gain 20]

The demo's earlier recipe, one optimizer step per batch of 64 prompts, written as user code
(`make demo` now takes the sweep's 8 steps per batch of 128: `DEMO_OVERRIDES` in
rllib_llm/recipes/embedded.py). With one step every pg_variant takes this update, so CI's run of
it stands for all seven (tests/project/test_learning.py). It exits with status 1 if held-out
accuracy rose by less than --min-gain points, so CI can run it with a short budget and know it
learned.
Swap `model_name_or_path` for any Hugging Face causal LM and `env_config["dataset"]` for a
jsonl/parquet file or a `datasets` dataset (then tune the learning rate and batch for it).
"""

import argparse
import sys

import ray

from rllib_llm import RLVRConfig
from rllib_llm.recipes.embedded import EMBEDDED_TRAINING


def main(iterations: int, eval_problems: int, min_gain: float) -> bool:
    config = (
        RLVRConfig()
        .environment("math_verify", env_config={"dataset": "arithmetic"})
        # The learning-rate schedule and batch shape calibrated for the tiny model: a fresh Adam
        # at a large constant rate (1e-3) wrecks it within ten updates.
        .training(**EMBEDDED_TRAINING)
        .training(
            model_name_or_path="embedded",  # the tiny char-level Llama shipped with rllib_llm
            pg_variant="topr",  # Tapered Off-Policy REINFORCE, arXiv:2503.14286
            adv_estimator="grpo",  # group-normalised advantages
        )
        .debugging(seed=0)
    )
    return train_and_report(config, iterations, eval_problems, min_gain)


def train_and_report(config: RLVRConfig, iterations: int, eval_problems: int,
                     min_gain: float) -> bool:
    """Held-out accuracy before and after `iterations` training iterations; True if it rose by
    at least `min_gain` points. (examples/roll_ppo.py trains this way too.)"""
    ray.init(include_dashboard=False, log_to_driver=False)
    algo = config.build_algo()

    before = algo.evaluate_accuracy(num_problems=eval_problems)["pass@1"]
    print(f"held-out accuracy before training: {before:.3f}")
    for i in range(1, iterations + 1):
        result = algo.train()
        if i % 25 == 0 or i == iterations:
            runners = result["env_runners"]
            print(f"iter {i:4d}  reward {runners['episode_return_mean']:.3f}  "
                  f"train accuracy {runners['accuracy']:.3f}", flush=True)
    after = algo.evaluate_accuracy(num_problems=eval_problems)["pass@1"]
    gain = (after - before) * 100
    print(f"held-out accuracy after training:  {after:.3f} ({gain:+.1f} points)")

    algo.stop()
    ray.shutdown()
    learned = gain >= min_gain
    print(f"{'learned' if learned else 'did not learn'}: {gain:+.1f} points after {iterations} "
          f"iterations (asked for >= {min_gain:+.1f})")
    return learned


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=600)
    parser.add_argument("--eval-problems", type=int, default=500)
    parser.add_argument("--min-gain", type=float, default=20.0,
                        help="accuracy points the run must gain, else exit status 1")
    args = parser.parse_args()
    sys.exit(0 if main(args.iterations, args.eval_problems, args.min_gain) else 1)
