"""rllib_llm against TRL's GRPOTrainer: the same GRPO run through both, in one run, same machine.

    python benchmarks/peers/trl_comparison.py --trl-python /path/to/trl-venv/bin/python \
        [--model embedded|smollm2 --prompts 8 --group 4 --tokens 16 --updates 20]
    python benchmarks/peers/trl_comparison.py --levers --model smollm2 --dataset compare ...

TRL is a benchmark-only dependency in an environment of its own (torch first, then
`pip install trl transformers==<ours> math-verify ray==<ours> gymnasium`, then this repository
with `pip install --no-deps -e .` for its verifier): this script runs it there as a subprocess,
and rllib_llm in this interpreter's environment, each in a fresh process with one torch
thread. Both get the same model, the same training prompts (the arithmetic task's, written
to a file), group size, response length, learning rate (constant), clip 0.2, no KL, one
optimizer step per batch, `--updates` updates; GRPO's advantages (group mean and std) and
per-sequence token means on both sides: `RLVR(pg_variant="ppo", adv_estimator="grpo",
whiten_advantages=False, advantage_clip=None)` (`GRPO_AS_TRL`) and `GRPOConfig(loss_type="grpo",
scale_rewards="group", beta=0)`. Ours runs twice: sampling in the driver (local mode) and in one
remote env runner; `--roll-advantages` adds a third, local, with our default advantages.

`--levers` runs ours (local mode) once per row of `LEVERS` instead, from RLlib's defaults with
no token budget up to every speed setting on, each row adding one (`--trl-fp32` adds TRL with
bf16 and gradient checkpointing off: GRPOConfig turns both on by default, on a CPU too).
`--dataset` picks the task both sides train and score on (a built-in dataset's train and test
splits).

Both sides train on the same reward and are scored with it: rllib_llm's verifier
(`MathVerifier` with the math_verify env's defaults), which is TRL's reward function here.
Before 2026-11-27 TRL's side was rewarded and scored by the response's last number, which
trained the two sides on different rewards.

Reported: seconds per update (median after the first), its ratio to TRL's, generated tokens/s,
peak RSS (all of a run's processes), greedy held-out accuracy before and after on the task's
first `--eval-problems` held-out problems (each side with its own greedy decoding) and the
accuracy gained per minute of training. A model with a chat template gets
each prompt as one user message on both sides.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import DEFAULT_SMOLLM2_DIR, model_path, run_child  # noqa: E402

# GRPO as TRL's GRPOTrainer computes it, on our side: group-normalised advantages and nothing
# more. Our defaults also whiten the advantages over the batch's tokens and clip them at 2
# (ROLL's); --roll-advantages adds a row with those (benchmarks/peers/trl_one_update.py: with them
# the same batch gives another update, without them TRL's to a cosine of 0.9999999).
GRPO_AS_TRL = dict(pg_variant="ppo", adv_estimator="grpo", use_kl_loss=False, pg_clip=0.2,
                   grad_clip=1.0, temperature=1.0, whiten_advantages=False, advantage_clip=None)
ROLL_ADVANTAGES = {"whiten_advantages": True, "advantage_clip": 2.0}


def grpo_config(args: argparse.Namespace, *, runners: int, seed: int, **settings):
    """Our side's config: TRL's GRPO (`GRPO_AS_TRL`, then `settings`) on --dataset with the
    model, batch shape and lr of `args`."""
    from rllib_llm import RLVRConfig

    return (RLVRConfig()
            .environment("math_verify", env_config={"dataset": args.dataset})
            .training(model_name_or_path=args.path, rollout_batch_size=args.prompts,
                      num_return_sequences_in_group=args.group, response_length=args.tokens,
                      lr=args.lr, prompt_length=args.prompt_length,
                      **{**GRPO_AS_TRL, **settings})
            .env_runners(num_env_runners=runners)
            .debugging(seed=seed, log_level="ERROR"))


def our_verifier():
    """rllib_llm's verifier as the math_verify env builds it by default: what rewards and scores
    both sides. In TRL's environment it needs this repository installed there (--no-deps)."""
    try:
        from rllib_llm.envs.env_config import MathVerifyEnvConfig
        from rllib_llm.envs.verifier import MathVerifier
    except ImportError as e:
        sys.exit(f"trl_comparison: TRL's side scores with rllib_llm's verifier, and this "
                 f"environment cannot import it ({e}). Install it there: pip install ray "
                 "gymnasium math-verify, then pip install --no-deps -e <this repository>.")
    return MathVerifier(**MathVerifyEnvConfig().verifier_options())


