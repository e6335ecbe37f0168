"""`MathVerifyEnv`: answer a math problem token by token; the verifier's score is the reward.

The token-level MDP (see `token_mdp` for the shared conventions):
- `reset()` picks a problem and starts the state at its prompt ids (`rllib_llm.models.
  encode_prompt`, the one place prompts become ids). Observation: the prompt's last token. Info:
  `prompt_ids`, `prompt_index`, `answer`, `prompt`.
- `step(token)` appends the agent's token. The episode is `terminated` on EOS and `truncated`
  after `response_length` tokens without EOS (EOS on the last allowed token is terminated). The
  reward is 0.0 until the end, then the verifier's score of the decoded response (special tokens
  skipped); the final info holds `"verifier"` (`Verification.as_info()`: score, correct,
  extracted, timed_out, error, fast_path) and `"response"` (the decoded text).
- `step_chunk(tokens)` consumes a whole generated response (or a piece of it) in one call with
  exactly the results of calling `step` per token, verifying once per episode. Tokens past the
  episode's end are refused with ValueError before anything is consumed (the env is unchanged):
  an engine that generates past EOS is a bug to surface, not to hide.

Memory: the env keeps the prompt ids and a buffer of `response_length` action ids, O(T); infos
of non-final steps are empty dicts (`step_chunk` returns the shared read-only
`token_mdp.EMPTY_INFO` for them, and numpy arrays for the rest: no Python object per token).

Multi-turn (not used by this env): an env may append tokens of its own after an agent token (a
tool's output once the agent closes a tool call). They go in that step's info under
`token_mdp.ENV_TOKENS`, are part of the state (`state_token_ids`, `token_mdp.rebuild_state`) but
are not actions (mask 0 in training), and the observation becomes the last of them. Such an env
also ends a `step_chunk` where it interjects: the engine must stop at the tool call and resume
generating after the env's tokens.

Batched verification: the env runner replays many responses; `verify_responses` scores all of
them in one overlapping batch on the verifier pool, and `step_chunk(tokens, verification=v)` then
uses the precomputed verdict instead of verifying again.

Cost per episode, measured on the 2-core development machine with the embedded tokenizer:
reset + step_chunk + verification takes ~10 µs for an arithmetic answer (2-16 tokens, decided
by the verifier's in-process fast path; stepping token by token costs the same at 16 tokens), and
~2 ms for a LaTeX answer that goes through math-verify in the worker pool (sympy's parse and
compare dominate; batching 64 responses over 2 workers saved ~10% on 2 busy cores).
"""

from __future__ import annotations

import array
import operator
import random
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium
import numpy as np
from rllib_llm.envs.env_config import MathVerifyEnvConfig
from rllib_llm.envs.problem_set import (
    PromptRoom,
    check_dropped_share,
    load_problem_set,
    load_tokenizer_by_name,
)
from rllib_llm.envs.token_mdp import (
    ANSWER,
    EMPTY_INFO,
    PROMPT,
    PROMPT_IDS,
    PROMPT_INDEX,
    VERIFIER_INFO,
    ChunkResult,
)
from rllib_llm.envs.verifier import (
    MathVerifier,
    Verification,
    VerifierCounters,
    acquire_shared_verifier,
    release_shared_verifier,
)

RESPONSE_INFO = "response"  # final step info: the decoded response text
RESET_OPTIONS = (PROMPT_INDEX,)


