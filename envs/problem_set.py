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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rllib_llm.envs.datasets import read_problems

logger = logging.getLogger(__name__)

# A ceiling on the characters of a prompt one token covers, chosen with room to spare:
# SentencePiece caps a piece at 16 characters by default (max_sentencepiece_length); byte-level
# BPE has no cap, but its long tokens are runs of spaces or punctuation, and a character is at
# least one byte. (An assumption, not a measurement of every vocabulary: a tokenizer with longer
# tokens would see a prompt made of them dropped, counted.) So a prompt of more than
# MAX_CHARS_PER_TOKEN * prompt_length characters has more than prompt_length tokens (a chat
# template only adds to them), and prompt_length is at most the model's context: it is dropped
# without being tokenized, which for one 100 MB prompt took minutes and 18 GB.
MAX_CHARS_PER_TOKEN = 256
# A .jsonl line holds the prompt written as JSON, where a character takes at most 6 bytes
# (`\u00e9`; `\ud83d\ude00` is 12 for two), beside the answer and any other fields, given 1 MiB.
# A longer line cannot hold a prompt that fits: it is skipped unread (datasets.read_problems).
JSON_BYTES_PER_CHAR = 6
OTHER_FIELDS_BYTES = 1 << 20


def max_prompt_chars(prompt_length: int) -> int:
    """The most characters a prompt of at most `prompt_length` tokens can have."""
    return MAX_CHARS_PER_TOKEN * prompt_length


def max_record_bytes(prompt_length: int) -> int:
    """The longest .jsonl line that can hold a prompt of at most `prompt_length` tokens."""
    return JSON_BYTES_PER_CHAR * max_prompt_chars(prompt_length) + OTHER_FIELDS_BYTES


@dataclass(frozen=True)
class ProblemSet:
    """Parallel tuples, one entry per kept problem.

    Attributes:
        prompts: prompt texts.
        answers: ground-truth answers.
        prompt_ids: token ids of each prompt, from `rllib_llm.models.encode_prompt`.
        num_dropped: problems dropped because their prompt had 0 or more than `prompt_length`
            tokens (`num_untokenized` of them among these).
        longest_prompt: tokens in the dataset's longest tokenized prompt, kept or dropped.
        num_untokenized: problems dropped by their size alone, never tokenized: a prompt over
            `max_prompt_chars(prompt_length)` characters, or a .jsonl line over
            `max_record_bytes(prompt_length)` bytes.
    """

    prompts: tuple[str, ...]
    answers: tuple[str, ...]
    prompt_ids: tuple[tuple[int, ...], ...]
    num_dropped: int
    longest_prompt: int
    num_untokenized: int = 0

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
    room: PromptRoom | None = None,
) -> ProblemSet:
    """Load and tokenize the problems of `dataset`, keeping prompts of 1..prompt_length tokens.

    room: how far prompt_length can rise (the model's context and the response length), for
        the hint when no prompt is kept.
    """
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
    loaded = read_problems(
        dataset, split=split, prompt_key=prompt_key, answer_key=answer_key,
        dataset_kwargs=dataset_kwargs, max_record_bytes=max_record_bytes(prompt_length),
    )
    problem_set = _tokenize(tokenizer, loaded.problems, prompt_length, dataset, room,
                            num_skipped=loaded.num_skipped)
    with _cache_lock:
        _cache[key] = (tokenizer, problem_set)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return problem_set


@dataclass(frozen=True)
class PromptRoom:
    """What bounds prompt_length from above, so that a hint to raise it is one that can be
    followed: prompt_length + response_length must fit the model's context.

    Attributes:
        response_length: tokens kept for the response.
        context_length: called (only to word an error) for the model's context in tokens, or
            None when unknown.
    """

    response_length: int
    context_length: Callable[[], int | None]

    def fix_for_none_kept(self, shortest: int) -> str:
        """The fix when every prompt is longer than prompt_length; `shortest`: the shortest's
        tokens."""
        context, r = self.context_length(), self.response_length
        if context is None or shortest + r <= context:
            return f"raise prompt_length to at least {shortest}"
        if shortest >= context:
            return (f"the shortest has {shortest} tokens, more than the model's context of "
                    f"{context} tokens holds beside a response: this model cannot take these "
                    "prompts; use a model with a longer context, or shorter prompts")
        return (f"raise prompt_length to at least {shortest} and lower response_length={r} to "
                f"at most {context - shortest} (prompt_length + response_length must fit the "
                f"model's context of {context} tokens)")

    def fix_for_too_many_dropped(self, longest: int, prompt_length: int) -> str:
        """The fix when prompt_length drops too many prompts; `longest`: the longest's tokens."""
        context, r = self.context_length(), self.response_length
        if context is None or longest + r <= context:
            return f"raise prompt_length (to {longest} to keep them all)"
        if longest < context:
            return (f"raise prompt_length to {longest} and lower response_length={r} to at most "
                    f"{context - longest} to keep them all (prompt_length + response_length "
                    f"must fit the model's context of {context} tokens)")
        most = context - r  # the longest prompt_length the context allows with this response
        room = (f"raise prompt_length to at most {most}" if most > prompt_length
                else "prompt_length cannot rise")
        return (f"the model's context of {context} tokens cannot hold the longest beside a "
                f"response: {room} (with response_length={r}; lower that for more)")


