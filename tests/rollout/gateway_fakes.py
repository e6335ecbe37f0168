"""What the gateway tests share: a BPE tokenizer with a chat template whose re-tokenization of
sampled text differs from the sampled ids, and an engine answering from a script."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from rllib_llm.rollout.engine import Response

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# ChatML with tools in a system message and Hermes tool calls, as Qwen's template renders them.
CHATML_TOOLS = (
    "{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>"
    "{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def bpe_chat_tokenizer(template: str = CHATML) -> PreTrainedTokenizerFast:
    """Characters, one merge ("a" + "b" -> "ab"), ChatML's markers, a chat template."""
    specials = ["<pad>", "<|im_end|>", "<|im_start|>"]
    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {t: i for i, t in enumerate([*specials, *chars, "ab"])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")]))
    tok.decoder = decoders.Fuse()
    out = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<|im_end|>",
                                  additional_special_tokens=["<|im_start|>"])
    out.chat_template = template
    return out


class ScriptedEngine:
    """Answers each prompt with the next scripted (ids, log-probs[, finish reason]), recording
    the prompts and sampling settings it was given."""

    weight_version = 7

    def __init__(self, script):
        self.script, self.prompts, self.samplings = list(script), [], []

    def generate(self, prompt_ids, n, sampling):
        out = []
        for prompt in prompt_ids:
            self.prompts.append(list(prompt))
            self.samplings.append(sampling)
            ids, logps, *finish = self.script.pop(0)
            out.append([Response(list(ids), list(logps), (finish or ["stop"])[0])
                        for _ in range(n)])
        return out