# --- TRL, in its own environment -----------------------------------------------------------------
def run_trl(args: argparse.Namespace) -> dict:
    import resource

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = json.loads(Path(args.data).read_text())
    # GRPOConfig's defaults: bf16 autocast and gradient checkpointing on; off with --fp32.
    precision = {"bf16": False, "gradient_checkpointing": False} if args.fp32 else {}
    tokenizer = AutoTokenizer.from_pretrained(args.path)
    model = AutoModelForCausalLM.from_pretrained(args.path, dtype=torch.float32)
    answers = {p["prompt"]: p["answer"] for p in data["train"]}
    verifier = our_verifier()

    chat = bool(tokenizer.chat_template)  # as rllib_llm's encode_prompt: one user message

    def text(x) -> str:
        return x[-1]["content"] if isinstance(x, list) else x

    def reward(prompts, completions, **kwargs):
        return [verifier.score(text(c), answers[text(p)]).score
                for p, c in zip(prompts, completions)]

    def held_out() -> float:
        model.eval()
        hits = 0
        rows = data["test"]
        tokenizer.padding_side = "left"
        for start in range(0, len(rows), 64):
            chunk = rows[start : start + 64]
            texts = [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}],
                                                   add_generation_prompt=True, tokenize=False)
                     if chat else r["prompt"] for r in chunk]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                out = model.generate(**enc, do_sample=False, max_new_tokens=args.tokens,
                                     pad_token_id=tokenizer.pad_token_id)
            texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:],
                                           skip_special_tokens=True)
            hits += sum(verifier.score(t, r["answer"]).correct for t, r in zip(texts, chunk))
        return hits / len(rows)

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.times = [time.perf_counter()]

        def on_step_end(self, *_, **__):
            self.times.append(time.perf_counter())

    before = held_out()
    prompts = [[{"role": "user", "content": p["prompt"]}] if chat else p["prompt"]
               for p in data["train"]]
    config = GRPOConfig(
        output_dir=args.out, per_device_train_batch_size=args.prompts * args.group,
        gradient_accumulation_steps=1, num_generations=args.group,
        max_completion_length=args.tokens, learning_rate=args.lr, lr_scheduler_type="constant",
        warmup_steps=0, max_steps=args.updates, beta=0.0, epsilon=0.2, num_iterations=1,
        loss_type="grpo", scale_rewards="group", temperature=1.0, top_p=1.0, max_grad_norm=1.0,
        weight_decay=0.0, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
        seed=0, disable_dropout=True, shuffle_dataset=True, **precision,
    )
    timer = StepTimes()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config,
                          train_dataset=Dataset.from_dict({"prompt": prompts}),
                          processing_class=tokenizer, callbacks=[timer])
    start = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - start
    after = held_out()
    steps = [b - a for a, b in zip(timer.times[1:], timer.times[2:])]
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"update_s": statistics.median(steps), "train_s": train_s, "tokens_per_s": None,
            "rewards": rewards,
            "before": before, "after": after, "bf16": config.bf16,
            "gradient_checkpointing": config.gradient_checkpointing,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# --- rllib_llm ----------------------------------------------------------------------------------
