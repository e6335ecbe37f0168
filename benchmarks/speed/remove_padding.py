"""The learner's update with and without `use_remove_padding`, on rows of uneven length.

    python benchmarks/speed/remove_padding.py [--model smollm2 --rows 16 --prompt 64 --response 128]

Each variant, padded (the default) and unpadded, runs in a fresh process that builds the
learner's module (RLVRModule) from the same checkpoint and times updates, each on a batch of its
own (the same batches for both variants): `--rows` rows of random tokens, prompt lengths uniform
in [prompt/2, prompt] and response lengths uniform in [response/8, response] (RL responses end
at EOS at any length), cut into micro-batches under the learner's budget (`--budget`; default
"auto", sized for a GPU as the learner sizes it; unpadded it counts real tokens) with forward, a
token-level loss and backward per micro-batch, as the learner runs them. A packed pass's length
therefore changes with every micro-batch, as in training: what decides whether a compiled
attention (flex_attention) recompiles. Prints a Markdown table, medians over `--updates` after one
warm-up: passes, positions the layers computed on, real tokens and seconds per update;
real tokens/s (over all timed updates), the ratio to padded, the peak memory of the updates (CUDA
allocated on a GPU, else RSS above the RSS before them), the graphs torch.compile built during
the timed updates (0 when nothing recompiles for a new length) and, on a GPU, MFU (6 x
parameters x real tokens / s over the GPU's dense bf16 peak, gpu_check.py's table).
`--attention` sets the learner's attn_implementation (default sdpa; flex_attention or
flash_attention_2 where installed: on a GPU use_remove_padding needs one of them;
flex_attention runs no backward on a CPU).
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
from harness import DEFAULT_SMOLLM2_DIR, model_path, reset_peak_rss, rss_mib, run_child  # noqa: E402

# (name, use_remove_padding)
VARIANTS = (("padded (default)", False), ("use_remove_padding", True))


def random_batch(args, vocab: int, seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    p, t = args.prompt, args.response
    prompt_lens = torch.randint(max(1, p // 2), p + 1, (args.rows,), generator=gen)
    response_lens = torch.randint(max(1, t // 8), t + 1, (args.rows,), generator=gen)
    ids = torch.randint(1, vocab, (args.rows, p + t), generator=gen)
    mask = torch.zeros_like(ids)
    for row, (lp, lr) in enumerate(zip(prompt_lens.tolist(), response_lens.tolist())):
        mask[row, p - lp : p + lr] = 1
    ids = ids * mask
    return {"input_ids": ids, "attention_mask": mask, "response_ids": ids[:, p:]}


def build(path: str, unpadded: bool, args):
    import gymnasium as gym

    from rllib_llm import RLVRConfig
    from rllib_llm.learner.module import RLVRModule

    spec = RLVRConfig().training(model_name_or_path=path, model_dtype=args.dtype,
                                 use_remove_padding=unpadded, attn_implementation=args.attention,
                                 max_tokens_per_micro_batch=args.budget,
                                 autocast_dtype=args.autocast).get_default_rl_module_spec()
    return RLVRModule(observation_space=gym.spaces.Discrete(2),
                      action_space=gym.spaces.Discrete(2), model_config=spec.model_config)


def update(module, batch, device) -> tuple[int, int]:
    """One update's forwards and backwards over the micro-batches; (passes, positions the
    trunk computed on)."""
    from rllib_llm.learner import micro_batches

    micros = micro_batches.split(batch, max_tokens=module.micro_batch_tokens,
                                 unpadded=module.remove_padding)
    positions = 0
    for micro in micros:
        micro = {k: v.to(device) for k, v in micro.items()}
        out = module.forward_train(micro)
        real = micro["attention_mask"][:, -micro["response_ids"].shape[1]:]
        loss = -(out["logp"] * real).sum() / real.sum()
        loss.backward()
        positions += int(micro["attention_mask"].sum()) if module.remove_padding \
            else micro["input_ids"].numel()
    module.zero_grad(set_to_none=True)
    return len(micros), positions


def measure(args, unpadded: bool) -> dict:
    """One variant's figures (in its own process)."""
    import torch
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    module = build(args.path, unpadded, args)
    module.to(device).train()
    # As the learner does: on a GPU an "auto" budget is what fits the device's share.
    budgets = module.size_for_device(args.device_memory_share)
    module.use_budgets(budgets)
    sized = budgets.note
    vocab = module.model.config.vocab_size
    update(module, random_batch(args, vocab, seed=0), device)  # warm-up (compiles, allocator)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = reset_peak_rss()
    graphs_before = counters["stats"]["unique_graphs"]
    times, real, passes, positions = [], [], [], []
    for seed in range(1, args.updates + 1):
        batch = random_batch(args, vocab, seed)
        start = time.perf_counter()
        n_passes, n_positions = update(module, batch, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        real.append(int(batch["attention_mask"].sum()))
        passes.append(n_passes)
        positions.append(n_positions)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" \
        else rss_mib("VmHWM") - before
    median = statistics.median
    return dict(passes=median(passes), positions=median(positions), real=median(real),
                seconds=median(times), tokens_per_s=sum(real) / sum(times),
                peak_mib=peak, sized=sized,
                compiled=counters["stats"]["unique_graphs"] - graphs_before,
                params=sum(p.numel() for p in module.model.parameters()))


def peak_flops() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    # gpu_check.py and the modules it imports live in benchmarks/gpu/, which is not on sys.path.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
    from gpu_check import PEAK_BF16_FLOPS

    name = torch.cuda.get_device_name()
    return next((flops for key, flops in PEAK_BF16_FLOPS if key in name), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("smollm2", "embedded"), default="smollm2")
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=128)
    parser.add_argument("--budget", type=int, default=None,
                        help="max_tokens_per_micro_batch (default: the shipped 'auto')")
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on a CPU")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device-memory-share", type=float, default=None,
                        help="device_memory_share, for an 'auto' budget on a GPU (default: "
                             "RLVRConfig's)")
    parser.add_argument("--autocast", default=None, help="autocast_dtype, e.g. bfloat16")
    parser.add_argument("--attention", default=None,
                        help="attn_implementation (default: transformers' own, sdpa)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--unpadded", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.budget is None:
        args.budget = "auto"
    if args.device_memory_share is None:
        from rllib_llm import RLVRConfig

        args.device_memory_share = RLVRConfig().device_memory_share
    if args.child:
        print(json.dumps(measure(args, args.unpadded)))
        return
    path = model_path(args)
    rows = []
    for name, unpadded in VARIANTS:
        cmd = [sys.executable, __file__, *sys.argv[1:], "--child", "--path", path]
        row = run_child(cmd + (["--unpadded"] if unpadded else []))
        if "error" in row:
            sys.exit(f"{name}: {row['error']}")
        rows.append(dict(variant=name, **row))
    flops = peak_flops()
    base = rows[0]["seconds"]
    print(f"{args.model}, {args.rows} rows, prompt <= {args.prompt}, response <= "
          f"{args.response}, budget {args.budget}, attention {args.attention or 'default'}, "
          f"{platform.processor() or platform.machine()}"
          + "".join(f"; {r['variant']}: {r['sized']}" for r in rows if r["sized"]))
    print("| variant | passes | positions computed | real tokens | s / update "
          "| real tokens/s | ratio to padded | peak MiB | graphs compiled | MFU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        mfu = f"{6 * r['params'] * r['tokens_per_s'] / flops:.1%}" if flops else "n/a"
        print(f"| {r['variant']} | {r['passes']:g} | {r['positions']:,.0f} | {r['real']:,.0f} "
              f"| {r['seconds']:.2f} | {r['tokens_per_s']:,.0f} "
              f"| {r['seconds'] / base:.2f}x | {r['peak_mib']:,.0f} | {r['compiled']} | {mfu} |")


if __name__ == "__main__":
    main()