def _tokenize(tokenizer, problems: list[dict], prompt_length: int, source: str,
              room: PromptRoom | None = None, *, num_skipped: int = 0) -> ProblemSet:
    """Tokenize the prompts that can fit; `num_skipped`: records dropped unread before."""
    from rllib_llm.models import encode_prompt

    most_chars = max_prompt_chars(prompt_length)
    kept, shortest, longest, untokenized = [], None, 0, num_skipped
    for problem in problems:
        if len(problem["prompt"]) > most_chars:
            untokenized += 1
            continue
        ids = tuple(encode_prompt(tokenizer, problem["prompt"]))
        longest = max(longest, len(ids))
        if 1 <= len(ids) <= prompt_length:
            kept.append((problem["prompt"], problem["answer"], ids))
        elif ids:
            shortest = len(ids) if shortest is None else min(shortest, len(ids))
    total = len(problems) + num_skipped
    if not kept:
        if shortest is None:
            hint = "raise prompt_length to a value that fits them"
        elif room is None:
            hint = f"raise prompt_length to at least {shortest}"
        else:
            hint = room.fix_for_none_kept(shortest)
        raise ValueError(
            f"prompt_length={prompt_length} drops all {total} prompts of {source!r}: "
            f"none has 1..{prompt_length} tokens{_untokenized_note(untokenized, prompt_length)}; "
            f"{hint}"
        )
    num_dropped = total - len(kept)
    if num_dropped:
        logger.warning(
            "%s: dropped %d of %d prompts longer than prompt_length=%d tokens (or empty)%s",
            source,
            num_dropped,
            total,
            prompt_length,
            _untokenized_note(untokenized, prompt_length),
        )
    prompts, answers, prompt_ids = zip(*kept, strict=True)
    return ProblemSet(prompts, answers, prompt_ids, num_dropped, longest, untokenized)


def _untokenized_note(untokenized: int, prompt_length: int) -> str:
    if not untokenized:
        return ""
    return (f" ({untokenized} of the dropped were too long to tokenize: a prompt over "
            f"{max_prompt_chars(prompt_length)} characters, {MAX_CHARS_PER_TOKEN} a token, or a "
            f".jsonl line over {max_record_bytes(prompt_length)} bytes)")


def check_dropped_share(
    problem_set: ProblemSet, *, max_fraction: float, prompt_length: int, source: str,
    room: PromptRoom | None = None,
) -> None:
    """Refuse a problem set that lost more than `max_fraction` of its prompts to `prompt_length`.

    Raises ValueError naming the count, the total, the longest prompt and both fixes (with
    `room`, a prompt_length the model's context can hold).
    """
    if problem_set.dropped_fraction <= max_fraction:
        return
    total = problem_set.num_dropped + len(problem_set.prompts)
    longest = problem_set.longest_prompt
    if room is None:
        fix = f"raise prompt_length (to {longest} to keep them all)"
    else:
        fix = room.fix_for_too_many_dropped(longest, prompt_length)
    raise ValueError(
        f"prompt_length={prompt_length} drops {problem_set.num_dropped} of {total} prompts of "
        f"{source} ({problem_set.dropped_fraction:.1%}), more than max_dropped_prompt_fraction="
        f"{max_fraction}; the longest prompt has {longest} tokens (chat template included)"
        f"{_untokenized_note(problem_set.num_untokenized, prompt_length)}: "
        f"{fix}, or raise max_dropped_prompt_fraction to train on what is left"
    )