def run_ours(args: argparse.Namespace) -> dict:
    import resource

    import ray
    import torch

    from rllib_llm.outputs.metric_names import GENERATE_TOKENS_PER_S, REWARD

    torch.set_num_threads(1)
    data = json.loads(Path(args.data).read_text())
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = grpo_config(args, runners=args.runners, seed=0, **json.loads(args.settings))
    algo = config.build_algo()
    n = len(data["test"])
    before = algo.evaluate_accuracy(num_problems=n, temperature=0)["pass@1"]
    seconds, tokens_per_s, phases, rewards = [], [], [], []
    start = time.perf_counter()
    for _ in range(args.updates):
        t = time.perf_counter()
        result = algo.train()
        seconds.append(time.perf_counter() - t)
        tokens_per_s.append(result["env_runners"][GENERATE_TOKENS_PER_S.split("/", 1)[1]])
        phases.append((result["timers"]["sample"], result["timers"]["learn"]))
        rewards.append(float(result["env_runners"][REWARD.split("/", 1)[1]]))
    train_s = time.perf_counter() - start
    after = algo.evaluate_accuracy(num_problems=n, temperature=0)["pass@1"]
    runners = algo.env_runner_group.foreach_env_runner(
        lambda r: __import__("resource").getrusage(0).ru_maxrss / 1024, local_env_runner=False)
    learners = [r.get() for r in algo.learner_group.foreach_learner(
        lambda learner: __import__("resource").getrusage(0).ru_maxrss / 1024).result_or_errors] \
        if config.num_learners else []
    algo.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 + sum(runners) + sum(learners)
    return {"update_s": statistics.median(seconds[1:]), "train_s": train_s,
            "tokens_per_s": statistics.median(tokens_per_s[1:]), "before": before,
            "sample_s": statistics.median(p[0] for p in phases[1:]),
            "learn_s": statistics.median(p[1] for p in phases[1:]),
            "after": after, "peak_rss_mib": rss, "rewards": rewards}


# --- the driver ---------------------------------------------------------------------------------
def write_data(args: argparse.Namespace, tmp: Path) -> None:
    """The training prompts and the held-out problems, as files both sides read."""
    from rllib_llm.envs.datasets import load_problems

    # rllib_llm reads the same splits itself (dataset "arithmetic": train, and test held out).
    train = load_problems(args.dataset, split="train")
    test = load_problems(args.dataset, split="test")[: args.eval_problems]  # ours: the first too
    (tmp / "data.json").write_text(json.dumps({"train": train, "test": test}))


def child(python: str, side: str, args: argparse.Namespace, tmp: Path, **extra) -> dict:
    cmd = [python, __file__, "--child", side, "--path", args.path, "--data",
           str(tmp / "data.json"), "--out", str(tmp / side), "--prompts", str(args.prompts),
           "--group", str(args.group), "--tokens", str(args.tokens), "--updates",
           str(args.updates), "--lr", str(args.lr), "--dataset", args.dataset,
           *(["--prompt-length", str(args.prompt_length)] if args.prompt_length else []),
           *[x for k, v in extra.items() for x in ((f"--{k}",) if v is True
                                                   else (f"--{k}", str(v)))]]
    return run_child(cmd)


# Ours, one lever more per row (`--levers`): each row's settings on top of the row above's.
LEVERS = (
    ("RLlib's Adam, no token budget", {"fused_optimizer": False,
                                       "max_tokens_per_micro_batch": None}),
    ("+ token budget (default 4096)", {"max_tokens_per_micro_batch": 4096}),
    ("+ fused Adam (default)", {"fused_optimizer": True}),
    ("+ use_fused_kernels", {"use_fused_kernels": True}),
    ("+ autocast_dtype=bfloat16", {"autocast_dtype": "bfloat16"}),
    ("+ gradient_checkpointing", {"gradient_checkpointing": True}),
)


