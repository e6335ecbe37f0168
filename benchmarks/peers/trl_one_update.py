"""One GRPO update, rllib_llm's and TRL's, on the same batch from the same weights, side by side.

    python benchmarks/peers/trl_one_update.py --trl-python /path/to/trl-venv/bin/python \
        [--model smollm2 --prompts 8 --group 8 --tokens 32 --lr 1e-5 --dataset arithmetic]

rllib_llm samples one batch (its env runner, in one process) and updates on it; its prompts,
responses, sampler log-probs and rewards go to a file. TRL's GRPOTrainer then trains one step on
exactly that batch: a `rollout_func` (TRL's hook for custom generation) hands it our prompt and
response token ids instead of generating, and its reward function is rllib_llm's verifier (as in
trl_comparison.py). Both start from the model on disk, in float32 (TRL's bf16 and gradient
checkpointing off), with GRPO's settings of trl_comparison.py: group-normalised advantages,
per-sequence token means, clip 0.2, no KL, one optimizer step, Adam at a constant --lr, gradient
clipping at 1.0.

Reported per side: the rewards' mean, the loss, the gradient norm before clipping and the
weight change's norm; how many groups carry signal (rewards not all equal), and that TRL trained
on our responses; between the sides, the cosine of the two weight changes and the norm of their
difference. Adam's first step moves each
weight by about lr x sign(gradient): the same batch and loss give the same change whatever the
gradient's scale, so a cosine near 1 says the two updates are the same update.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import DEFAULT_SMOLLM2_DIR, model_path, run_child  # noqa: E402
from trl_comparison import ROLL_ADVANTAGES, grpo_config, our_verifier  # noqa: E402


# --- rllib_llm: sample the batch, update on it ---------------------------------------------------
def run_ours(args: argparse.Namespace) -> dict:
    import ray
    import torch
    from rllib_llm.envs.token_mdp import ANSWER

    from rllib_llm.learner.packing import episode_tokens

    torch.set_num_threads(1)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    config = grpo_config(args, runners=0, seed=args.seed,
                         **(ROLL_ADVANTAGES if args.roll_advantages else {}))
    algo = config.build_algo()
    episodes = algo.env_runner_group.local_env_runner.sample()
    batch = []
    for episode in episodes:
        tokens = episode_tokens(episode)
        batch.append({"group": str(tokens.group_id), "answer": episode.get_infos()[0][ANSWER],
                      "prompt_ids": tokens.prompt_ids.tolist(),
                      "response_ids": tokens.response_ids.tolist(),
                      "logp": tokens.behaviour_logp.tolist(), "reward": tokens.score})
    Path(args.batch).write_text(json.dumps(batch))
    model = algo.learner_group.local_learner.module["default_policy"].model
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    results = algo.update_learners(episodes)
    results = (results[0] if isinstance(results, list) else results)["default_policy"]
    delta = {k: (v.detach() - before[k]) for k, v in model.state_dict().items()}
    torch.save(delta, args.delta)
    algo.stop()
    return {"loss": _value(results["loss"]), "grad_norm": _value(results["grad_norm"]),
            "rewards": [row["reward"] for row in batch]}


def _value(stat) -> float:
    return float(stat.peek() if hasattr(stat, "peek") else stat)


# --- TRL: one step on that batch --------------------------------------------------------------
def run_trl(args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    batch = json.loads(Path(args.batch).read_text())
    groups: dict[str, list[dict]] = {}
    for row in batch:
        groups.setdefault(row["group"], []).append(row)
    verifier = our_verifier()

    def rollout(prompts, trainer):
        """Our responses in place of TRL's generation, each group's in our order."""
        taken = {g: iter(rows) for g, rows in groups.items()}
        rows = [next(taken[p]) for p in prompts]
        return {"prompt_ids": [r["prompt_ids"] for r in rows],
                "completion_ids": [r["response_ids"] for r in rows],
                "logprobs": [r["logp"] for r in rows]}

    def reward(prompts, completions, answer, **kwargs):
        return [verifier.score(c, a).score for c, a in zip(completions, answer)]

    class Captured(GRPOTrainer):
        """GRPOTrainer, keeping what its loss saw (its own advantages) and its loss."""

        seen: dict = {}

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            ids, mask = inputs["completion_ids"], inputs["completion_mask"]
            self.seen.update(advantages=inputs["advantages"].tolist(),
                             responses=[row[:int(n)].tolist() for row, n in zip(ids, mask.sum(1))],
                             loss=float(loss.detach()))
            return loss

    tokenizer = AutoTokenizer.from_pretrained(args.path)
    model = AutoModelForCausalLM.from_pretrained(args.path, dtype=torch.float32)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    config = GRPOConfig(
        output_dir=args.out, per_device_train_batch_size=len(batch),
        gradient_accumulation_steps=1, num_generations=args.group,
        max_completion_length=args.tokens, learning_rate=args.lr, lr_scheduler_type="constant",
        warmup_steps=0, max_steps=1, beta=0.0, epsilon=0.2, num_iterations=1,
        loss_type="grpo", scale_rewards="group", temperature=1.0, top_p=1.0, max_grad_norm=1.0,
        weight_decay=0.0, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
        seed=0, disable_dropout=True, bf16=False, gradient_checkpointing=False)
    data = {"prompt": list(groups), "answer": [rows[0]["answer"] for rows in groups.values()]}
    trainer = Captured(model=model, reward_funcs=reward, args=config, processing_class=tokenizer,
                       train_dataset=Dataset.from_dict(data), rollout_func=rollout)
    trainer.train()
    logged = next(h for h in trainer.state.log_history if "grad_norm" in h)
    delta = {k: (v.detach() - before[k]) for k, v in model.state_dict().items()}
    torch.save(delta, args.delta)
    return {"loss": trainer.seen["loss"], "grad_norm": float(logged["grad_norm"]),
            "reward_mean": float(logged.get("reward", float("nan"))),
            "responses": trainer.seen["responses"], "advantages": trainer.seen["advantages"]}


# --- the driver ---------------------------------------------------------------------------------
def compare(tmp: Path, ours: dict, trl: dict, batch: list[dict]) -> dict:
    import torch

    d_ours, d_trl = torch.load(tmp / "ours.pt"), torch.load(tmp / "trl.pt")
    names = sorted(set(d_ours) & set(d_trl))
    a = torch.cat([d_ours[k].flatten().double() for k in names])
    b = torch.cat([d_trl[k].flatten().double() for k in names])
    rewards = {}
    for row in batch:
        rewards.setdefault(row["group"], []).append(row["reward"])
    return {"ours_change": float(a.norm()), "trl_change": float(b.norm()),
            "cosine": float(a @ b / (a.norm() * b.norm())) if a.norm() and b.norm() else None,
            "difference": float((a - b).norm()), "tensors": len(names),
            "groups_with_signal": sum(len(set(r)) > 1 for r in rewards.values()),
            "groups": len(rewards)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trl-python", help="the python of an environment with TRL installed")
    parser.add_argument("--model", choices=("embedded", "smollm2"), default="smollm2")
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR)
    parser.add_argument("--dtype", default="float32")  # smollm2_path's export dtype
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", default="arithmetic")
    parser.add_argument("--prompt-length", type=int)
    parser.add_argument("--roll-advantages", action="store_true",
                        help="ours with our default advantages (whitened over the batch's "
                             "tokens, clipped at 2: ROLL's) instead of TRL's GRPO")
    parser.add_argument("--child", choices=("ours", "trl"), help=argparse.SUPPRESS)
    for name in ("path", "batch", "delta", "out"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_ours(args) if args.child == "ours" else run_trl(args)))
        return
    if not args.trl_python:
        sys.exit("trl_one_update: pass --trl-python (TRL's environment; see trl_comparison.py)")
    args.path = model_path(args)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        common = [__file__, "--path", args.path, "--batch", str(tmp / "batch.json"),
                  "--prompts", str(args.prompts), "--group", str(args.group),
                  "--tokens", str(args.tokens), "--lr", str(args.lr), "--seed", str(args.seed),
                  "--dataset", args.dataset, "--out", str(tmp / "trl_out"),
                  *(["--roll-advantages"] if args.roll_advantages else []),
                  *(["--prompt-length", str(args.prompt_length)] if args.prompt_length else [])]
        ours = run_child([sys.executable, *common, "--child", "ours",
                          "--delta", str(tmp / "ours.pt")])
        if "error" in ours:
            sys.exit(f"rllib_llm's side failed: {ours['error']}")
        trl = run_child([args.trl_python, *common, "--child", "trl",
                         "--delta", str(tmp / "trl.pt")])
        if "error" in trl:
            sys.exit(f"TRL's side failed: {trl['error']}")
        batch = json.loads((tmp / "batch.json").read_text())
        report(args, ours, trl, batch, compare(tmp, ours, trl, batch))


def report(args, ours: dict, trl: dict, batch: list[dict], c: dict) -> None:
    import statistics

    scores = [row["reward"] for row in batch]
    ours_responses = {tuple(row["response_ids"]) for row in batch}
    print(f"{args.model} on {args.dataset}: {args.prompts} prompts x {args.group} responses x "
          f"{args.tokens} tokens, lr {args.lr}, seed {args.seed}; one update, float32\n")
    print("| side | reward mean | loss | gradient norm (before clipping) | weight change norm |")
    print("|---|---|---|---|---|")
    print(f"| rllib_llm | {statistics.mean(scores):.3f} | {ours['loss']:.5f} | "
          f"{ours['grad_norm']:.4f} | {c['ours_change']:.5f} |")
    print(f"| TRL GRPOTrainer | {trl['reward_mean']:.3f} | {trl['loss']:.5f} | "
          f"{trl['grad_norm']:.4f} | {c['trl_change']:.5f} |")
    print(f"\ngroups whose rewards differ (carry a gradient): {c['groups_with_signal']} of "
          f"{c['groups']}; responses TRL trained on that we sampled: "
          f"{sum(tuple(r) in ours_responses for r in trl['responses'])} of {len(batch)}; "
          f"TRL's advantages: {sum(a != 0 for a in trl['advantages'])} non-zero")
    print(f"weight changes over {c['tensors']} tensors: cosine {c['cosine']}, |ours - TRL| "
          f"{c['difference']:.5f}")


if __name__ == "__main__":
    main()
