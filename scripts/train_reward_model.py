"""Build the embedded reward model (`rllib_llm/models/embedded_reward`): a sequence classifier
that tells the embedded model's correct answers from its wrong ones.

    python scripts/train_reward_model.py --out /tmp/embedded_reward_stage1 --seed 0 \
        --lr 5e-4 --epochs 14 --init embedded_teacher
    python scripts/train_reward_model.py --out rllib_llm/models/embedded_reward --seed 1 \
        --lr 3e-4 --epochs 8 --init /tmp/embedded_reward_stage1 --teacher-samples 1

(the two stages the shipped checkpoint was built with: rllib_llm/models/embedded_reward/README.md)

A build script, like pretrain_embedded.py (it reads the env layer's problems and verifier):

1. data: the shipped `embedded` model samples `--samples` responses (temperature 1, at most 6
   tokens: the embedded recipe's response_length) to every problem of the TRAIN split
   (`--teacher-samples` more from `embedded_teacher`, a better policy's answers); the
   verifier (`MathVerifier`, the math_verify env's default) labels each correct (1) or not (0).
   The classifier reads `prompt + response` as the reward workers feed it (the response decoded
   up to EOS, special tokens skipped).
2. model: `LlamaForSequenceClassification` with 2 labels, its body initialised from `--init`
   (a causal LM of the embedded architecture and char tokenizer; its head fresh) or a classifier
   this script wrote (trained on); trained with cross-entropy,
   AdamW, `--epochs` passes over the data in batches of 128.
3. held out: the same sampling on the TEST split (never trained on) gives the classification
   accuracy the checkpoint's README records, with the accuracy of always answering "wrong".
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch
from rllib_llm.envs.arithmetic import arithmetic_problems
from rllib_llm.envs.verifier import MathVerifier
from transformers import LlamaForSequenceClassification

from rllib_llm.models import encode_prompt, load_model, load_tokenizer, resolve_path

MAX_NEW_TOKENS = 6


@torch.inference_mode()
def sample_responses(model, tokenizer, problems: list[dict[str, str]], samples: int,
                     batch: int = 512) -> list[tuple[str, str, int]]:
    """(prompt, response text, verifier label) for `samples` responses to each problem."""
    verifier = MathVerifier()
    rows = []
    eos = tokenizer.eos_token_id
    for _ in range(samples):
        for start in range(0, len(problems), batch):
            chunk = problems[start:start + batch]
            prefixes = [encode_prompt(tokenizer, p["prompt"]) for p in chunk]
            width = max(len(p) for p in prefixes)
            ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prefixes])
            mask = (torch.arange(width)[None, :] >= torch.tensor(
                [width - len(p) for p in prefixes])[:, None]).long()
            out = model.generate(input_ids=ids, attention_mask=mask,
                                 max_new_tokens=MAX_NEW_TOKENS, do_sample=True, temperature=1.0,
                                 top_k=None, top_p=None, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=eos)[:, width:].tolist()
            texts = [tokenizer.decode(r[:r.index(eos)] if eos in r else r,
                                      skip_special_tokens=True) for r in out]
            verdicts = verifier.score_batch(texts, [p["answer"] for p in chunk])
            rows += [(p["prompt"], t, int(v.correct)) for p, t, v in zip(chunk, texts, verdicts)]
    verifier.close()
    return rows


def batches(rows, tokenizer, size: int, shuffle: random.Random | None):
    """(input_ids, attention_mask, labels) batches, right-padded."""
    order = list(range(len(rows)))
    if shuffle is not None:
        shuffle.shuffle(order)
    for start in range(0, len(order), size):
        chunk = [rows[i] for i in order[start:start + size]]
        encoded = [tokenizer(p + r)["input_ids"] for p, r, _ in chunk]
        width = max(len(e) for e in encoded)
        ids = torch.tensor([e + [tokenizer.pad_token_id] * (width - len(e)) for e in encoded])
        mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in encoded])
        yield ids, mask, torch.tensor([label for _, _, label in chunk])


@torch.inference_mode()
def accuracy(model, tokenizer, rows) -> float:
    model.eval()
    right = 0
    for ids, mask, labels in batches(rows, tokenizer, 512, None):
        right += int((model(input_ids=ids, attention_mask=mask).logits.argmax(-1) == labels).sum())
    return right / len(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=2, help="responses per train problem")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--init", default="embedded_teacher",
                        help="the checkpoint the classifier starts from: a causal LM (its body; "
                             "the head fresh) or a classifier of this script (to train on)")
    parser.add_argument("--teacher-samples", type=int, default=0,
                        help="responses per train problem sampled from embedded_teacher too "
                             "(more correct answers, and answers of a better policy)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    tokenizer = load_tokenizer("embedded")
    policy = load_model("embedded")
    train = sample_responses(policy, tokenizer, arithmetic_problems("train"), args.samples)
    if args.teacher_samples:
        train += sample_responses(load_model("embedded_teacher"), tokenizer,
                                  arithmetic_problems("train"), args.teacher_samples)
    test = sample_responses(policy, tokenizer, arithmetic_problems("test"), args.samples)
    positives = sum(label for *_, label in train) / len(train)
    test_positives = sum(label for *_, label in test) / len(test)
    print(f"data: {len(train)} train responses ({positives:.1%} correct), {len(test)} held-out "
          f"test responses ({test_positives:.1%} correct), {time.perf_counter() - start:.0f} s",
          flush=True)
    torch.manual_seed(args.seed)
    model = LlamaForSequenceClassification.from_pretrained(
        resolve_path(args.init), num_labels=2, pad_token_id=tokenizer.pad_token_id)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    shuffle = random.Random(args.seed)
    steps = args.epochs * -(-len(train) // 128)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 50) * max(0.0, 1 - s / steps))
    for epoch in range(args.epochs):
        model.train()
        for ids, mask, labels in batches(train, tokenizer, 128, shuffle):
            loss = torch.nn.functional.cross_entropy(
                model(input_ids=ids, attention_mask=mask).logits, labels)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
        print(f"epoch {epoch + 1}: train accuracy {accuracy(model, tokenizer, train):.4f}, "
              f"held-out accuracy {accuracy(model, tokenizer, test):.4f} "
              f"(always 'wrong': {1 - test_positives:.4f}), {time.perf_counter() - start:.0f} s",
              flush=True)
    out = Path(args.out)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
