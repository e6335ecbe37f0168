"""TOPR on the embedded default in one file: build, evaluate, train, evaluate again.

    python examples/topr_arithmetic.py [--iterations 40]

The same run as `make demo`, written as user code. Swap `model_name_or_path` for any Hugging
Face causal LM and `env_config["dataset"]` for a jsonl/parquet file or a `datasets` dataset.
"""

import argparse

import ray

from rllib_llm import RLVRConfig


def main(iterations: int) -> None:
    ray.init(include_dashboard=False, log_to_driver=False)
    config = (
        RLVRConfig()
        .environment("math_verify", env_config={"dataset": "arithmetic"})
        .training(
            model_name_or_path="embedded",  # the tiny char-level Llama shipped with rllib_llm
            pg_variant="topr",  # Tapered Off-Policy REINFORCE, arXiv:2503.14286
            adv_estimator="grpo",
            rollout_batch_size=8,  # prompts per iteration
            num_return_sequences_in_group=8,  # responses per prompt
            response_length=8,
            lr=1e-3,
        )
        .debugging(seed=0)
    )
    algo = config.build_algo()

    before = algo.evaluate_accuracy(num_problems=200)["pass@1"]
    print(f"held-out accuracy before training: {before:.3f}")
    for i in range(1, iterations + 1):
        result = algo.train()
        runners = result["env_runners"]
        print(f"iter {i:3d}  reward {runners['episode_return_mean']:.3f}  "
              f"train accuracy {runners['accuracy']:.3f}")
    after = algo.evaluate_accuracy(num_problems=200)["pass@1"]
    print(f"held-out accuracy after training:  {after:.3f} ({(after - before) * 100:+.1f} points)")

    algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=40)
    main(parser.parse_args().iterations)