class MathVerifyEnv(gymnasium.Env):
    """Token-level math environment with a math-verify reward (see the module docstring).

    Args:
        config: the settings of `MathVerifyEnvConfig` as a dict (RLlib passes an `EnvContext`).
        **overrides: the same keys as keyword arguments; they win over `config`.

    Attributes:
        tokenizer: the tokenizer (the env runner's engine uses it too).
        num_problems: problems available after dropping overlong prompts.
        num_dropped_prompts: problems dropped because their prompt exceeds `prompt_length`.
        dropped_prompt_fraction: their share of the dataset, at most
            `max_dropped_prompt_fraction` (the constructor raises ValueError beyond it).
        split: the dataset split.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, config: Mapping[str, Any] | None = None, **overrides: Any):
        cfg = MathVerifyEnvConfig.from_mapping(config, **overrides)
        self.config = cfg
        self.tokenizer = (
            cfg.tokenizer if cfg.tokenizer is not None else load_tokenizer_by_name(cfg.model)
        )
        self.eos_token_id = self.tokenizer.eos_token_id
        if self.eos_token_id is None:
            raise ValueError(
                f"model={cfg.model!r} gives a tokenizer without eos_token_id; episodes end at "
                "EOS: use a tokenizer with an EOS token"
            )
        self.vocab_size = len(self.tokenizer)
        self.observation_space = gymnasium.spaces.Discrete(self.vocab_size)
        self.action_space = gymnasium.spaces.Discrete(self.vocab_size)
        self.response_length = cfg.response_length
        self.split = cfg.split
        # Only read to word an error about prompt_length: a hint to raise it beyond what the
        # model's context holds beside the response could not be followed.
        room = PromptRoom(cfg.response_length, lambda: _context_length(cfg))
        self._problems = load_problem_set(
            self.tokenizer,
            dataset=cfg.dataset,
            split=cfg.split,
            prompt_key=cfg.prompt_key,
            answer_key=cfg.answer_key,
            dataset_kwargs=cfg.dataset_kwargs,
            prompt_length=cfg.prompt_length,
            room=room,
        )
        check_dropped_share(
            self._problems,
            max_fraction=cfg.max_dropped_prompt_fraction,
            prompt_length=cfg.prompt_length,
            source=f"{cfg.dataset!r} (split={cfg.split!r})",
            room=room,
        )
        self.num_problems = len(self._problems.prompts)
        self.num_dropped_prompts = self._problems.num_dropped
        self.dropped_prompt_fraction = self._problems.dropped_fraction
        self._verifier = acquire_shared_verifier(**cfg.verifier_options())
        # Releases the shared verifier on close() or when the env is garbage-collected.
        self._release = weakref.finalize(self, release_shared_verifier, self._verifier)
        self._counters = VerifierCounters()
        self._order_rng = random.Random(cfg.seed)
        self._order: list[int] = []
        self._order_pos = 0
        self._shard, self._num_shards = 0, 1  # the whole order (see shard_order)
        # The current episode: its prompt and the agent's tokens so far, the first
        # `_num_actions` entries of a buffer reused by every episode (O(T) in all).
        self._prompt_index = -1
        self._prompt_ids: tuple[int, ...] = ()
        self._actions = np.zeros(self.response_length, dtype=np.int64)
        self._num_actions = 0
        self._running = False

    # --- gymnasium API --------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Start an episode: the next problem of the seeded shuffled order, or
        `options={"prompt_index": i}` for problem i (the order does not advance then)."""
        super().reset(seed=seed)
        if seed is not None:
            self._order_rng.seed(seed)
            self._order, self._order_pos = [], 0
        index = self._chosen_index(options)
        problems = self._problems
        self._prompt_index = index
        self._prompt_ids = problems.prompt_ids[index]
        self._num_actions = 0
        self._running = True
        info = {
            PROMPT_IDS: list(self._prompt_ids),
            PROMPT_INDEX: index,
            ANSWER: problems.answers[index],
            PROMPT: problems.prompts[index],
        }
        return self._prompt_ids[-1], info

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        """Append the agent's token; reward and verdict arrive on the episode's last step."""
        self._check_running("step")
        token = self._check_token(action)
        self._actions[self._num_actions] = token
        self._num_actions += 1
        if token == self.eos_token_id:
            reward, info = self._finish(None)
            return token, reward, True, False, info
        if self._num_actions >= self.response_length:
            reward, info = self._finish(None)
            return token, reward, False, True, info
        return token, 0.0, False, False, {}

    def close(self) -> None:
        """Release this env's hold on the shared verifier (idempotent)."""
        self._release()

    # --- the fast path --------------------------------------------------------------------------
    def step_chunk(
        self, actions: Sequence[int] | np.ndarray, *, verification: Verification | None = None
    ) -> ChunkResult:
        """Step through `actions` at once, with exactly the results of `step` per token.

        Args:
            actions: token ids (a list or a 1-D integer array); must not run past the end of the
                episode (ValueError, nothing consumed).
            verification: a verdict precomputed by `verify_responses` for this episode's whole
                response; used instead of verifying when this chunk ends the episode.
        """
        self._check_running("step_chunk")
        tokens = self._check_tokens(actions)  # (n,) int64
        n, done = len(tokens), self._num_actions
        end, terminated = self._episode_end(tokens, done)
        if end < n:
            raise ValueError(
                f"step_chunk got {n} tokens but the episode ends at token {end} of the "
                f"chunk ({'EOS' if terminated else 'response_length'}); pass the response up to "
                "and including its last token"
            )
        truncated = not terminated and done + n >= self.response_length
        if verification is not None and not (terminated or truncated):
            raise ValueError(
                "step_chunk got a verification but its tokens do not end the episode; pass "
                "verification only with the chunk that ends it"
            )
        self._actions[done : done + n] = tokens
        self._num_actions += n
        rewards = np.zeros(n, dtype=np.float64)
        terminateds, truncateds = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        infos = [EMPTY_INFO] * n
        if terminated or truncated:
            rewards[-1], infos[-1] = self._finish(verification)
            terminateds[-1], truncateds[-1] = terminated, truncated
        # The observation after each token is that token: this env appends none of its own.
        return ChunkResult(tokens, tokens, rewards, terminateds, truncateds, infos)

    def verify_responses(
        self, prompt_indices: Sequence[int], responses: Sequence[Sequence[int]]
    ) -> list[Verification]:
        """Score whole responses (each from an episode's first token) in one verifier batch.

        Each response is cut where its episode would end (EOS or `response_length`) and decoded
        exactly as `step`/`step_chunk` would; the verdicts go to `step_chunk(..., verification=)`.
        The verdicts count in `verifier_metrics()` when `step_chunk` uses them, not here.
        """
        if len(prompt_indices) != len(responses):
            raise ValueError(
                f"verify_responses got {len(prompt_indices)} prompt indices and {len(responses)} "
                "responses; pass one prompt index per response"
            )
        texts, answers = [], []
        for index, response in zip(prompt_indices, responses):
            tokens = self._check_tokens(response)
            end, _ = self._episode_end(tokens, 0)
            texts.append(self._decode(tokens[:end]))
            answers.append(self._problems.answers[self._check_prompt_index(index)])
        # Each verdict carries its text to `step_chunk`, which would otherwise decode the same
        # response again (a decode costs as much as the rest of an episode).
        return [Verification(v.score, v.correct, v.extracted, v.timed_out, v.error, v.fast_path,
                             text)
                for v, text in zip(self._verifier.score_batch(texts, answers), texts)]

    def verify_text(self, prompt_index: int, text: str) -> Verification:
        """Score `text` as the answer to problem `prompt_index`, counted in `verifier_metrics()`
        (multi-turn envs built on this one verify their final turn with it)."""
        verification = self._verifier.score(text, self._problems.answers[
            self._check_prompt_index(prompt_index)])
        self._counters.add(verification)
        return verification

    @property
    def verifier(self) -> MathVerifier:
        """The verifier this env scores with: one per set of verifier options in a process,
        shared by its envs and closed when the last of them closes (`acquire_shared_verifier`)."""
        return self._verifier

    # --- state and metrics ----------------------------------------------------------------------
    @property
    def prompt_ids(self) -> tuple[int, ...]:
        """The current episode's prompt token ids, as the env keeps them (() before a reset)."""
        return self._prompt_ids

    @property
    def response_ids(self) -> np.ndarray:
        """The agent's tokens so far this episode: a read-only (T,) int64 view of the one
        buffer of `response_length` tokens the env reuses for every episode (valid until the
        next reset or step)."""
        view = self._actions[: self._num_actions]
        view.flags.writeable = False
        return view

    def state_token_ids(self) -> list[int]:
        """The current state: prompt ids, then the agent's tokens (this env appends none)."""
        return [*self._prompt_ids, *self._actions[: self._num_actions].tolist()]

    def verifier_metrics(self) -> dict[str, int]:
        """Counters over this env's finished episodes: `verifier.METRIC_NAMES` -> count.

        Per env (summing over envs is correct), cumulative since construction.
        """
        return self._counters.as_dict()

    def shard_order(self, shard: int, num_shards: int, seed: int) -> None:
        """Walk only share `shard` of `num_shards` of the data set, from a fresh order seeded
        with `seed`: envs given the same seed and shards 0..num_shards-1 never draw the same
        problem in the same epoch. Each takes positions shard, shard + num_shards, ... of every
        epoch's shuffled order, the same number (num_problems // num_shards; the rest of the
        epoch is skipped, a different rest each epoch), so the envs stay in step. The env
        runners call it: runner i of n takes share i - 1."""
        if not 0 <= shard < num_shards:
            raise ValueError(f"shard={shard} must be in [0, num_shards={num_shards})")
        if num_shards > self.num_problems:
            raise ValueError(f"{num_shards} shares of {self.num_problems} problems would leave "
                             "some empty; use fewer env runners or more problems")
        self._shard, self._num_shards = shard, num_shards
        self._order_rng = random.Random(seed)
        self._order, self._order_pos = [], 0

    def order_state(self) -> dict[str, Any]:
        """Where `reset()` stands in its seeded walk over the data set (for checkpoints)."""
        return {"rng": self._order_rng.getstate(), "order": list(self._order),
                "position": self._order_pos}

    def set_order_state(self, state: Mapping[str, Any]) -> None:
        """Continue the walk from `order_state()`'s result: the same problems follow."""
        self._order_rng.setstate(state["rng"])
        self._order, self._order_pos = list(state["order"]), state["position"]

    # --- internals ------------------------------------------------------------------------------
    def _chosen_index(self, options: Mapping[str, Any] | None) -> int:
        if options:
            unknown = sorted(set(options) - set(RESET_OPTIONS))
            if unknown:
                raise ValueError(
                    f"reset options {unknown} are not supported; the valid options are "
                    f"{list(RESET_OPTIONS)}"
                )
            if PROMPT_INDEX in options:
                return self._check_prompt_index(options[PROMPT_INDEX])
        if self._order_pos >= len(self._order):
            # A new epoch: every problem once (every problem of this env's share), in a fresh
            # order.
            order = list(range(self.num_problems))
            self._order_rng.shuffle(order)
            n = self._num_shards
            self._order = order[self._shard::n][: self.num_problems // n]
            self._order_pos = 0
        self._order_pos += 1
        return self._order[self._order_pos - 1]

    def _check_prompt_index(self, index: Any) -> int:
        is_int = isinstance(index, int | np.integer) and not isinstance(index, bool)
        if not (is_int and 0 <= index < self.num_problems):
            raise ValueError(
                f"prompt_index={index!r} must be an integer in [0, {self.num_problems}); use an "
                "index from a reset info's 'prompt_index'"
            )
        return int(index)

    def _check_running(self, method: str) -> None:
        if not self._running:
            raise RuntimeError(
                f"MathVerifyEnv.{method}() called with no episode running (before the first "
                "reset() or after the episode ended); call reset() first"
            )

    def _check_token(self, action: Any) -> int:
        try:
            token = operator.index(action)
        except TypeError:
            token = None
        if token is None or not 0 <= token < self.vocab_size:
            raise ValueError(
                f"action={action!r} is not a token id in [0, {self.vocab_size}); pass an integer "
                "token id of the tokenizer's vocabulary"
            )
        return token

    def _check_tokens(self, actions: Sequence[int] | np.ndarray) -> np.ndarray:
        """`actions` as a new (n,) int64 array of token ids; ValueError naming a bad one."""
        if isinstance(actions, np.ndarray):
            if actions.ndim != 1 or actions.dtype.kind not in "iu":
                raise ValueError(
                    f"actions must be a 1-D integer array, got shape {actions.shape} dtype "
                    f"{actions.dtype}; pass the response's token ids"
                )
            tokens = actions
        else:
            tokens = _int_array(actions)
            if tokens is None:  # some value is no token id: check one by one, naming it
                tokens = np.array([self._check_token(a) for a in actions], dtype=np.int64)
        if tokens.size == 0:
            raise ValueError("got an empty token sequence; pass at least one token id")
        if tokens.min() < 0 or tokens.max() >= self.vocab_size:
            self._check_token(next(t for t in tokens.tolist() if not 0 <= t < self.vocab_size))
        return tokens.astype(np.int64)  # a copy: results never alias the caller's array

    def _episode_end(self, tokens: np.ndarray, num_actions: int) -> tuple[int, bool]:
        """How many of `tokens` the episode consumes after `num_actions`, and if EOS ends it."""
        limit = min(len(tokens), self.response_length - num_actions)
        eos = np.flatnonzero(tokens[:limit] == self.eos_token_id)
        if eos.size:
            return int(eos[0]) + 1, True
        return limit, False

    def _decode(self, tokens: np.ndarray) -> str:
        """The response text (special tokens skipped)."""
        # An array, not a list: transformers checks a list's items one by one in Python.
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _finish(self, verification: Verification | None) -> tuple[float, dict[str, Any]]:
        """End the episode: score the response (unless precomputed) and build the final info."""
        self._running = False
        # A precomputed verdict carries the text `verify_responses` decoded from this response.
        text = None if verification is None else verification.text
        if text is None:
            text = self._decode(self._actions[: self._num_actions])
        if verification is None:
            verification = self._verifier.score(text, self._problems.answers[self._prompt_index])
        self._counters.add(verification)
        return verification.score, {VERIFIER_INFO: verification.as_info(), RESPONSE_INFO: text}


def _int_array(values: Sequence[Any]) -> np.ndarray | None:
    """`values` as an (n,) int64 array, or None unless each is an integer (`operator.index`).

    `array.array` converts at C speed with exactly `operator.index`'s rule (bools and numpy
    integers pass, floats and strings fail), faster than numpy's dtype discovery.
    """
    try:
        return np.frombuffer(array.array("q", values), dtype=np.int64)
    except (TypeError, OverflowError):
        return None


def _context_length(cfg: MathVerifyEnvConfig) -> int | None:
    """The context length of `cfg.model`, None when unknown (a tokenizer object was given
    instead of a model, or its config cannot be read)."""
    if cfg.tokenizer is not None:
        return None
    from rllib_llm.models.context_length import model_context_length

    try:
        return model_context_length(cfg.model)
    except (OSError, ValueError):
        return None
