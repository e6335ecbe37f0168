"""Build the distillation teacher (`rllib_llm/models/embedded_teacher`): the embedded default
trained by RL with the demo's recipe, exported as a Hugging Face model directory.

    python scripts/train_teacher.py --out rllib_llm/models/embedded_teacher --iterations 600 \
        --seed 0

A build script, like pretrain_embedded.py: `embedded_config("topr", seed)` (the demo's settings,
rllib_llm/recipes/embedded.py) for `--iterations` iterations, saved with
`Algorithm.save_to_path` and exported with `export_policy` (what `rllib-llm export` writes).
It prints the held-out accuracy (500 test problems, one sample each) before and after, sampled
at temperature 1 and greedy, the figures the checkpoint's README records.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import ray

from rllib_llm.outputs.checkpoints import export_policy
from rllib_llm.recipes.embedded import DEMO_ITERATIONS, embedded_config


def accuracy(algo) -> str:
    sampled = algo.evaluate_accuracy(num_problems=500)["pass@1"]
    greedy = algo.evaluate_accuracy(num_problems=500, temperature=0.0)["pass@1"]
    return f"sampled {sampled * 100:.1f}% / greedy {greedy * 100:.1f}%"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--iterations", type=int, default=DEMO_ITERATIONS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    args = parser.parse_args(argv)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    algo = embedded_config("topr", seed=args.seed).build_algo()
    print(f"before: {accuracy(algo)}", flush=True)
    start = time.perf_counter()
    for i in range(1, args.iterations + 1):
        result = algo.train()
        if i % 50 == 0:
            reward = result["env_runners"]["episode_return_mean"]
            print(f"iteration {i}: training reward {reward:.3f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    print(f"after {args.iterations} iterations: {accuracy(algo)}", flush=True)
    with tempfile.TemporaryDirectory() as checkpoint:
        algo.save_to_path(checkpoint)
        for path in export_policy(checkpoint, args.out, force=args.force):
            print(f"wrote {path}")
    algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
