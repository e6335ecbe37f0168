"""Tool-use transcripts for the SFT warm start of `embedded_tool` (`pretrain --task tool`).

A transcript is one "math_tool" episode written out as the env would tokenize it
(`envs/text_turn_env.py`): the prompt, the agent's turns, and between them the environment's
observation tokens. Only the agent's tokens are trained (the loss mask), as in RL.

    prompt            47*83=
    agent (tool)      <python>print(47*83)</python>
    environment       <output>3901</output>
    agent (answer)    3901<eos>

A share `1 - tool_fraction` of the transcripts answer at once (`3901<eos>`, no tool). The model
learns both formats and cannot multiply two-digit numbers itself, so after SFT it calls the tool
only about as often as the transcripts did: RL then has to learn that calling it pays.
"""

from __future__ import annotations

import random

from transformers import PreTrainedTokenizerBase

from rllib_llm.models import encode_prompt

TOOL = "python"


def tool_call_text(prompt: str) -> str:
    """The agent's tool call for an arithmetic prompt "A*B=": `<python>print(A*B)</python>`."""
    return f"<{TOOL}>print({prompt.rstrip('=')})</{TOOL}>"


def observation_text(output: str) -> str:
    """What the environment appends after a tool call (`ToolEnv.step`)."""
    return f"<output>{output}</output>"


def tool_transcript(
    tokenizer: PreTrainedTokenizerBase, problem: dict[str, str], *, use_tool: bool
) -> tuple[list[int], list[int]]:
    """One transcript as `(token ids, loss mask)`: mask 1 on the agent's tokens, 0 on the
    prompt's and the environment's. Turns are encoded one by one, as the env does."""

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt = encode_prompt(tokenizer, problem["prompt"])
    ids, mask = list(prompt), [0] * len(prompt)
    if use_tool:
        call, obs = encode(tool_call_text(problem["prompt"])), encode(
            observation_text(problem["answer"]))
        ids += call + obs
        mask += [1] * len(call) + [0] * len(obs)
    answer = [*encode(problem["answer"]), tokenizer.eos_token_id]
    return ids + answer, mask + [1] * len(answer)


def tool_transcripts(
    tokenizer: PreTrainedTokenizerBase,
    problems: list[dict[str, str]],
    *,
    tool_fraction: float,
    seed: int,
) -> list[tuple[list[int], list[int]]]:
    """A transcript per problem; each uses the tool with probability `tool_fraction`."""
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError(f"tool_fraction={tool_fraction!r} must be in [0, 1]; use e.g. 0.3")
    rng = random.Random(seed)
    return [tool_transcript(tokenizer, p, use_tool=rng.random() < tool_fraction)
            for p in problems]
