"""`TextTurnEnv`: a multi-turn token-level environment made from a text-level one.

A user writes the environment in text, as a Gymnasium-like pair (no tokens anywhere):

    reset(*, seed=None, options=None) -> (prompt, info)
    step(text) -> (observation_text, reward, terminated, truncated, info)

`prompt` is a string (or a list of chat messages); `step` receives the text of one finished turn
of the agent and answers with the text the environment appends (a tool's output, a user message)
or ends the episode. `TextTurnEnv` turns that into the token-level MDP every rllib_llm env
follows (`token_mdp`): the agent's tokens are actions (mask 1), the observation text becomes
environment tokens in the info of the step that ended the turn (`ENV_TOKENS`, mask 0: never
trained), and it stays a Gymnasium env (`reset`/`step` 5-tuple, `step_chunk` for whole turns).

A turn ends at EOS, right after one of the text env's `stop_strings` (e.g. "</python>", so the
engine stops where a tool call closes), or where the token budget runs out. Episode ends:
- the text env says so (terminated/truncated), with its reward;
- `max_turns` turns are done and the text env still wants to go on: truncated;
- the budget: `response_length` counts every token after the prompt, the agent's and the
  environment's alike (the context the model must hold). A turn cut by the budget, or an
  observation that would leave no room for another agent token, ends the episode truncated,
  and the final info says `context_truncated` (nothing is cut silently, nothing crashes).
Rewards the text env gives before the end are per-turn rewards: they sit on the turn's last agent
token (the learner treats them as dense rewards, `core.AdvantageInputs.turn_rewards`).

The final info carries the text env's last info plus `turns`, `num_env_tokens`,
`context_truncated` and `turn_limit` (the runner's metrics read them).

Observation text is tokenized as plain text: a tool that prints "<eos>" (or a chat model's turn
markers) gets the characters' tokens, never the special token, so tool output cannot fake a turn
boundary. A text env that wants special tokens in its observations recognised says so with an
attribute `observation_special_tokens = True`.

Chat models (a tokenizer with a chat template): the prompt is rendered with the template, and
an observation becomes a message of role `observation_role` ("tool" by default) closed and
followed by the assistant's generation prompt, exactly as the template renders it after the
agent's end-of-turn token (`chat_observation_ids`). Turns of chat models end at their EOS
(end-of-turn) token; the text env decides whether the episode goes on.

Several episodes at once: the env runner keeps one env per running episode and makes them with
`spawn()` (the text env's `spawn()` when it has one, else a deep copy), so data loaded once is
shared and each episode keeps its own state.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import gymnasium
import numpy as np
from rllib_llm.envs.token_mdp import EMPTY_INFO, ENV_TOKENS, PROMPT_IDS, ChunkResult

# Final step info keys this adapter adds (per episode).
TURNS = "turns"  # agent turns taken
NUM_ENV_TOKENS = "num_env_tokens"  # tokens the environment appended in all
CONTEXT_TRUNCATED = "context_truncated"  # True when the token budget ended the episode
TURN_LIMIT = "turn_limit"  # True when max_turns ended an episode the text env would continue
# The env runner steps many episodes' envs from threads, and they share one tokenizer: a fast
# tokenizer used from two threads at once can fail ("Already borrowed"), so calls take turns
# (microseconds each for a turn's text).
_TOKENIZER_LOCK = threading.Lock()


class TextEnv(Protocol):
    """The text-level environment a user writes (see the module docstring)."""

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
              ) -> tuple[str | list[dict[str, str]], dict[str, Any]]: ...

    def step(self, text: str) -> tuple[str | None, float, bool, bool, dict[str, Any]]: ...


class TextTurnEnv(gymnasium.Env):
    """Token-level multi-turn env over a text env (see the module docstring).

    Args:
        text_env: the text-level env. Optional members it may have, forwarded: `stop_strings`
            (turn ends besides EOS), `spawn()`, `num_problems`, `num_dropped_prompts`,
            `order_state()`/`set_order_state()`, `verifier_metrics()`, `close()`. For the env
            runner, `reset(options={"prompt_index": i})` must start problem i and the reset info
            must hold "prompt_index" (and may hold `PROMPT_IDS`, used as the prompt's ids).
        tokenizer: the policy's tokenizer (needs an EOS token).
        response_length: most tokens after the prompt, agent's and environment's, >= 1.
        max_turns: most agent turns per episode, >= 1.
        observation_role: chat role of observations for chat models ("tool" or "user").
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    multi_turn = True  # the env runner steps it turn by turn

    def __init__(self, text_env: TextEnv, tokenizer: Any, *, response_length: int,
                 max_turns: int, observation_role: str = "tool"):
        for name, value in (("response_length", response_length), ("max_turns", max_turns)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        if observation_role not in ("tool", "user"):
            raise ValueError(f"observation_role={observation_role!r} must be 'tool' or 'user'")
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos_token_id; turns and episodes end at EOS")
        self.text_env = text_env
        self.tokenizer = tokenizer
        self.response_length = response_length
        self.max_turns = max_turns
        self.observation_role = observation_role
        self.eos_token_id = tokenizer.eos_token_id
        self.chat = bool(getattr(tokenizer, "chat_template", None))
        self.stop_strings = tuple(getattr(text_env, "stop_strings", ()))
        self.observation_special_tokens = bool(getattr(text_env, "observation_special_tokens",
                                                       False))
        if any(not isinstance(s, str) or not s for s in self.stop_strings):
            raise ValueError(f"stop_strings={self.stop_strings!r} must be non-empty strings")
        self.stop_sequences = tuple(
            tuple(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in self.stop_strings)
        self.vocab_size = len(tokenizer)
        self.observation_space = gymnasium.spaces.Discrete(self.vocab_size)
        self.action_space = gymnasium.spaces.Discrete(self.vocab_size)
        self._running = False
        self._prompt_ids: tuple[int, ...] = ()
        self._state: list[int] = []  # tokens after the prompt, the agent's and the env's
        self._turn: list[int] = []  # the agent's tokens of the current turn
        self._turns = 0
        self._env_tokens = 0

    # --- gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
              ) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        prompt, info = self.text_env.reset(seed=seed, options=options)
        info = dict(info)
        ids = info.get(PROMPT_IDS)
        self._prompt_ids = tuple(int(t) for t in ids) if ids is not None else \
            tuple(self._encode_prompt(prompt))
        if not self._prompt_ids:
            raise ValueError("the text env's prompt encodes to no tokens; give it some text")
        self._state, self._turn, self._turns, self._env_tokens = [], [], 0, 0
        self._running = True
        info[PROMPT_IDS] = list(self._prompt_ids)
        return self._prompt_ids[-1], info

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        """Append one agent token; at a turn's end the text env answers."""
        r = self.step_chunk([action])
        return (int(r.observations[0]), float(r.rewards[0]), bool(r.terminateds[0]),
                bool(r.truncateds[0]), r.infos[0])

    def step_chunk(self, actions: Sequence[int] | np.ndarray) -> ChunkResult:
        """Step through agent tokens at once, with exactly the results of `step` per token.

        The tokens must not run past the end of the current turn (`turn_end`): ValueError, and
        nothing is consumed. Ending the turn calls the text env once.
        """
        if not self._running:
            raise RuntimeError("step_chunk() before reset(), or after the episode ended")
        tokens = self._check_tokens(actions)
        n = len(tokens)
        end = self.turn_end(tokens)
        if end is not None and end < n:
            raise ValueError(
                f"step_chunk got {n} tokens but the turn ends at token {end}; pass each turn up "
                "to and including its last token, then the next turn after the env's answer"
            )
        observations = tokens.copy()
        rewards = np.zeros(n, dtype=np.float64)
        terminateds, truncateds = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        infos: list[dict[str, Any]] = [EMPTY_INFO] * n
        self._turn.extend(tokens.tolist())
        self._state.extend(tokens.tolist())
        if end is not None:
            obs_ids, rewards[-1], terminateds[-1], truncateds[-1], infos[-1] = self._end_turn()
            if obs_ids:
                observations[-1] = obs_ids[-1]
        return ChunkResult(tokens, observations, rewards, terminateds, truncateds, infos)

    def close(self) -> None:
        close = getattr(self.text_env, "close", None)
        if close is not None:
            close()

    # --- what the env runner asks ---------------------------------------------------------------
    @property
    def tokens_left(self) -> int:
        """Tokens the budget still allows in this episode (agent tokens of the current turn)."""
        return self.response_length - len(self._state)

    def turn_end(self, tokens: Sequence[int]) -> int | None:
        """How many of `tokens` (continuing the current turn) the turn takes before it ends:
        after EOS, after a stop sequence, or where the budget runs out; None if it goes on."""
        turn = list(self._turn)
        for i, token in enumerate(tokens):
            turn.append(int(token))
            if token == self.eos_token_id or i + 1 >= self.tokens_left or any(
                    tuple(turn[-len(s):]) == s for s in self.stop_sequences):
                return i + 1
        return None

    def spawn(self) -> TextTurnEnv:
        """A new env for another concurrent episode: the text env's `spawn()` (shared data) when
        it has one, else a deep copy of it."""
        spawn = getattr(self.text_env, "spawn", None)
        text_env = spawn() if spawn is not None else copy.deepcopy(self.text_env)
        return TextTurnEnv(text_env, self.tokenizer, response_length=self.response_length,
                           max_turns=self.max_turns, observation_role=self.observation_role)

    def state_token_ids(self) -> list[int]:
        """The current state: prompt ids, then every token since (agent's and env's)."""
        return [*self._prompt_ids, *self._state]

    @property
    def num_problems(self) -> int:
        return self.text_env.num_problems

    @property
    def num_dropped_prompts(self) -> int:
        return getattr(self.text_env, "num_dropped_prompts", 0)

    @property
    def shard_order(self):
        """The text env's `shard_order` (AttributeError when it has none)."""
        return self.text_env.shard_order

    def order_state(self) -> dict[str, Any]:
        order_state = getattr(self.text_env, "order_state", None)
        return order_state() if order_state is not None else {}

    def set_order_state(self, state: Mapping[str, Any]) -> None:
        if state:
            self.text_env.set_order_state(state)

    def verifier_metrics(self) -> dict[str, int]:
        metrics = getattr(self.text_env, "verifier_metrics", None)
        return metrics() if metrics is not None else {}

    # --- internals ------------------------------------------------------------------------------
    def _end_turn(self) -> tuple[list[int], float, bool, bool, dict[str, Any]]:
        """Hand the finished turn to the text env; returns (env tokens, reward, terminated,
        truncated, info) of the turn's last step."""
        with _TOKENIZER_LOCK:
            turn_text = self.tokenizer.decode(self._turn, skip_special_tokens=True)
        budget_hit = self.tokens_left <= 0 and self._turn[-1] != self.eos_token_id and not any(
            tuple(self._turn[-len(s):]) == s for s in self.stop_sequences)
        self._turn = []
        self._turns += 1
        obs_text, reward, terminated, truncated, info = self.text_env.step(turn_text)
        reward = float(reward)
        if not np.isfinite(reward):
            raise ValueError(f"the text env returned reward={reward!r}; rewards must be finite")
        info = dict(info)
        obs_ids: list[int] = []
        # The budget cut the turn: the episode is over whatever the text env made of it.
        context_truncated, turn_limit = budget_hit, False
        if not (terminated or truncated or budget_hit):
            obs_ids = self._observation_ids(obs_text or "")
            if len(obs_ids) >= self.tokens_left:
                context_truncated, obs_ids = True, []  # no room for another agent token
            elif self._turns >= self.max_turns:
                turn_limit, obs_ids = True, []
        done = bool(terminated or truncated)
        if done or context_truncated or turn_limit:
            self._running = False
            truncated = bool(truncated) or context_truncated or turn_limit
            info.update({TURNS: self._turns, NUM_ENV_TOKENS: self._env_tokens,
                         CONTEXT_TRUNCATED: context_truncated, TURN_LIMIT: turn_limit})
            return obs_ids, reward, bool(terminated) and not truncated, truncated, info
        self._state.extend(obs_ids)
        self._env_tokens += len(obs_ids)
        info[ENV_TOKENS] = obs_ids
        return obs_ids, reward, False, False, info

    def _encode_prompt(self, prompt: str | list[dict[str, str]]) -> list[int]:
        from rllib_llm.models import encode_prompt

        if isinstance(prompt, str):
            return encode_prompt(self.tokenizer, prompt)
        if not self.chat:
            raise ValueError("the text env gave chat messages but the tokenizer has no chat "
                             "template; give a prompt string")
        rendered = self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True,
                                                      tokenize=False)
        return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])

    def _observation_ids(self, text: str) -> list[int]:
        plain = not self.observation_special_tokens
        with _TOKENIZER_LOCK:
            if not self.chat:
                return _encode(self.tokenizer, text, plain=plain)
            return chat_observation_ids(self.tokenizer, text, self.observation_role, plain=plain)

    def _check_tokens(self, actions: Sequence[int] | np.ndarray) -> np.ndarray:
        tokens = np.asarray(actions)
        if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer) or len(tokens) == 0:
            raise ValueError(f"step_chunk needs a non-empty 1-D sequence of token ids, got "
                             f"{actions!r:.80}")
        if tokens.min() < 0 or tokens.max() >= self.vocab_size:
            raise ValueError(f"token ids must be in [0, {self.vocab_size}); got {actions!r:.80}")
        return tokens.astype(np.int64)


