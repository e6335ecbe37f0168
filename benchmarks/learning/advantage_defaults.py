"""GRPO's default advantages against group-only normalisation, over seeds (issue 47, item 7).

    python benchmarks/learning/advantage_defaults.py --task embedded [--iterations 50 --seeds 0 1 2]
    make setup-smollm2
    python benchmarks/learning/advantage_defaults.py --task smollm2 [--iterations 20]

RLVRConfig's defaults (ROLL's) whiten the GRPO advantages over the batch's tokens and clip them at
2. A group whose responses all scored alike has group-normalised advantages of 0; whitening then
gives each of its tokens -mean/std of the batch, pushing those responses up or down with no
signal, in proportion to their length. TRL's and verl's GRPO leave them at 0 (no whitening, no
clip). Both arms sample the same number of responses per iteration, so held-out accuracy after
the same iterations is accuracy per sample.

- embedded: the learning tests' set-up (tests/project/test_learning.py): EMBEDDED_TRAINING at a
  constant lr of 1e-4, PPO's loss at one step per batch, greedy accuracy on the 500 test problems.
- smollm2: examples/smollm2_compare.py's (SmolLM2-135M-Instruct, dataset "compare", TOPR, 8
  prompts x 8 responses of up to 32 tokens, lr 2e-5), greedy accuracy on 100 held-out problems.

Each run is printed (and appended to --out) as it ends; the table is mean +- standard deviation
over seeds of held-out accuracy at each reading, and seconds per iteration from this run.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import ray
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from seeded_runs import column, mean_spread, run_all, table  # noqa: E402

from rllib_llm.exchange.precision import native_bf16  # noqa: E402

ARMS = {
    "whitened, clip 2 (default)": {"whiten_advantages": True, "advantage_clip": 2.0},
    "group only": {"whiten_advantages": False, "advantage_clip": None},
}


def embedded(seed: int, arm: dict):
    from rllib_llm.recipes.embedded import embedded_config

    return embedded_config("ppo", seed=seed, lr=1e-4, **arm), 500


def smollm2(seed: int, arm: dict):
    from rllib_llm import RLVRConfig
    from rllib_llm.models.gguf_checkpoint import export_gguf_checkpoint, smollm2_gguf_path

    checkpoint = export_gguf_checkpoint(
        smollm2_gguf_path(), Path.home() / ".cache" / "rllib_llm" / "smollm2-135m-instruct")
    config = (RLVRConfig().environment("math_verify", env_config={"dataset": "compare"})
              .training(model_name_or_path=checkpoint, pg_variant="topr", adv_estimator="grpo",
                        rollout_batch_size=8, num_return_sequences_in_group=8, prompt_length=96,
                        response_length=32, lr=2e-5, use_kl_loss=False, temperature=1.0,
                        grad_clip=1.0, autocast_dtype="auto", fused_optimizer=True, **arm)
              .debugging(seed=seed))
    return config, 100


TASKS = {"embedded": embedded, "smollm2": smollm2}


def run(task: str, iterations: int, readings: list[int], arm_name: str, seed: int) -> dict:
    config, problems = TASKS[task](seed, ARMS[arm_name])
    algo = config.build_algo()

    def accuracy() -> float:
        return algo.evaluate_accuracy(num_problems=problems, temperature=0)["pass@1"]

    curve = {"0": accuracy()}  # reading -> accuracy (string keys, as JSON gives them back)
    start, trained = time.perf_counter(), 0.0
    for i in range(1, iterations + 1):
        algo.train()
        if i in readings:
            trained += time.perf_counter() - start
            curve[str(i)] = accuracy()
            start = time.perf_counter()
    algo.stop()
    return {"variant": arm_name, "seed": seed, "task": task, "curve": curve,
            "before": curve["0"], "after": curve[str(iterations)],
            "s_per_iter": trained / iterations}


def cells(readings: list[int]):
    def row(runs: list[dict]) -> list[str]:
        return [mean_spread([r["curve"][str(i)] for r in runs], 100)
                for i in [0, *readings]] + \
               [mean_spread([r["after"] - r["before"] for r in runs], 100),
                column(runs, "s_per_iter", digits=2)]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=list(TASKS), default="embedded")
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--out", help="append each run as a JSON line to this file")
    parser.add_argument("--table-from", help="print the table of the runs in this file and exit")
    args = parser.parse_args()
    runs = [json.loads(line) for line in open(args.table_from) if line.strip()] \
        if args.table_from else []
    # A file's table is read at the iterations its runs were read at, whatever --task says.
    iterations = max(int(i) for i in runs[0]["curve"]) if runs else \
        args.iterations or {"embedded": 50, "smollm2": 20}[args.task]
    readings = sorted({max(1, iterations // 2), iterations})
    header = ["advantages", *(f"held-out after {i}" for i in [0, *readings]), "gain (points)",
              "s / iteration"]
    if args.table_from:
        print(table(runs, ARMS, header, cells(readings)))
        return
    ray.init(include_dashboard=False, log_to_driver=False)
    runs = run_all(args.arms, args.seeds,
                   lambda arm, seed: run(args.task, iterations, readings, arm, seed), args.out)
    print(f"\n{args.task}: {iterations} iterations, seeds {args.seeds}, "
          f"{platform.processor() or platform.machine()}, native bf16: "
          f"{native_bf16(torch.device('cpu'))}\n")
    print(table(runs, ARMS, header, cells(readings)))
    ray.shutdown()


if __name__ == "__main__":
    main()
