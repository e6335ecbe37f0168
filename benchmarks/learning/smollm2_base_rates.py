"""SmolLM2-135M-Instruct's base rates on candidate tasks: where can RL with verifiable rewards
learn anything?

    python benchmarks/learning/smollm2_base_rates.py [--tasks add1_words sub2 ... --problems 100
        --samples 8 --engine vllm --threads 1]

Group advantages are zero when a group's rewards are all equal, so a task teaches a model only
where the model is sometimes right: on `gsm_symbolic` SmolLM2-135M solved 1 in 256 and an hour
of training moved held-out accuracy from 0% to 1.7% (`smollm2_gsm.py`). For each task this scores
the first `--problems` held-out (test split) problems, each prompt passed through the model's chat
template exactly as the environment does (`rllib_llm.models.encode_prompt`) and each response
checked by the environment's verifier (`MathVerifier`, the default "auto" extraction):

- greedy: accuracy of the greedy response;
- sampled: accuracy of `--samples` responses per problem at temperature 1;
- mixed: the share of problems whose `--samples` responses (a group, as in training) hold both a
  right and a wrong one, i.e. groups with a nonzero advantage;
- pass@k: the share with at least one right response.

Engine and verifier are called directly (no RLlib algorithm): the same sampling path as training
with less to start. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import DEFAULT_SMOLLM2_DIR, build_engine, smollm2_path  # noqa: E402

# name -> (dataset, dataset kwargs, response_length). The answers are numbers: a short response
# budget is enough, and sampling is ~100-250 tokens/s on one core.
TASKS = {
    "add1_words": ("arithmetic", {"ops": "+", "max_operand": 9, "test_size": 40,
                                  "prompt_style": "words"}, 32),
    "add1_symbols": ("arithmetic", {"ops": "+", "max_operand": 9, "test_size": 40,
                                    "prompt_style": "symbols"}, 32),
    "add2_words": ("arithmetic", {"ops": "+", "prompt_style": "words"}, 32),
    "add2_symbols": ("arithmetic", {"ops": "+", "prompt_style": "symbols"}, 32),
    "sub2_symbols": ("arithmetic", {"ops": "-", "prompt_style": "symbols"}, 32),
    "mul1_words": ("arithmetic", {"ops": "*", "max_operand": 9, "test_size": 40,
                                  "prompt_style": "words"}, 32),
    "mul1_symbols": ("arithmetic", {"ops": "*", "max_operand": 9, "test_size": 40,
                                    "prompt_style": "symbols"}, 32),
    "compare2": ("compare", {"size": 2}, 32),
    "compare3": ("compare", {"size": 3}, 32),
    "word_problems": ("word_problems", {}, 64),
    "gsm_symbolic": ("gsm_symbolic", {}, 192),
}


def score(verifier, tokenizer, groups, answers) -> list[list[bool]]:
    texts = [tokenizer.decode(r.token_ids, skip_special_tokens=True) for g in groups for r in g]
    truth = [a for a, g in zip(answers, groups) for _ in g]
    flat = [v.correct for v in verifier.score_batch(texts, truth)]
    out, i = [], 0
    for g in groups:
        out.append(flat[i:i + len(g)])
        i += len(g)
    return out


def measure(task: str, engine, tokenizer, verifier, args) -> dict:
    from rllib_llm.envs import load_problems

    from rllib_llm.models import encode_prompt
    from rllib_llm.rollout.engine import SamplingParams

    dataset, kwargs, length = TASKS[task]
    problems = load_problems(dataset, split="test", **kwargs)[:args.problems]
    prompts = [encode_prompt(tokenizer, p["prompt"]) for p in problems]
    answers = [p["answer"] for p in problems]
    start = time.perf_counter()
    greedy = engine.generate(prompts, 1, SamplingParams(temperature=0.0, max_tokens=length))
    # vLLM 0.32 on CPU fails on seeded requests whose prefill gets chunked ("CPU Generator does
    # not use offset", with 800 requests): vLLM samples unseeded, so its numbers vary run to run.
    seed = args.seed if args.engine == "torch" else None
    sampled = engine.generate(prompts, args.samples,
                              SamplingParams(temperature=1.0, max_tokens=length, seed=seed))
    seconds = time.perf_counter() - start
    greedy_ok = [g[0] for g in score(verifier, tokenizer, greedy, answers)]
    sampled_ok = score(verifier, tokenizer, sampled, answers)
    example = tokenizer.decode(sampled[0][0].token_ids, skip_special_tokens=True)
    print(f"{task}: {problems[0]['prompt']!r} -> {example!r} (answer {answers[0]}); "
          f"{seconds:.0f} s", flush=True)
    n, k = len(problems), args.samples
    row = {"task": task, "problems": n, "length": length, "seconds": seconds,
            "greedy": sum(greedy_ok) / n,
            "sampled": sum(map(sum, sampled_ok)) / (n * k),
            "mixed": sum(0 < sum(g) < k for g in sampled_ok) / n,
            "pass_at_k": sum(any(g) for g in sampled_ok) / n,
            "tokens": sum(len(r.token_ids) for g in sampled for r in g) / (n * k)}
    print(table_row(row), flush=True)  # as it comes: a long run that dies keeps its rows
    return row


def table_row(r: dict) -> str:
    return (f"| {r['task']} | {r['problems']} | {r['length']} | {r['greedy']:.1%} "
            f"| {r['sampled']:.1%} | {r['mixed']:.0%} | {r['pass_at_k']:.0%} | {r['tokens']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    parser.add_argument("--problems", type=int, default=100, help="held-out problems per task")
    parser.add_argument("--samples", type=int, default=8, help="sampled responses per problem")
    parser.add_argument("--engine", choices=["torch", "vllm"], default="vllm")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR)
    parser.add_argument("--dtype", default="float32")  # smollm2_path's export dtype
    args = parser.parse_args()
    # vLLM on CPU binds its OpenMP threads to every core unless told not to: keep to --threads.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if args.engine == "vllm":
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

    import torch
    from rllib_llm.envs import MathVerifier

    from rllib_llm.models import load_tokenizer

    torch.set_num_threads(args.threads)
    notes: list[str] = []
    path = smollm2_path(args, notes)
    if path is None:
        sys.exit("; ".join(notes))
    tokenizer = load_tokenizer(path)
    max_len = 512 + max(TASKS[t][2] for t in args.tasks)  # prompts are < 300 tokens
    engine = build_engine(args.engine, path, stop_id=tokenizer.eos_token_id,
                          pad_id=tokenizer.eos_token_id, dtype=args.dtype, max_len=max_len)
    verifier = MathVerifier()
    start = time.perf_counter()
    rows = [measure(task, engine, tokenizer, verifier, args) for task in args.tasks]
    verifier.close()

    print(f"\n{platform.processor() or platform.machine()}, {args.threads} thread(s), engine "
          f"{args.engine}; held-out problems per task as listed, {args.samples} samples each at "
          f"temperature 1; {(time.perf_counter() - start) / 60:.0f} min in all\n")
    print(f"| task | problems | max tokens | base greedy | base sampled | mixed groups of "
          f"{args.samples} | pass@{args.samples} | mean response tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(table_row(r))


if __name__ == "__main__":
    main()
