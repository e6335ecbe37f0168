"""How a tiny checkpoint answers "a+b=" / "a*b=" problems, measured with Hugging Face
`generate`: exact-match accuracy, and for `embedded_tool` its tool use step by step.

The build script (`scripts/pretrain_embedded.py`) calibrates the embedded checkpoints with
these, the tool-use benchmark (`benchmarks/learning/tool_use.py`) follows them through RL, and
`tests/models/test_tool_model.py` checks the shipped checkpoint's. Problems come in as
`{"prompt", "answer"}` dicts (the env layer's `arithmetic_problems`): the models layer may not
import the envs.
"""

from __future__ import annotations

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from rllib_llm.models import encode_prompt
from rllib_llm.models.tool_transcripts import TOOL, tool_call_text, tool_transcript


@torch.inference_mode()
def continue_prefixes(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    prefixes: list[list[int]],
    *,
    do_sample: bool,
    max_new_tokens: int,
) -> list[tuple[str, bool]]:
    """`model.generate` after each prefix: `(text up to EOS, whether EOS came)` per prefix.

    Uses Hugging Face `generate` (not the rollout engine) so the models layer stays below rollout;
    sampling is at temperature 1 with no top-k/top-p.
    """
    model.eval()
    L = max(len(p) for p in prefixes)
    input_ids = torch.tensor([[tokenizer.pad_token_id] * (L - len(p)) + p for p in prefixes])
    n_pad = torch.tensor([L - len(p) for p in prefixes])  # (N,)
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
    eos = tokenizer.eos_token_id
    return [(tokenizer.decode(row[: row.index(eos)] if eos in row else row), eos in row)
            for row in out.tolist()]


def accuracy(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[dict[str, str]],
    *,
    do_sample: bool,
    seed: int = 0,
    max_new_tokens: int = 5,
) -> dict[str, float]:
    """Exact-match accuracy and well-formed rate ("digits then EOS") with `model.generate`."""
    torch.manual_seed(seed)
    prompts = [encode_prompt(tokenizer, p["prompt"]) for p in problems]
    outs = continue_prefixes(model, tokenizer, prompts, do_sample=do_sample,
                     max_new_tokens=max_new_tokens)
    correct = well_formed = 0
    for (text, ended), problem in zip(outs, problems, strict=True):
        well_formed += ended and text.isdigit()
        correct += ended and text == problem["answer"]
    return {"accuracy": correct / len(problems), "well_formed": well_formed / len(problems)}


def tool_use_rates(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[dict[str, str]],
    *,
    do_sample: bool,
    seed: int = 0,
) -> dict[str, float]:
    """How a tool-use checkpoint behaves on "a*b=" problems, step by step (no tool runs here):

    - `tool_rate`: the first turn opens a tool call; `call_ok`: of those, the call is exactly
      `<python>print(a*b)</python>`;
    - `copy_ok`: given the right call and output, the answer copies the output, then EOS;
    - `direct_ok`: of the first turns that answer at once, the answer is right;
    - `accuracy`: what "math_tool" would score, `tool_rate * call_ok * copy_ok +
      (1 - tool_rate) * direct_ok`.
    """
    torch.manual_seed(seed)
    prompts = [encode_prompt(tokenizer, p["prompt"]) for p in problems]
    calls = [tool_call_text(p["prompt"]) for p in problems]
    firsts = continue_prefixes(model, tokenizer, prompts, do_sample=do_sample,
                       max_new_tokens=max(len(c) for c in calls) + 2)
    tool = [text.startswith(f"<{TOOL}>") for text, _ in firsts]
    call_ok = [text.startswith(c) for (text, _), c in zip(firsts, calls, strict=True)]
    direct_ok = [ended and text == p["answer"]
                 for (text, ended), p in zip(firsts, problems, strict=True)]
    # The right transcript up to the tool's output: up to its last env token (mask 0).
    transcripts = [tool_transcript(tokenizer, p, use_tool=True) for p in problems]
    cuts = [len(mask) - mask[::-1].index(0) for _, mask in transcripts]
    copies = continue_prefixes(model, tokenizer, [ids[:c] for (ids, _), c in zip(transcripts, cuts,
                                                                          strict=True)],
                       do_sample=do_sample,
                       max_new_tokens=max(len(ids) - c for (ids, _), c in zip(transcripts, cuts,
                                                                               strict=True)) + 1)
    copy_ok = [ended and text == p["answer"]
               for (text, ended), p in zip(copies, problems, strict=True)]
    n, n_tool = len(problems), max(sum(tool), 1)
    rates = {
        "tool_rate": sum(tool) / n,
        "call_ok": sum(t and c for t, c in zip(tool, call_ok, strict=True)) / n_tool,
        "copy_ok": sum(copy_ok) / n,
        "direct_ok": sum(not t and d for t, d in zip(tool, direct_ok, strict=True))
        / max(n - sum(tool), 1),
    }
    rates["accuracy"] = (rates["tool_rate"] * rates["call_ok"] * rates["copy_ok"]
                         + (1 - rates["tool_rate"]) * rates["direct_ok"])
    return {k: round(v, 4) for k, v in rates.items()}
