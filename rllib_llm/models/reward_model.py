"""Scoring responses with a reward model: a Hugging Face sequence classifier, or a causal LM
prompted as a judge. The model side of `reward_model_name_or_path`; the Ray actors that serve it
and the weighting against the verifier live in `rllib_llm.algorithm.reward_workers`, the math
in `rllib_llm.core.reward_models`.

A classifier reads `prompt + response` (the texts joined as they are, as TRL's GRPOTrainer feeds
a reward model a non-conversational prompt and completion); a judge reads `judge_template`
filled with `{prompt}` and `{response}` and is scored from the logits of its next token:
p(yes) / (p(yes) + p(no)) of the two `judge_tokens`, each of which must be one token of the
judge's tokenizer. Rows are padded on the right and each is read at its own last token, so a
batch scores exactly what each row alone would (up to float rounding).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rllib_llm.core.reward_models import classifier_score, judge_score
from rllib_llm.models import DTYPES, load_tokenizer, resolve_checkpoint, resolve_path

REWARD_MODEL_TYPES = ("classifier", "judge")
DEFAULT_JUDGE_TEMPLATE = ("Question: {prompt}\nAnswer: {response}\n"
                          "Is the answer correct? Reply yes or no:")
DEFAULT_JUDGE_TOKENS = (" yes", " no")


def judge_token_ids(tokenizer, tokens: Sequence[str], name: str = "reward model") -> list[int]:
    """The ids of the judge's (yes, no) tokens; ValueError unless each is exactly one token."""
    if len(tokens) != 2 or tokens[0] == tokens[1]:
        raise ValueError(f"judge tokens {list(tokens)!r}: give two different strings, (yes, no)")
    ids = []
    for token in tokens:
        encoded = tokenizer(token, add_special_tokens=False)["input_ids"]
        if len(encoded) != 1 or encoded[0] == tokenizer.unk_token_id:
            raise ValueError(
                f"the judge {name}'s tokenizer encodes {token!r} as {len(encoded)} tokens "
                f"{encoded} (or as unknown); a judge is scored by the logits of ONE next token. "
                "Set reward_judge_tokens to two strings that are one token each of this "
                "tokenizer (e.g. ' yes', ' no' or 'Yes', 'No').")
        ids.append(encoded[0])
    return ids


def check_template(template: str) -> None:
    """ValueError unless `template` formats with exactly `{prompt}` and `{response}`."""
    try:
        filled = template.format(prompt="\0p", response="\0r")
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(f"reward_judge_template={template!r} does not format with only "
                         f"{{prompt}} and {{response}}: {error!r}") from None
    if "\0p" not in filled or "\0r" not in filled:
        raise ValueError(f"reward_judge_template={template!r} must contain {{prompt}} and "
                         "{response}")


class RewardScorer:
    """A reward model loaded for scoring: `score(prompts, responses)` -> one float per response.

    Args:
        name_or_path: "embedded_reward", a local checkpoint directory, or a hub id.
        model_type: "classifier" (AutoModelForSequenceClassification, 1 or 2 labels) or "judge"
            (AutoModelForCausalLM).
        batch_size: rows per forward pass.
        dtype: one of `DTYPES`.
        judge_template, judge_tokens: the judge's prompt and its (yes, no) answer tokens.
        device: where the model runs (default: the first visible GPU, else the CPU).
    """

    def __init__(self, name_or_path: str, model_type: str = "classifier", *,
                 batch_size: int = 64, dtype: str = "float32",
                 judge_template: str = DEFAULT_JUDGE_TEMPLATE,
                 judge_tokens: Sequence[str] = DEFAULT_JUDGE_TOKENS,
                 device: str | None = None) -> None:
        if model_type not in REWARD_MODEL_TYPES:
            raise ValueError(f"model_type={model_type!r} is not one of {list(REWARD_MODEL_TYPES)}")
        self.model_type = model_type
        self.batch_size = batch_size
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        setting = "RLVRConfig.reward_model_name_or_path"
        self.tokenizer = load_tokenizer(name_or_path)
        path = resolve_checkpoint(name_or_path, kind="model", setting=setting)
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

        if model_type == "judge":
            check_template(judge_template)
            self.template = judge_template
            self.judge_ids = judge_token_ids(self.tokenizer, judge_tokens, repr(name_or_path))
            model = AutoModelForCausalLM.from_pretrained(resolve_path(path), dtype=DTYPES[dtype])
        else:
            model = AutoModelForSequenceClassification.from_pretrained(
                resolve_path(path), dtype=DTYPES[dtype])
            labels = model.config.num_labels
            if labels not in (1, 2):
                raise ValueError(
                    f"{setting}={name_or_path!r} is a classifier of {labels} labels; a reward "
                    "classifier has 1 (a scalar reward) or 2 (incorrect, correct)")
            if model.config.pad_token_id is None:  # it reads each row at its last non-pad token
                model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model = model.to(self.device).eval()
        self.pad_id = self.tokenizer.pad_token_id

    def texts(self, prompts: Sequence[str], responses: Sequence[str]) -> list[str]:
        """What the model reads for each (prompt, response)."""
        if self.model_type == "judge":
            return [self.template.format(prompt=p, response=r) for p, r in zip(prompts, responses)]
        return [p + r for p, r in zip(prompts, responses)]

    @torch.no_grad()
    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        """Each response's score, in `batch_size` forward passes."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts for {len(responses)} responses")
        encoded = [list(ids) for ids in self.tokenizer(self.texts(prompts, responses))["input_ids"]]
        scores: list[float] = []
        for start in range(0, len(encoded), self.batch_size):
            scores += self._score_batch(encoded[start:start + self.batch_size]).tolist()
        return scores

    def _score_batch(self, rows: list[list[int]]) -> torch.Tensor:
        lengths = torch.tensor([len(r) for r in rows])
        if (lengths == 0).any():
            raise ValueError("a reward model input encodes to no tokens")
        width = int(lengths.max())
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row)
            mask[i, :len(row)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        if self.model_type == "classifier":
            return classifier_score(self.model(input_ids=ids, attention_mask=mask).logits).cpu()
        logits = self.model(input_ids=ids, attention_mask=mask).logits  # (B, W, V)
        last = logits[torch.arange(len(rows)), (lengths - 1).to(self.device)]  # (B, V)
        return judge_score(last[:, self.judge_ids[0]], last[:, self.judge_ids[1]]).cpu()
