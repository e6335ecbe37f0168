"""Weight sync as a share of the RLVR iteration: RLlib's object store vs a broadcast, in one run.

    python benchmarks/speed/weight_sync.py [--model embedded|CHECKPOINT_DIR] [--engine torch|vllm]
        [--backends object_store,gloo] [--prompts 8 --group 4 --tokens 16 --iters 5]

One remote env runner (the setup a broadcast is for) and the learner in the driver. For each
`weight_sync_backend` it trains `--iters` iterations after one warm-up and prints a Markdown
table of mean seconds:
- iteration: wall time of `algo.train()`;
- driver sync: RLVR's weight_sync timer. RLlib's object-store sync does not wait for the runner
  to load the weights, so for it this is the learner's side only;
- runner load: the runner's own time to load them (`time_weight_load_s`). For the object store
  it comes on top, delaying the next sample; a broadcast's is inside the driver's timer;
- sync cost and its share of the iteration (goal: <= 5%).
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import time

import torch


def measure(backend: str, args) -> dict[str, float]:
    from rllib_llm.recipes.embedded import embedded_config

    overrides = dict(rollout_batch_size=args.prompts, num_return_sequences_in_group=args.group,
                     response_length=args.tokens, model_name_or_path=args.model,
                     prompt_length=args.prompt_length)
    algo = (embedded_config("topr", **overrides)
            .env_runners(num_env_runners=1, rollout_engine=args.engine,
                         weight_sync_backend=backend)
            .build_algo())
    rows = []
    for i in range(args.iters + 1):  # the first iteration warms up (and builds the group)
        start = time.perf_counter()
        result = algo.train()
        total = time.perf_counter() - start
        if i == 0:
            continue
        driver = result["timers"]["weight_sync"]
        load = result["env_runners"].get("time_weight_load_s", float("nan"))
        # The load reported now is the previous sync's; the steady state makes them equal.
        cost = driver + load if backend == "object_store" else driver
        rows.append({"iteration": total, "driver": driver, "load": load, "cost": cost,
                     "sample": result["timers"]["sample"], "learn": result["timers"]["learn"]})
    algo.stop()
    return {k: statistics.mean(r[k] for r in rows) for k in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--engine", default="torch", choices=("torch", "vllm"))
    parser.add_argument("--backends", default="object_store,gloo")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--prompt-length", type=int, default=64)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()

    import ray

    from rllib_llm.models import load_model, resolve_path

    params = sum(p.numel() for p in load_model(resolve_path(args.model)).parameters())
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    results = {b: measure(b, args) for b in args.backends.split(",")}
    ray.shutdown()

    print(f"\nmachine: {platform.processor() or platform.machine()}; model {args.model} "
          f"({params / 1e6:.1f}M parameters), engine {args.engine}, 1 remote env runner; batch "
          f"{args.prompts} prompts x {args.group} samples x {args.tokens} tokens; mean of "
          f"{args.iters} iterations\n")
    print("| weight_sync_backend | iteration s | sample s | learn s | driver sync s | "
          "runner load s | sync cost s | sync share |")
    print("|---|---|---|---|---|---|---|---|")
    for backend, m in results.items():
        print(f"| {backend} | {m['iteration']:.3f} | {m['sample']:.3f} | {m['learn']:.3f} | "
              f"{m['driver']:.4f} | {m['load']:.4f} | {m['cost']:.4f} | "
              f"{m['cost'] / m['iteration']:.1%} |")
    print(f"\npeak RSS of the driver: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
          f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
