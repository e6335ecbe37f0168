"""Tool use on the embedded task: held-out accuracy with the tool and without, before and after RL.

    python benchmarks/learning/tool_use.py [--iterations 100 --pg-variant topr --seed 0]

`embedded_tool` (the tiny char-level Llama warm-started on tool-use transcripts, of which 30%
call the tool) trains with RL on "math_tool": two-digit products, a sandboxed `python` tool
(`rllib_llm.envs.sandbox`), the math-verify reward
(`rllib_llm.recipes.embedded.embedded_tool_config`).
Held-out accuracy (500 test problems, 4 samples each) is measured
- with the tool: "math_tool", the env it trains on;
- without it: "math_verify" over the same problems with the same checkpoint, where a tool call
  gets no answer (the model has to multiply by itself);
before and after training, with the model's behaviour step by step (`tool_use_rates` of
rllib_llm/models/checkpoint_rates.py, one sample per problem: how often it calls the tool, calls it
right, copies the output, and answers right when it answers at once), and seconds per iteration
and per phase.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time

import numpy as np
import ray
import torch
from rllib_llm.envs.arithmetic import arithmetic_problems
from rllib_llm.envs.sandbox import sandbox_report

from rllib_llm import RLVRConfig
from rllib_llm.models import load_tokenizer
from rllib_llm.models.checkpoint_rates import tool_use_rates
from rllib_llm.recipes.embedded import (
    EMBEDDED_TOOL_ENV,
    EMBEDDED_TOOL_TRAINING,
    embedded_tool_config,
)

EVAL_PROBLEMS, EVAL_SAMPLES = 500, 4


def held_out_accuracy(algo) -> float:
    return float(np.mean([algo.evaluate_accuracy(num_problems=EVAL_PROBLEMS, seed=s)["pass@1"]
                          for s in range(EVAL_SAMPLES)]))


def without_tool(model_dir: str, seed: int) -> float:
    """Held-out accuracy of the checkpoint in `model_dir` on the same problems, no tool."""
    env_config = {k: v for k, v in EMBEDDED_TOOL_ENV.items() if k != "max_turns"}
    algo = (RLVRConfig().environment("math_verify", env_config=env_config)
            .training(model_name_or_path=model_dir,
                      response_length=EMBEDDED_TOOL_TRAINING["response_length"])
            .debugging(seed=seed, log_level="ERROR").build_algo())
    accuracy = held_out_accuracy(algo)
    algo.stop()
    return accuracy


def policy(algo):
    return algo.learner_group.local_learner.module["default_policy"].model


def measure(algo, seed: int, label: str) -> dict:
    """Accuracy with and without the tool, and the step-by-step rates, of `algo`'s policy."""
    model, tokenizer = policy(algo), load_tokenizer("embedded_tool")
    with tempfile.TemporaryDirectory() as model_dir:
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        no_tool = without_tool(model_dir, seed)
    rates = tool_use_rates(model, tokenizer, arithmetic_problems("test", ops="*"),
                           do_sample=True, seed=seed)
    row = {"when": label, "with_tool": held_out_accuracy(algo), "without_tool": no_tool, **rates}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--pg-variant", default="topr")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the rows and timings as JSON here")
    args = parser.parse_args()

    torch.set_num_threads(1)
    ray.init(include_dashboard=False, log_to_driver=False)
    print(f"sandbox: {sandbox_report()}", flush=True)
    algo = embedded_tool_config(args.pg_variant, seed=args.seed).build_algo()
    rows = [measure(algo, args.seed, "before RL")]
    times, phases = [], {"sample": [], "learn": [], "weight_sync": []}
    for i in range(1, args.iterations + 1):
        start = time.perf_counter()
        result = algo.train()
        times.append(time.perf_counter() - start)
        for phase, values in phases.items():  # RLVR's timers: this iteration's values
            values.append(result["timers"][phase])
        runners = result["env_runners"]
        if i % 10 == 0 or i == args.iterations:
            print(f"iter {i:4d}  accuracy {runners['accuracy']:.3f}  tool calls "
                  f"{runners['tool_calls_mean']:.2f}  tool errors "
                  f"{runners['tool_error_fraction']:.3f}  env tokens "
                  f"{runners['env_token_fraction']:.2f}  {times[-1]:.2f} s", flush=True)
    rows.append(measure(algo, args.seed, f"after {args.iterations} iterations"))
    algo.stop()
    ray.shutdown()

    print(f"\n{platform.node()}, {torch.get_num_threads()} torch thread, {args.pg_variant}, "
          f"seed {args.seed}: {np.mean(times):.2f} s per iteration ("
          + ", ".join(f"{k} {np.mean(v):.2f} s" for k, v in phases.items()) + ")\n")
    print("| | with the tool | without | calls the tool | call right | copies output | "
          "direct answer right |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['when']} | {r['with_tool']:.1%} | {r['without_tool']:.1%} | "
              f"{r['tool_rate']:.1%} | {r['call_ok']:.1%} | {r['copy_ok']:.1%} | "
              f"{r['direct_ok']:.1%} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "seconds_per_iteration": times, "phases": phases}, f)


if __name__ == "__main__":
    main()