def _encode(tokenizer: Any, text: str, *, plain: bool) -> list[int]:
    """`text`'s ids; `plain`: special tokens' text is not recognised (kept as characters)."""
    extra = {"split_special_tokens": True} if plain else {}
    return list(tokenizer(text, add_special_tokens=False, **extra)["input_ids"])


def chat_observation_ids(tokenizer: Any, text: str, role: str = "tool", *,
                         plain: bool = True) -> list[int]:
    """The tokens a chat template puts after the agent's end-of-turn token when a `role` message
    with `text` follows, up to and including the next assistant generation prompt.

    Found as the difference of two renderings, which works for templates that render a
    conversation as the concatenation of its messages (Llama, Qwen, SmolLM, ChatML...).
    `plain`: the message's text is tokenized without recognising special tokens (the template's
    own markers around it still are).
    """
    base = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    before = tokenizer.apply_chat_template(base, tokenize=False)
    after = tokenizer.apply_chat_template([*base, {"role": role, "content": text}],
                                          add_generation_prompt=True, tokenize=False)
    eos = tokenizer.decode([tokenizer.eos_token_id])
    cut = before.rfind(eos)
    if not after.startswith(before) or cut < 0:
        raise ValueError(
            "this chat template does not render a conversation as the concatenation of its "
            f"messages (or does not end the assistant's turn with {eos!r}); observation tokens "
            "cannot be placed after the agent's turn"
        )
    tail = after[cut + len(eos):]
    if not plain or not text:
        return _encode(tokenizer, tail, plain=False)
    start = tail.find(text)
    if start < 0:
        raise ValueError(
            f"this chat template changes the {role} message's text when it renders it, so the "
            "text cannot be tokenized apart from the template's markers; give the text env "
            "observation_special_tokens = True to tokenize the rendering as a whole")
    end = start + len(text)
    return (_encode(tokenizer, tail[:start], plain=False) + _encode(tokenizer, text, plain=True)
            + _encode(tokenizer, tail[end:], plain=False))