def lever_rows(args: argparse.Namespace, tmp: Path) -> list[tuple[str, dict]]:
    rows, settings = [], {}
    for label, more in LEVERS:
        settings = {**settings, **more}
        rows.append((f"rllib_llm, {label}",
                     child(sys.executable, "ours", args, tmp, settings=json.dumps(settings))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trl-python", help="the python of an environment with TRL installed")
    parser.add_argument("--model", choices=("embedded", "smollm2"), default="embedded")
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--eval-problems", type=int, default=500,
                        help="held-out problems scored before and after (the first N)")
    parser.add_argument("--dtype", default="float32")  # smollm2_path's export dtype
    parser.add_argument("--dataset", default="arithmetic",
                        help="the built-in dataset both sides train and score on")
    parser.add_argument("--prompt-length", type=int, help="ours: prompt_length (None: default)")
    parser.add_argument("--levers", action="store_true",
                        help="ours once per row of LEVERS (local mode) instead of local and remote")
    parser.add_argument("--roll-advantages", action="store_true",
                        help="also ours (local) with our default advantages: whitened over the "
                             "batch's tokens and clipped at 2, as ROLL's")
    parser.add_argument("--trl-fp32", action="store_true",
                        help="also TRL with bf16 and gradient checkpointing off")
    parser.add_argument("--child", choices=("trl", "ours"), help=argparse.SUPPRESS)
    for name in ("path", "data", "out"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    parser.add_argument("--runners", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--settings", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--fp32", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_trl(args) if args.child == "trl" else run_ours(args)))
        return
    notes: list[str] = []
    args.path = model_path(args)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        write_data(args, tmp)
        if args.levers:
            rows = lever_rows(args, tmp)
        else:
            rows = [("rllib_llm, local", child(sys.executable, "ours", args, tmp, runners=0)),
                    ("rllib_llm, 1 remote env runner",
                     child(sys.executable, "ours", args, tmp, runners=1))]
            if args.roll_advantages:
                rows.append(("rllib_llm, local, advantages whitened and clipped at 2 (ROLL's, "
                             "our defaults)", child(sys.executable, "ours", args, tmp, runners=0,
                                                    settings=json.dumps(ROLL_ADVANTAGES))))
        trl = None
        if args.trl_python:
            if args.trl_fp32:
                rows.append(("TRL GRPOTrainer, bf16 and gradient checkpointing off",
                             child(args.trl_python, "trl", args, tmp, fp32=True)))
            rows.append(("TRL GRPOTrainer (its defaults: bf16, gradient checkpointing)",
                         child(args.trl_python, "trl", args, tmp)))
            trl = rows[-1][1] if "error" not in rows[-1][1] else None
        else:
            notes.append("TRL skipped: pass --trl-python")
    print(f"{args.model} on {args.dataset}, {args.prompts} prompts x {args.group} responses x "
          f"{args.tokens} tokens, lr {args.lr}, {args.updates} updates, one torch thread per "
          "process; "
          f"{platform.machine()}, {platform.system()}\n")
    print("| run | s / update | vs TRL | sample / learn s | generated tokens/s | peak RSS MiB "
          "| held-out before -> after | points per training minute |")
    print("|---|---|---|---|---|---|---|---|")
    for label, r in rows:
        if "error" in r:
            print(f"| {label} | {r['error']} |||||||")
            continue
        ratio = f"{r['update_s'] / trl['update_s']:.2f}x" if trl else "-"
        tps = f"{r['tokens_per_s']:.0f}" if r["tokens_per_s"] else "-"
        gain = (r["after"] - r["before"]) * 100 / (r["train_s"] / 60)
        split = f"{r['sample_s']:.3f} / {r['learn_s']:.3f}" if "learn_s" in r else "-"
        print(f"| {label} | {r['update_s']:.3f} | {ratio} | {split} | {tps} "
              f"| {r['peak_rss_mib']:.0f} "
              f"| {r['before']:.1%} -> {r['after']:.1%} | {gain:+.1f} |")
    print("\nThe batches' mean reward, update by update (what each side had to learn from):")
    for label, r in rows:
        if "rewards" in r:
            print(f"- {label}: {', '.join(f'{x:.3f}' for x in r['rewards'])}")
    for note in notes:
        print(f"\n{note}")


if __name__ == "__main__":
    main()
