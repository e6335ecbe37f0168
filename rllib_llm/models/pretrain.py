"""Build the embedded default: a short, seeded SFT of a fresh tiny Llama on arithmetic.

    python -m rllib_llm.models.pretrain --out rllib_llm/models/embedded --steps N --seed 0

The checkpoint is the START of the RL demo, so it is deliberately under-trained: it answers in
the right format (digits, then EOS) almost always, but is right only some of the time, leaving
room for RL to show a clear gain. `--steps` is the calibration knob; the shipped value and the
accuracies it gives are recorded in `embedded/README.md`.

The loss covers only the answer and EOS tokens: the prompt is given, not predicted, exactly as in
RL where the policy acts only after the prompt.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from rllib_llm.envs.arithmetic import arithmetic_problems
from rllib_llm.models import encode_prompt
from rllib_llm.models.char_tokenizer import build_char_tokenizer
from rllib_llm.models.tiny_llama import tiny_llama_config

IGNORE_INDEX = -100  # label value torch's cross-entropy skips


def sft_examples(
    tokenizer: PreTrainedTokenizerBase, problems: list[dict[str, str]]
) -> list[tuple[list[int], int]]:
    """Return `(prompt + answer + EOS ids, prompt length)` per problem."""
    examples = []
    for p in problems:
        prompt = encode_prompt(tokenizer, p["prompt"])
        answer = tokenizer(p["answer"], add_special_tokens=False)["input_ids"]
        examples.append((prompt + answer + [tokenizer.eos_token_id], len(prompt)))
    return examples


def collate(
    examples: list[tuple[list[int], int]], pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad into `(input_ids, attention_mask, labels)`, each `(B, L)`.

    Labels are the input ids on answer and EOS positions and IGNORE_INDEX elsewhere; the model
    shifts them by one itself.
    """
    L = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), L), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), L), dtype=torch.long)
    labels = torch.full((len(examples), L), IGNORE_INDEX, dtype=torch.long)
    for i, (ids, n_prompt) in enumerate(examples):
        row = torch.tensor(ids, dtype=torch.long)
        input_ids[i, : len(ids)] = row
        attention_mask[i, : len(ids)] = 1
        labels[i, n_prompt : len(ids)] = row[n_prompt:]
    return input_ids, attention_mask, labels


def train(
    model: LlamaForCausalLM,
    examples: list[tuple[list[int], int]],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    warmup: int,
    seed: int,
    pad_token_id: int,
    log_every: int = 0,
    on_log: Callable[[int], None] | None = None,
) -> list[float]:
    """AdamW on shuffled mini-batches for `steps` steps; return the per-step losses.

    Every `log_every` steps it prints the mean loss and calls `on_log(step)` (e.g. an evaluation).

    Linear warmup then a constant learning rate: the checkpoint stops mid-learning on purpose, and
    a decay to zero would make the stopping point matter less predictably.
    """
    rng = random.Random(seed)
    order: list[int] = []
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / max(warmup, 1))
    )
    model.train()
    losses = []
    for step in range(steps):
        if len(order) < batch_size:  # reshuffle once per epoch
            order += rng.sample(range(len(examples)), len(examples))
        batch, order = order[:batch_size], order[batch_size:]
        input_ids, attention_mask, labels = collate([examples[i] for i in batch], pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            mean_loss = sum(losses[-log_every:]) / log_every
            print(f"step {step + 1:5d}  loss {mean_loss:.4f}", flush=True)
            if on_log is not None:
                on_log(step + 1)
                model.train()
    return losses


@torch.inference_mode()
def accuracy(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[dict[str, str]],
    *,
    do_sample: bool,
    seed: int = 0,
    max_new_tokens: int = 5,
) -> dict[str, float]:
    """Exact-match accuracy and well-formed rate ("digits then EOS") with `model.generate`.

    Uses Hugging Face `generate` (not the rollout engine) so the models layer stays below rollout;
    sampling is at temperature 1 with no top-k/top-p.
    """
    model.eval()
    torch.manual_seed(seed)
    prompts = [encode_prompt(tokenizer, p["prompt"]) for p in problems]
    L = max(len(p) for p in prompts)
    input_ids = torch.tensor([[tokenizer.pad_token_id] * (L - len(p)) + p for p in prompts])
    n_pad = torch.tensor([L - len(p) for p in prompts])  # (N,)
    attention_mask = torch.arange(L)[None, :] >= n_pad[:, None]  # (N, L), left padding
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask.long(),
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        temperature=1.0,
        top_k=None,
        top_p=None,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )[:, L:]  # (N, <= max_new_tokens)
    correct = well_formed = 0
    for row, problem in zip(out.tolist(), problems, strict=True):
        if tokenizer.eos_token_id not in row:
            continue
        text = tokenizer.decode(row[: row.index(tokenizer.eos_token_id)])
        well_formed += text.isdigit()
        correct += text == problem["answer"]
    return {"accuracy": correct / len(problems), "well_formed": well_formed / len(problems)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the checkpoint to")
    parser.add_argument(
        "--steps", type=int, default=650,
        help="SFT optimizer steps: the calibration knob (see embedded/README.md)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--intermediate-size", type=int, default=512)
    parser.add_argument(
        "--tie-embeddings", action=argparse.BooleanOptionalAction, default=True,
        help="share the input embedding with the LM head",
    )
    parser.add_argument("--eval-every", type=int, default=0, help="also print test accuracy")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.steps < 1:
        raise ValueError(f"--steps={args.steps} must be >= 1")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tokenizer = build_char_tokenizer()
    config = tiny_llama_config(
        len(tokenizer),
        hidden_size=args.hidden_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.intermediate_size,
        tie_word_embeddings=args.tie_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tiny Llama: {n_params:,} parameters", flush=True)
    examples = sft_examples(tokenizer, arithmetic_problems("train"))
    test = arithmetic_problems("test")

    def report(step: int) -> None:
        greedy = accuracy(model, tokenizer, test, do_sample=False)
        sampled = accuracy(model, tokenizer, test, do_sample=True, seed=args.seed)
        print(f"  [{step}] test greedy {greedy}  sampled {sampled}", flush=True)

    t0 = time.perf_counter()
    train(
        model, examples, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
        warmup=args.warmup, seed=args.seed, pad_token_id=tokenizer.pad_token_id,
        log_every=args.eval_every or max(args.steps // 10, 1),
        on_log=report if args.eval_every else None,
    )
    train_s = time.perf_counter() - t0

    greedy = accuracy(model, tokenizer, test, do_sample=False)
    sampled = accuracy(model, tokenizer, test, do_sample=True, seed=args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"trained {args.steps} steps in {train_s:.1f}s; saved to {out}")
    print(f"test greedy: {greedy}")
    print(f"test sampled (T=1): {sampled}")


if __name__ == "__main__":
    main()
