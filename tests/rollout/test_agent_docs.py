"""The 20-line agent of docs/AGENTS.md runs as written: its code block, as a module, trains
episodes of the embedded tool task with its sandboxed python tool and no agent errors."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("openai")

DOC = Path(__file__).parents[2] / "docs" / "AGENTS.md"
PROMPTS = 12


def test_the_documented_agent_runs_and_its_episodes_are_kept():
    from rllib_llm.envs.openai_agent_env import OpenAIAgentEnv

    from rllib_llm.models import load_model, load_tokenizer
    from rllib_llm.rollout.agent_rollouts import make_gateway, sample_agent_episodes
    from rllib_llm.rollout.torch_engine import TorchRolloutEngine

    code = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)[0]
    assert len(code.strip().splitlines()) <= 21  # "a 20-line agent" (and its file name)
    module = types.ModuleType("agents_doc_example")
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    tok = load_tokenizer("embedded_tool")
    engine = TorchRolloutEngine(load_model("embedded_tool"), eos_token_id=tok.eos_token_id,
                                pad_token_id=tok.pad_token_id)
    env = OpenAIAgentEnv({"agent": "agents_doc_example:solve", "model": "embedded_tool",
                          "dataset": "arithmetic", "dataset_kwargs": {"ops": "*"},
                          "response_length": 64, "prompt_length": 16})
    gateway = make_gateway(env, engine, temperature=1.0, top_p=1.0, response_length=64)
    try:
        # 12 prompts x 2: the untrained model calls the tool in about a third of its episodes,
        # so 8 episodes without one call happened ((2/3)**8 = 3.9%: once in a full suite); in
        # 24, (2/3)**24 < 1e-4.
        infos = [env.reset()[1] for _ in range(PROMPTS)]
        episodes, counts = sample_agent_episodes(env, gateway, infos, 2,
                                                 group_ids=[str(i) for i in range(PROMPTS)])
    finally:
        gateway.stop()
        env.close()
        del sys.modules[module.__name__]
    assert counts.errors == counts.timeouts == 0 and len(episodes) == 2 * PROMPTS
    assert counts.calls > 2 * PROMPTS  # some episodes called the tool
