"""Problems with their prompts already tokenized, cached per process.

An env runner may build many envs over the same dataset and tokenizer (and an eval env beside
them); tokenizing ~15k arithmetic prompts costs ~0.3 s and loading a tokenizer by name ~3 s, so
both are done once per process and shared. The cache holds the tokenizer object itself, so the
`id()` in a key cannot be reused by another tokenizer while the entry lives.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rllib_llm.envs.datasets import load_problems

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProblemSet:
    """Parallel tuples, one entry per kept problem.

    Attributes:
        prompts: prompt texts.
        answers: ground-truth answers.
        prompt_ids: token ids of each prompt, from `rllib_llm.models.encode_prompt`.
        num_dropped: problems dropped because their prompt had 0 or more than `prompt_length`
            tokens.
        longest_prompt: tokens in the dataset's longest prompt, kept or dropped.
    """

    prompts: tuple[str, ...]
    answers: tuple[str, ...]
    prompt_ids: tuple[tuple[int, ...], ...]
    num_dropped: int
    longest_prompt: int

    @property
    def dropped_fraction(self) -> float:
        """Share of the dataset's problems that were dropped, in [0, 1)."""
        return self.num_dropped / (self.num_dropped + len(self.prompts))


_CACHE_SIZE = 8
_cache: OrderedDict[tuple, tuple[Any, ProblemSet]] = OrderedDict()
_cache_lock = threading.Lock()


@functools.lru_cache(maxsize=4)
def load_tokenizer_by_name(name: str):
    """`rllib_llm.models.load_tokenizer(name)`, loaded once per process and name."""
    from rllib_llm.models import load_tokenizer

    return load_tokenizer(name)


def load_problem_set(
    tokenizer,
    *,
    dataset: str,
    split: str,
    prompt_key: str,
    answer_key: str,
    dataset_kwargs: Mapping[str, Any],
    prompt_length: int,
) -> ProblemSet:
    """Load and tokenize the problems of `dataset`, keeping prompts of 1..prompt_length tokens."""
    key = (
        id(tokenizer),
        dataset,
        split,
        prompt_key,
        answer_key,
        repr(sorted(dataset_kwargs.items())),
        prompt_length,
    )
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key][1]
    problems = load_problems(
        dataset, split=split, prompt_key=prompt_key, answer_key=answer_key, **dataset_kwargs
    )
    problem_set = _tokenize(tokenizer, problems, prompt_length, dataset)
    with _cache_lock:
        _cache[key] = (tokenizer, problem_set)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return problem_set


def _tokenize(tokenizer, problems: list[dict], prompt_length: int, source: str) -> ProblemSet:
    from rllib_llm.models import encode_prompt

    kept, shortest, longest = [], None, 0
    for problem in problems:
        ids = tuple(encode_prompt(tokenizer, problem["prompt"]))
        longest = max(longest, len(ids))
        if 1 <= len(ids) <= prompt_length:
            kept.append((problem["prompt"], problem["answer"], ids))
        elif ids:
            shortest = len(ids) if shortest is None else min(shortest, len(ids))
    if not kept:
        hint = f"at least {shortest}" if shortest is not None else "a value that fits them"
        raise ValueError(
            f"prompt_length={prompt_length} drops all {len(problems)} prompts of {source!r}: "
            f"none has 1..{prompt_length} tokens; raise prompt_length to {hint}"
        )
    num_dropped = len(problems) - len(kept)
    if num_dropped:
        logger.warning(
            "%s: dropped %d of %d prompts longer than prompt_length=%d tokens (or empty)",
            source,
            num_dropped,
            len(problems),
            prompt_length,
        )
    prompts, answers, prompt_ids = zip(*kept, strict=True)
    return ProblemSet(prompts, answers, prompt_ids, num_dropped, longest)


def check_dropped_share(
    problem_set: ProblemSet, *, max_fraction: float, prompt_length: int, source: str
) -> None:
    """Refuse a problem set that lost more than `max_fraction` of its prompts to `prompt_length`.

    Raises ValueError naming the count, the total, the longest prompt and both fixes.
    """
    if problem_set.dropped_fraction <= max_fraction:
        return
    total = problem_set.num_dropped + len(problem_set.prompts)
    raise ValueError(
        f"prompt_length={prompt_length} drops {problem_set.num_dropped} of {total} prompts of "
        f"{source} ({problem_set.dropped_fraction:.1%}), more than max_dropped_prompt_fraction="
        f"{max_fraction}; the longest prompt has {problem_set.longest_prompt} tokens (chat "
        f"template included): raise prompt_length (to {problem_set.longest_prompt} to keep them "
        "all), or raise max_dropped_prompt_fraction to train on what is left"
    )
