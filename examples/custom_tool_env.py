"""A tool-use env of your own in a few lines: a tool function, a reward, and train.

    python examples/custom_tool_env.py [--iterations 150] [--min-gain 20]

The agent may write `<python>CODE</python>`; generation stops at the closing tag, the env runs
the tool on CODE and appends `<output>RESULT</output>`, and the agent goes on. A turn without a
tool call is its final answer, which `reward` scores. Here the tool is a calculator that only
evaluates integer arithmetic (so nothing the model writes can do harm and no sandbox is needed;
"math_tool" runs real Python in one), and the reward asks for the exact number.

The model is `embedded_tool`, the tiny char-level Llama taught a few tool-use transcripts: it
calls the tool on about a third of the two-digit products it sees and cannot multiply by
itself, so its accuracy rises as RL teaches it that calling the tool pays. The script exits with
status 1 if held-out accuracy rose by less than --min-gain points.
"""

import argparse
import ast
import operator
import sys

from ray.tune.registry import register_env
from rllib_llm.envs.tool_env import ToolOutput, tool_env
from topr_arithmetic import train_and_report

from rllib_llm import RLVRConfig
from rllib_llm.recipes.embedded import EMBEDDED_TOOL_TRAINING

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def calculator(code: str) -> str | ToolOutput:
    """`print(EXPR)` with EXPR of integers, +, - and *: the value; anything else is an error
    the agent sees (and the run counts in tool_error_fraction)."""

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("only integers, +, - and *")

    try:
        call = ast.parse(code.strip(), mode="eval").body
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", "") == "print"
                and len(call.args) == 1):
            raise ValueError("write print(EXPR)")
        return str(value(call.args[0]))
    except (SyntaxError, ValueError, RecursionError) as e:
        return ToolOutput(f"error: {e}", error=True)


def exact_number(final_text: str, answer: str) -> float:
    return float(final_text.strip() == answer)


def main(iterations: int, eval_problems: int, min_gain: float) -> bool:
    # Registered with Ray Tune by name, like any RLlib env: every env runner builds its own.
    register_env("calculator", lambda env_config: tool_env(
        env_config, tools={"python": calculator}, reward=exact_number))
    config = (
        RLVRConfig()
        .environment("calculator", env_config={
            "dataset": "arithmetic", "dataset_kwargs": {"ops": "*"},  # two-digit products
            "max_turns": 2,  # a tool call, then the answer
        })
        # The learning-rate schedule, batch shape and token budget calibrated for the tiny model
        # on tool use (rllib_llm/recipes/embedded.py).
        .training(**EMBEDDED_TOOL_TRAINING)
        .training(model_name_or_path="embedded_tool", pg_variant="topr")
        .debugging(seed=0)
    )
    return train_and_report(config, iterations, eval_problems, min_gain)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--eval-problems", type=int, default=500)
    parser.add_argument("--min-gain", type=float, default=20.0,
                        help="accuracy points the run must gain, else exit status 1")
    args = parser.parse_args()
    sys.exit(0 if main(args.iterations, args.eval_problems, args.min_gain) else 1)
