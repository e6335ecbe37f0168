"""Build the embedded checkpoints: a short, seeded SFT of a fresh tiny Llama.

    python scripts/pretrain_embedded.py --out rllib_llm/models/embedded --steps N --seed 0
    python scripts/pretrain_embedded.py --task tool --out rllib_llm/models/embedded_tool ...

A build script, kept out of the importable library: it reads the env layer's arithmetic problems,
and the models layer the envs use must not import them back (docs/DESIGN.md, "Layers").

`--task arithmetic` (the embedded default) teaches "a+b=" / "a-b=" answers; `--task tool`
(`embedded_tool`) teaches tool-use transcripts of multiplication problems
(`tool_transcripts`): call `<python>print(a*b)</python>`, read `<output>c</output>`, answer.

The checkpoint is the START of an RL run, so it is deliberately under-trained: it answers in
the right format almost always, but is right (or calls the tool) only some of the time, leaving
room for RL to show a clear gain. `--steps` is the calibration knob; the shipped values and the
accuracies they give are recorded in each checkpoint's README.md.

The loss covers only the tokens the policy acts on (answer, tool call, EOS): the prompt and the
tool's output are given, not predicted, exactly as in RL where those tokens are masked.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
from rllib_llm.envs.arithmetic import arithmetic_problems
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from rllib_llm.models import encode_prompt
from rllib_llm.models.char_tokenizer import build_char_tokenizer
from rllib_llm.models.checkpoint_rates import accuracy, tool_use_rates
from rllib_llm.models.sft import Example, collate
from rllib_llm.models.tiny_llama import tiny_llama_config
from rllib_llm.models.tool_transcripts import tool_transcripts

TASKS = ("arithmetic", "tool")


def sft_examples(tokenizer: PreTrainedTokenizerBase, problems: list[dict[str, str]]
                 ) -> list[Example]:
    """Return `(prompt + answer + EOS ids, loss mask)` per problem."""
    examples = []
    for p in problems:
        prompt = encode_prompt(tokenizer, p["prompt"])
        answer = [*tokenizer(p["answer"], add_special_tokens=False)["input_ids"],
                  tokenizer.eos_token_id]
        examples.append((prompt + answer, [0] * len(prompt) + [1] * len(answer)))
    return examples


def train(
    model: LlamaForCausalLM,
    examples: list[Example],
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


def task_data(task: str, tokenizer: PreTrainedTokenizerBase, *, tool_fraction: float, seed: int
              ) -> tuple[list[Example], list[dict[str, str]], Callable[..., dict[str, float]]]:
    """A task's SFT examples (its train split), test problems, and how to measure a model on
    them (`accuracy` or `tool_use_rates`)."""
    if task == "tool":
        examples = tool_transcripts(tokenizer, arithmetic_problems("train", ops="*"),
                                    tool_fraction=tool_fraction, seed=seed)
        return examples, arithmetic_problems("test", ops="*"), tool_use_rates
    return sft_examples(tokenizer, arithmetic_problems("train")), arithmetic_problems("test"), \
        accuracy


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory to write the checkpoint to")
    parser.add_argument("--task", choices=TASKS, default="arithmetic",
                        help="arithmetic: the embedded default; tool: embedded_tool")
    parser.add_argument("--tool-fraction", type=float, default=0.3,
                        help="--task tool: share of transcripts that call the tool")
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
    examples, test, measure = task_data(args.task, tokenizer, tool_fraction=args.tool_fraction,
                                        seed=args.seed)

    def evaluate() -> tuple[dict[str, float], dict[str, float]]:
        return (measure(model, tokenizer, test, do_sample=False),
                measure(model, tokenizer, test, do_sample=True, seed=args.seed))

    def report(step: int) -> None:
        greedy, sampled = evaluate()
        print(f"  [{step}] test greedy {greedy}  sampled {sampled}", flush=True)

    t0 = time.perf_counter()
    train(
        model, examples, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
        warmup=args.warmup, seed=args.seed, pad_token_id=tokenizer.pad_token_id,
        log_every=args.eval_every or max(args.steps // 10, 1),
        on_log=report if args.eval_every else None,
    )
    train_s = time.perf_counter() - t0

    greedy, sampled = evaluate()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"trained {args.steps} steps in {train_s:.1f}s; saved to {out}")
    print(f"test greedy: {greedy}")
    print(f"test sampled (T=1): {sampled}")


if __name__ == "__main__":
    main()
