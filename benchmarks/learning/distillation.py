"""On-policy distillation on the embedded task: the shipped student (`embedded`) distilled from
the embedded model trained by RL (`embedded_teacher`), against RL on the verifier reward alone.

    python benchmarks/learning/distillation.py [--variants alone combined verifier]
        [--iterations 150] [--every 25] [--seed 1] [--distillation-coef 1.0]

Each variant trains `embedded_config(pg_variant, seed)` (the demo's settings) and prints
held-out accuracy (500 test problems, 2 samples each, sampling seeds 0 and 1) every `--every`
iterations, with the iteration's mean per-token reverse KL to the teacher
(learners/default_policy/distillation_reverse_kl) and its training reward:

- alone: the teacher's per-token term is the whole advantage (verifier_advantage_coef=0), under
  the plain policy gradient ("vanilla");
- combined: TOPR on the verifier's GRPO advantages plus the teacher's term (both weights 1);
- verifier: TOPR on the verifier reward alone (the demo's recipe); it has no teacher, so it logs
  no reverse KL.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import ray

from rllib_llm.recipes.embedded import embedded_config

TEACHER = "embedded_teacher"
VARIANTS = {
    "alone": ("vanilla", {"teacher_model_name_or_path": TEACHER,
                          "verifier_advantage_coef": 0.0}),
    "combined": ("topr", {"teacher_model_name_or_path": TEACHER}),
    "verifier": ("topr", {}),
}
EVAL_SAMPLES = 2


def accuracy(algo) -> float:
    return float(np.mean([algo.evaluate_accuracy(num_problems=500, seed=s)["pass@1"]
                          for s in range(EVAL_SAMPLES)]))


def run(variant: str, seed: int, iterations: int, every: int, coef: float) -> None:
    pg_variant, overrides = VARIANTS[variant]
    if "teacher_model_name_or_path" in overrides:
        overrides = {**overrides, "distillation_coef": coef}
    algo = embedded_config(pg_variant, seed=seed, **overrides).build_algo()
    start = time.perf_counter()
    print(f"{variant} 0 {accuracy(algo):.3f}", flush=True)
    for i in range(1, iterations + 1):
        result = algo.train()
        if i % every == 0:
            rkl = result["learners"]["default_policy"].get("distillation_reverse_kl")
            reward = result["env_runners"]["episode_return_mean"]
            print(f"{variant} {i} {accuracy(algo):.3f} reverse_kl "
                  f"{'-' if rkl is None else f'{rkl:.4f}'} reward {reward:.3f} "
                  f"{time.perf_counter() - start:.0f}s", flush=True)
    algo.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--distillation-coef", type=float, default=1.0,
                        help="distillation_coef of the variants with a teacher")
    args = parser.parse_args()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    print(f"seed {args.seed}, distillation_coef {args.distillation_coef}, {platform.machine()}; "
          f"columns: variant, iteration, held-out accuracy ({EVAL_SAMPLES} samples x 500 "
          "problems)")
    for variant in args.variants:
        run(variant, args.seed, args.iterations, args.every, args.distillation_coef)


if __name__ == "__main__":
    main()
