"""The `embedded_tool` checkpoint and the transcripts it is taught (`models/tool_transcripts.py`):
a transcript is exactly the token sequence the "math_tool" env builds for the same turns, only
the agent's tokens are trained, and the shipped checkpoint keeps its calibration."""

from __future__ import annotations

import re

import pytest
import torch
from rllib_llm.envs.arithmetic import arithmetic_problems
from rllib_llm.envs.tool_env import tool_env

from rllib_llm.models import EMBEDDED_CHECKPOINTS, load_model, load_tokenizer, resolve_path
from rllib_llm.models.checkpoint_rates import tool_use_rates
from rllib_llm.models.sft import collate
from rllib_llm.models.tool_transcripts import tool_transcript, tool_transcripts

TOK = load_tokenizer("embedded_tool")


def product(code: str) -> str:
    """A trusted stand-in for the sandbox: only `print(A*B)`."""
    m = re.fullmatch(r"print\((\d+)\*(\d+)\)", code)
    return str(int(m[1]) * int(m[2]))


def agent_runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    """The maximal runs of mask-1 tokens: the agent's turns."""
    runs, current = [], []
    for token, m in zip(ids, mask, strict=True):
        if m:
            current.append(token)
        elif current:
            runs, current = [*runs, current], []
    return [*runs, current] if current else runs


@pytest.mark.parametrize("use_tool", [True, False])
def test_a_transcript_is_what_the_env_builds_for_the_same_turns(use_tool):
    env = tool_env({"model": "embedded_tool", "dataset_kwargs": {"ops": "*"},
                    "response_length": 64}, tools={"python": product})
    for index in range(5):
        _, info = env.reset(options={"prompt_index": index})
        problem = {"prompt": info["prompt"], "answer": info["answer"]}
        ids, mask = tool_transcript(TOK, problem, use_tool=use_tool)
        turns = agent_runs(ids, mask)
        assert len(turns) == (2 if use_tool else 1)
        for turn in turns:
            result = env.step_chunk(turn)
        assert env.state_token_ids() == ids  # prompt, agent, env, agent: token for token
        assert result.terminateds[-1] and result.rewards[-1] == 1.0
        text = TOK.decode(ids)
        if use_tool:
            a, b = problem["prompt"].rstrip("=").split("*")
            assert text.endswith(f"<python>print({a}*{b})</python><output>{problem['answer']}"
                                 f"</output>{problem['answer']}<eos>")
        # The prompt and the tool's output are never trained.
        trained = TOK.decode([t for t, m in zip(ids, mask, strict=True) if m])
        assert "<output>" not in trained and "=" not in trained


def test_sft_labels_cover_the_agents_tokens_only():
    problem = {"prompt": "12*34=", "answer": "408"}
    example = tool_transcript(TOK, problem, use_tool=True)
    input_ids, attention_mask, labels = collate([example, ([5, 6], [0, 1])], TOK.pad_token_id)
    assert TOK.decode([t for t in labels[0].tolist() if t != -100]) == \
        "<python>print(12*34)</python>408<eos>"
    assert labels[1].tolist()[:2] == [-100, 6] and (labels[1, 2:] == -100).all()
    assert attention_mask[1].tolist()[:3] == [1, 1, 0]


def test_the_tool_fraction_of_transcripts_is_what_is_asked():
    problems = arithmetic_problems("train", ops="*")[:2000]
    examples = tool_transcripts(TOK, problems, tool_fraction=0.3, seed=0)
    share = sum("<python>" in TOK.decode(ids) for ids, _ in examples) / len(examples)
    assert share == pytest.approx(0.3, abs=0.03)
    assert examples == tool_transcripts(TOK, problems, tool_fraction=0.3, seed=0)  # seeded
    with pytest.raises(ValueError, match="tool_fraction=1.5 must be in"):
        tool_transcripts(TOK, problems, tool_fraction=1.5, seed=0)


def test_embedded_tool_resolves_to_its_shipped_directory():
    assert resolve_path("embedded_tool") == str(EMBEDDED_CHECKPOINTS["embedded_tool"])
    assert len(TOK) == len(load_tokenizer("embedded"))  # the same char tokenizer


# Calibrated in embedded_tool/README.md (sampled, T=1, 500 test problems). The bands keep a
# retrain from losing the headroom RL needs: the checkpoint calls the tool only sometimes (RL must
# learn that it pays), calls it right and copies its output, and cannot multiply by itself.
@pytest.mark.slow
def test_the_shipped_tool_checkpoint_keeps_its_calibration():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rates = tool_use_rates(load_model("embedded_tool"), TOK,
                           arithmetic_problems("test", ops="*")[:200], do_sample=True, seed=0)
    assert 0.15 <= rates["tool_rate"] <= 0.5, rates
    assert rates["call_ok"] >= 0.6 and rates["copy_ok"] >= 0.6, rates
    assert rates["direct_ok"] <= 0.25, rates
