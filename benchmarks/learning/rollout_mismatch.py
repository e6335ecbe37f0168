"""A sampler that is not the learner's policy, and what masked and weighted importance sampling
do about it, on the embedded task.

    python benchmarks/learning/rollout_mismatch.py [--iterations 40 --seeds 0 1
        --sampler-temperature 1.6]

The mismatch is injected: the env runner samples at `--sampler-temperature` and reports the log-
probs of that tempered policy, while the learner trains the policy at temperature 1.0 (the
config's) and recomputes old_logp itself (`recompute_old_logp=True`). So every batch comes from
pi_rollout != pi_old, as with a sampler whose kernels or weights differ, only more so. Each variant
trains GRPO ("ppo" loss, group advantages) for the same iterations and seeds; the table gives held-
out pass@1 (500 problems, one sample each with the evaluation settings) before and after, the
logged mismatch KL (`rollout_kl_k3`, mean over the run), the share of tokens masked
(`rollout_rs_masked_frac`) and the mean importance weight, and seconds per iteration measured in
this run.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import time

import ray
from seeded_runs import accuracy_cells, column, percent, run_all, table

from rllib_llm.recipes.embedded import embedded_config
from rllib_llm.rollout.env_runner import RLVREnvRunner

SAMPLER_TEMPERATURE = 1.6  # the injected mismatch (the learner's is 1.0)
VARIANTS = {
    "no mismatch": {},
    "mismatch, uncorrected": {},
    "mismatch + token IS weights (cap 2)": {"rollout_is_level": "token"},
    "mismatch + token masking [0.5, 2]": {"rollout_rs_level": "token"},
    "mismatch + geometric masking [0.5, 2] + token IS (seq-mask-tis)": {
        "rollout_rs_level": "geometric", "rollout_is_level": "token"},
}
LOGGED = ("rollout_kl_k3", "rollout_rs_masked_frac", "rollout_is_weight_mean")


class HotSamplerEnvRunner(RLVREnvRunner):
    """An env runner whose training samples come from a hotter policy than the learner's."""

    temperature = SAMPLER_TEMPERATURE

    def sampling_params(self, call):
        return dataclasses.replace(super().sampling_params(call), temperature=self.temperature)


def run(variant: str, seed: int, iterations: int, sampler_temperature: float) -> dict:
    config = embedded_config("ppo", seed=seed, adv_estimator="grpo", recompute_old_logp=True,
                             **VARIANTS[variant])
    if variant != "no mismatch":
        runner = type("Runner", (HotSamplerEnvRunner,), {"temperature": sampler_temperature})
        config.env_runners(env_runner_cls=runner)
    algo = config.build_algo()
    before = algo.evaluate_accuracy(num_problems=500, seed=0)["pass@1"]
    logged = {name: [] for name in LOGGED}
    start = time.perf_counter()
    for _ in range(iterations):
        learner = algo.train()["learners"]["default_policy"]
        for name in LOGGED:
            if name in learner:
                logged[name].append(float(learner[name]))
    seconds = time.perf_counter() - start
    after = algo.evaluate_accuracy(num_problems=500, seed=0)["pass@1"]
    algo.stop()
    return {"variant": variant, "seed": seed, "before": before, "after": after,
            "s_per_iter": seconds / iterations,
            **{name: statistics.mean(v) if v else None for name, v in logged.items()}}


HEADER = ("variant", "held-out before", "after", "gain (points)", "mismatch KL (k3)",
          "tokens masked", "IS weight mean", "s / iteration")


def cells(mine: list[dict]) -> list[str]:
    return [*accuracy_cells(mine), column(mine, "rollout_kl_k3", digits=4),
            percent(column(mine, "rollout_rs_masked_frac", 100)),
            column(mine, "rollout_is_weight_mean", digits=3),
            column(mine, "s_per_iter", digits=2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--sampler-temperature", type=float, default=SAMPLER_TEMPERATURE)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", help="append each run as a JSON line to this file")
    args = parser.parse_args()
    ray.init(include_dashboard=False, log_to_driver=False)
    runs = run_all(args.variants, args.seeds, lambda variant, seed: run(
        variant, seed, args.iterations, args.sampler_temperature), args.out)
    print(f"\n{args.iterations} iterations, seeds {args.seeds}, sampler temperature "
          f"{args.sampler_temperature}, {platform.machine()}\n")
    print(table(runs, VARIANTS, HEADER, cells))


if __name__ == "__main__":
    main()
