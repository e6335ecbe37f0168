"""An agent written with the OpenAI Agents SDK, trained as it is (`openai_agent`, docs/AGENTS.md).

    python examples/openai_agents_sdk.py [--iterations 10] [--min-gain 20]

The agent is ordinary Agents SDK code: an `Agent` with one function tool, `python`, that runs
the model's code in rllib_llm's sandbox, and `Runner.run` on the problem. Its model is the
episode's client, which points at the env runner's own OpenAI-compatible endpoint; every token
the model samples there is what the learner trains on. The task is the embedded tool task: the
tiny `embedded_tool` model calls the tool on about a third of two-digit products and cannot
multiply by itself, so accuracy rises as RL teaches it that calling pays. Needs
`pip install "rllib_llm[agents]" openai-agents`. Exits with status 1 if held-out accuracy (the
same agent's) rose by less than --min-gain points.
"""

from __future__ import annotations

import argparse
import sys

from agents import (
    Agent,
    MaxTurnsExceeded,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from rllib_llm.envs.sandbox import run_python
from topr_arithmetic import train_and_report

from rllib_llm import RLVRConfig
from rllib_llm.recipes.embedded import EMBEDDED_TOOL_TRAINING

set_tracing_disabled(True)  # the SDK would send traces to OpenAI's servers


@function_tool
def python(code: str) -> str:
    """Run Python code in a sandbox and see what it prints."""
    run = run_python(code, timeout_s=5.0)
    return run.stdout.strip()[:256] if run.exit_code == 0 else "error"


async def solve(client, problem):
    agent = Agent(name="solver", tools=[python],
                  model=OpenAIChatCompletionsModel(model=problem["model"], openai_client=client))
    try:  # a tool call, then the answer
        return (await Runner.run(agent, problem["prompt"], max_turns=2)).final_output
    except MaxTurnsExceeded:
        return ""  # still calling tools: no answer


def main(iterations: int, eval_problems: int, min_gain: float) -> bool:
    config = (
        RLVRConfig()
        .environment("openai_agent", env_config={
            "agent": solve, "dataset": "arithmetic", "dataset_kwargs": {"ops": "*"}})
        # The batch shape, token budget and learning rate calibrated for the tiny model on tool
        # use (rllib_llm/recipes/embedded.py).
        .training(**EMBEDDED_TOOL_TRAINING)
        .training(model_name_or_path="embedded_tool", pg_variant="topr")
        .debugging(seed=0)
    )
    return train_and_report(config, iterations, eval_problems, min_gain)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--eval-problems", type=int, default=500)
    parser.add_argument("--min-gain", type=float, default=20.0,
                        help="accuracy points the run must gain, else exit status 1")
    args = parser.parse_args()
    sys.exit(0 if main(args.iterations, args.eval_problems, args.min_gain) else 1)
