"""No value passes between methods through `self` (STYLE.md, habits 13 and 17): in the learner,
its connector, the algorithm, the env runner, the module and the math env, a method other than
set-up writes to `self` only the state it keeps across calls, each listed here with why. A new
write (a sink one method fills for another to read) fails here. Read from the source files:
nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (file, class) -> the methods that set the object up or restore it, and {method: the attributes
# it may write, why}.
CLASSES = {
    ("rllib_llm/algorithm/rlvr.py", "RLVR"): ({"setup"}, {}),
    ("rllib_llm/rollout/env_runner.py", "RLVREnvRunner"): (
        {"__init__", "make_module", "share_policy_model", "set_state", "_load_module_state"}, {
            "engine": {"_engine"},  # the engine, built on first use
            "sample": {"_last_sample_end"},  # the idle time between calls, a metric
            "_sample_agents": {"_gateway"},  # the agent gateway, started on first use
            "_log_sample_metrics": {"num_env_steps_sampled_lifetime"},  # RLlib's counter
            "_load_into_engine": {"_weights_seq_no", "_module_seq_no"},  # weights now loaded
        }),
    ("envs/math_verify_env.py", "MathVerifyEnv"): (
        {"__init__", "shard_order", "set_order_state"}, {
            # A gymnasium env is its episode's state: the prompt, the tokens, the data order.
            "reset": {"_order_pos", "_order", "_prompt_index", "_running", "_prompt_ids",
                      "_num_actions"},
            "_chosen_index": {"_order_pos", "_order"},
            "step": {"_actions", "_num_actions"},
            "step_chunk": {"_actions", "_num_actions"},
            "_finish": {"_running"},
        }),
    # The learner connector keeps the KL controller and the running score statistics; its stages
    # are functions that return their metrics, and __call__ logs them once.
    ("rllib_llm/learner/connector.py", "PackAndComputeAdvantages"): (
        {"__init__", "set_state"}, {}),
    ("rllib_llm/learner/module.py", "RLVRModule"): (
        {"setup"}, {"use_budgets": {"budgets"}}),  # the budgets sized for the learner's device
    # An update's methods write only counters kept across steps, each in the learner's
    # checkpoint; what a step's losses need is passed to them, what they compute returned.
    ("rllib_llm/learner/learner.py", "RLVRLearner"): (
        {"build", "set_state", "open_weight_broadcast"}, {
            "_update": {"_value_pretrain_done"},
            "_apply_step": {"_nonfinite_in_a_row"},
            "_count_nonfinite_step": {"_nonfinite_in_a_row", "_nonfinite_total"},
        }),
}


def self_writes(path: str, name: str) -> dict[str, set[str]]:
    """{method: attributes of `self` it assigns} for class `name` in `path`."""
    tree = ast.parse((ROOT / path).read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    written: dict[str, set[str]] = {}
    for method in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(method):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in (t for tt in targets for t in ast.walk(tt)):
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    written.setdefault(method.name, set()).add(target.attr)
    return written


@pytest.mark.parametrize("where", list(CLASSES), ids=lambda where: where[1])
def test_methods_write_to_self_only_the_state_they_keep(where):
    set_up, kept = CLASSES[where]
    extra = {method: attrs - kept.get(method, set())
             for method, attrs in self_writes(*where).items() if method not in set_up}
    assert {method: attrs for method, attrs in extra.items() if attrs} == {}


def test_the_getters_change_nothing():
    """The sampling parameters, the device's budgets and batched verification return values."""
    for (path, name), methods in {
            ("rllib_llm/rollout/env_runner.py", "RLVREnvRunner"): ("sampling_params",),
            ("rllib_llm/learner/module.py", "RLVRModule"): ("size_for_device",),
            ("envs/math_verify_env.py", "MathVerifyEnv"): ("verify_responses",)}.items():
        written = self_writes(path, name)
        assert all(method not in written for method in methods), (name, written)
