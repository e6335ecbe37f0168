"""`rllib-llm train` runs an agent written with the `openai` client, named in its config file
(`openai_agent`, issue 48).

That an `openai`-client agent learns through the gateway is tested on
examples/openai_agents_sdk.py (tests/project/test_examples.py): the embedded tool task written
with the OpenAI Agents SDK, whose model calls go through the `openai` package's client to the same
endpoint, must gain 20 held-out points in 10 iterations (+42.4 measured). The synchronous client
of `recipes/embedded_agent.py` gained as much when it had a learning test of its own (2026-11-29,
seed 1, 10 iterations: +40.7, +41.8, +43.4 points; benchmarks/results/agents.md); that test
trained the same task through the same endpoint a second time, 2.5 minutes of `make test`, and
was folded into the example's. The exact tokens of both clients are tested in
tests/rollout/test_gateway*.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("openai")

AGENT_FILE = """
environment:
  env: openai_agent
  env_config: {agent: "rllib_llm.recipes.embedded_agent:solve", dataset: arithmetic,
               dataset_kwargs: {ops: "*"}, max_calls: 2}
training: {model_name_or_path: embedded_tool, rollout_batch_size: 8,
           num_return_sequences_in_group: 4, response_length: 64}
debugging: {seed: 0, log_level: ERROR}
run: {iterations: 2, progress: false}
"""


@pytest.mark.slow
def test_rllib_llm_train_runs_an_agent_named_in_a_config_file(tmp_path):
    """`rllib-llm train` with `openai_agent` in its file: the agent is imported by name in the
    trial's runner, and every episode of both iterations is kept."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "agent.yaml").write_text(AGENT_FILE)
    run = subprocess.run([sys.executable, "-m", "rllib_llm.cli", "train",
                          str(tmp_path / "agent.yaml"), "--run-dir", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).parents[2], env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    (result_file,) = (tmp_path / "run").glob("RLVR*/result.json")
    rows = [json.loads(line)["env_runners"] for line in result_file.open()]
    assert len(rows) == 2
    assert all(r["agent_error_fraction"] == 0 and r["agent_dropped_groups"] == 0 for r in rows)
    assert all(r["agent_calls_mean"] >= 1 for r in rows)
