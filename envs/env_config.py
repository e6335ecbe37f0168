"""`MathVerifyEnvConfig`: every setting of `MathVerifyEnv`, documented and validated in one place.

RLlib hands the env its `env_config` as an `EnvContext` (a dict); `from_mapping` turns that dict,
plus keyword overrides, into this dataclass and refuses unknown keys, so a typo fails at
construction with the list of valid keys instead of being silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from rllib_llm.envs.answer_extraction import EXTRACTIONS
from rllib_llm.envs.validation import (
    check_choice,
    check_finite,
    check_fraction,
    check_int,
    check_positive_seconds,
    check_str,
)


@dataclass(frozen=True)
class MathVerifyEnvConfig:
    """Settings of `MathVerifyEnv` (RLlib: `.environment("math_verify", env_config={...})`)."""

    model: str = "embedded"
    """Where the tokenizer comes from: a name for `rllib_llm.models.load_tokenizer` ("embedded",
    a local checkpoint directory, or a hub id). Ignored when `tokenizer` is given."""

    tokenizer: Any = None
    """A tokenizer object (`transformers.PreTrainedTokenizerBase`) to use instead of `model`. It
    needs an `eos_token_id`: EOS ends an episode."""

    dataset: str = "arithmetic"
    """Problems: "arithmetic", "compare", "word_problems" or "gsm_symbolic" (built in), a local
    .jsonl/.json/.parquet file, or a Hugging Face dataset name or directory (see
    `rllib_llm.envs.datasets.load_problems`)."""

    split: str = "train"
    """Dataset split, e.g. "train" or "test" (ignored for local files)."""

    prompt_key: str = "prompt"
    """Field of a record holding the prompt text (GSM8K: "question")."""

    answer_key: str = "answer"
    """Field of a record holding the ground-truth answer; "... #### 72" is reduced to "72"."""

    dataset_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for the dataset: the arithmetic generator's `seed`, `max_operand`,
    `ops`, `test_size`, `prompt_style`, the other generators' (`rllib_llm.envs.datasets`), or
    `datasets.load_dataset`'s (e.g. `name="main"` for GSM8K)."""

    prompt_length: int = 64
    """Maximum prompt length in tokens (after `encode_prompt`, chat template included). Longer
    prompts are dropped when the env loads, counted in `MathVerifyEnv.num_dropped_prompts` and
    logged as a warning; more than `max_dropped_prompt_fraction` of them is an error."""

    max_dropped_prompt_fraction: float = 0.1
    """Largest share of the dataset's prompts, in [0, 1], that may be dropped for being longer
    than `prompt_length` (or empty): beyond it the env refuses to build, naming the count and the
    longest prompt's length, because training on what is left is not training on the dataset
    (a chat template can push most GSM8K prompts past 64 tokens). 0: any dropped prompt is an
    error; 1: any loss that leaves a prompt is accepted. The share is
    `MathVerifyEnv.dropped_prompt_fraction`."""

    response_length: int = 16
    """Maximum agent tokens per episode, >= 1: the episode is truncated after this many tokens
    without EOS."""

    answer_extraction: str = "auto"
    """How the verifier finds the answer in a response: "auto" (boxed, else `#### N`, else the
    last number), "boxed", "hash" or "last_number"."""

    correct_score: float = 1.0
    """Reward of a correct answer."""

    wrong_score: float = 0.0
    """Reward of a wrong or missing answer, and of a verification that timed out or crashed."""

    format_score: float = 0.0
    """Bonus added to the reward whenever an answer could be extracted (correct or not)."""

    verify_timeout_s: float = 5.0
    """Hard wall-clock limit per math-verify comparison, seconds; on expiry the worker process is
    killed and the response scored `wrong_score`."""

    verifier_workers: int = 1
    """Worker processes for math-verify, shared by every env of the process with the same
    verifier settings; they start on first need (never for plain-number answers)."""

    seed: int | None = 0
    """Seeds the shuffled order in which `reset()` walks the dataset (None: unseeded).
    `reset(seed=s)` reseeds it."""

    def __post_init__(self) -> None:
        check_str("model", self.model, fix="use e.g. 'embedded' or a checkpoint directory")
        if self.tokenizer is not None and getattr(self.tokenizer, "eos_token_id", None) is None:
            raise ValueError(
                f"tokenizer={type(self.tokenizer).__name__} has no eos_token_id; episodes end at "
                "EOS: pass a tokenizer with an EOS token (or set tokenizer.eos_token)"
            )
        check_str("dataset", self.dataset, fix="use e.g. 'arithmetic' or a path to a .jsonl")
        check_str("split", self.split, fix="use e.g. 'train' or 'test'")
        check_str("prompt_key", self.prompt_key, fix="use the field that holds the prompt")
        check_str("answer_key", self.answer_key, fix="use the field that holds the answer")
        if not isinstance(self.dataset_kwargs, Mapping):
            # ValueError like every other config check: callers catch one type for bad settings.
            raise ValueError(  # noqa: TRY004
                f"dataset_kwargs={self.dataset_kwargs!r} must be a dict of keyword arguments; "
                "use e.g. {'name': 'main'} or {}"
            )
        check_int("prompt_length", self.prompt_length, minimum=1, fix="use e.g. 64")
        check_fraction(
            "max_dropped_prompt_fraction",
            self.max_dropped_prompt_fraction,
            fix="use e.g. 0.1 (a tenth of the prompts may be too long)",
        )
        check_int("response_length", self.response_length, minimum=1, fix="use e.g. 16")
        check_choice("answer_extraction", self.answer_extraction, EXTRACTIONS)
        check_finite("correct_score", self.correct_score, fix="use e.g. 1.0")
        check_finite("wrong_score", self.wrong_score, fix="use e.g. 0.0")
        check_finite("format_score", self.format_score, fix="use e.g. 0.0")
        check_positive_seconds("verify_timeout_s", self.verify_timeout_s, fix="use e.g. 5.0")
        check_int("verifier_workers", self.verifier_workers, minimum=1, fix="use e.g. 1")
        if self.seed is not None:
            check_int("seed", self.seed, minimum=0, fix="use e.g. 0, or None for no seed")

    @classmethod
    def from_mapping(
        cls, config: Mapping[str, Any] | None = None, **overrides: Any
    ) -> MathVerifyEnvConfig:
        """Build from a dict (e.g. RLlib's `EnvContext`) plus keyword overrides (which win)."""
        merged = {**(config or {}), **overrides}
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(merged) - set(valid))
        if unknown:
            raise ValueError(
                f"unknown MathVerifyEnv config keys {unknown}; the valid keys are {valid}"
            )
        return cls(**merged)

    def verifier_options(self) -> dict[str, Any]:
        """The `MathVerifier` keyword arguments these settings name."""
        return {
            "extraction": self.answer_extraction,
            "correct_score": self.correct_score,
            "wrong_score": self.wrong_score,
            "format_score": self.format_score,
            "timeout_s": self.verify_timeout_s,
            "num_workers": self.verifier_workers,
        }


def split_env_config(config: Mapping[str, Any] | None, settings_class: type, env_name: str
                     ) -> tuple[dict[str, Any], Any]:
    """An env_config dict of an env built on `MathVerifyEnv` -> (the `MathVerifyEnv` keys, the
    env's own `settings_class` built from the rest); a key neither knows raises, listing both."""
    config = dict(config or {})
    own_keys = {f.name for f in fields(settings_class)}
    problem_keys = {f.name for f in fields(MathVerifyEnvConfig)}
    unknown = sorted(set(config) - own_keys - problem_keys)
    if unknown:
        raise ValueError(f"unknown {env_name} config keys {unknown}; the valid keys are "
                         f"{sorted(problem_keys | own_keys)}")
    settings = settings_class(**{k: v for k, v in config.items() if k in own_keys})
    return {k: v for k, v in config.items() if k in problem_keys}, settings
