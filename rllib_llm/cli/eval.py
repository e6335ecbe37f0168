"""`rllib-llm eval MODEL`: pass@1 and pass@k of a policy on held-out problems.

    rllib-llm eval runs/my_run                       the run's latest policy, the run's settings
    rllib-llm eval exported/ --samples 4             a Hugging Face model directory
    rllib-llm eval embedded --num-problems 100 --json

MODEL is a run or checkpoint directory (`rllib_llm.outputs.checkpoints.find_checkpoint`), a Hugging
Face model directory (one with config.json), or a model name ("embedded", a hub id). The evaluation
is RLVR's own (`RLVR.evaluate_accuracy`): a checkpoint's run is rebuilt from its config with its
policy's weights restored, so its env, held-out data and evaluation settings are the defaults;
a model gets RLVRConfig's defaults, except that an export (`rllib-llm export`) samples as its
generation_config.json records the run's sampler: max_new_tokens as response_length, its
temperature (0, greedy, where do_sample is false) and top_p. Options override any of these; they
are evaluation settings (RLlib's `evaluation_config`), so e.g. --temperature 0 (greedy) is
allowed. Settings that cannot be evaluated (held-out problems that are the training ones) are
refused before anything is loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rllib_llm.algorithm.config import RLVRConfig

# Option -> the RLVRConfig field it sets in the evaluation config.
EVAL_OPTIONS = {
    "dataset": "eval_dataset",
    "split": "eval_split",
    "num_problems": "eval_num_problems",
    "samples": "eval_num_samples",
    "temperature": "temperature",
    "response_length": "response_length",
}


def add_parser(subparsers) -> None:
    from rllib_llm.cli.paths import path_or_name

    parser = subparsers.add_parser(
        "eval",
        help="pass@1 / pass@k of a run's policy or a model on held-out problems",
        description="Score a policy on held-out problems: pass@1 (mean correctness of all "
                    "samples) and pass@k (share of problems with a correct sample, k = "
                    "--samples). Defaults: a checkpoint's own run settings; for a model, "
                    f"RLVRConfig's ({_model_defaults()}), but an export samples as its "
                    "generation_config.json says (max_new_tokens, temperature, top_p).",
    )
    parser.add_argument("model", metavar="MODEL", type=path_or_name,
                        help="a run or checkpoint directory, a Hugging Face model directory, "
                             "or a model name ('embedded', a hub id)")
    parser.add_argument("--checkpoint", metavar="PATH",
                        help="the checkpoint or trial directory, relative to MODEL (or "
                             "absolute); needed when MODEL holds several trials")
    parser.add_argument("--env", help="environment (default: the run's, else 'math_verify')")
    parser.add_argument("--dataset", type=path_or_name,
                        help="held-out problems: 'arithmetic', a .jsonl/.json/.parquet file or "
                             "a Hugging Face dataset (eval_dataset; default: the env's dataset)")
    parser.add_argument("--split", help="split of the held-out problems (eval_split)")
    parser.add_argument("--num-problems", type=int, metavar="N",
                        help="score the first N held-out problems (eval_num_problems)")
    parser.add_argument("--samples", type=int, metavar="K",
                        help="responses per problem, pass@k has k = K (eval_num_samples)")
    parser.add_argument("--temperature", type=float, metavar="T",
                        help="sampling temperature, 0 = greedy (temperature)")
    parser.add_argument("--response-length", type=int, metavar="L",
                        help="most tokens per response (response_length)")
    parser.add_argument("--seed", type=int, metavar="S",
                        help="sampling seed (default: the run's seed, else 0)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(run=run)


def _model_defaults() -> str:
    """RLVRConfig's evaluation defaults in words, read from the fields (their one source)."""
    from rllib_llm.algorithm.fields import FIELDS_BY_NAME
    from rllib_llm.envs.env_config import MathVerifyEnvConfig

    default = {name: FIELDS_BY_NAME[name].default for name in EVAL_OPTIONS.values()}
    return (f"{default['eval_num_problems']} problems of {MathVerifyEnvConfig.dataset!r}, split "
            f"{default['eval_split']!r}, {default['eval_num_samples']} sample(s) each, "
            f"temperature {default['temperature']}, response_length "
            f"{default['response_length']}")


def run(args: argparse.Namespace) -> int:
    import ray

    from rllib_llm.cli.tune_runs import init_ray
    from rllib_llm.outputs.checkpoints import CheckpointError

    try:
        checkpoint = _checkpoint(args.model, args.checkpoint)
        config = eval_config(args, checkpoint)
        check_evaluable(config)
    except (CheckpointError, FileNotFoundError, ValueError) as e:
        print(f"rllib-llm eval: error: {e}", file=sys.stderr)
        return 2
    started = not ray.is_initialized()
    init_ray()
    try:
        result = evaluate(config, checkpoint, seed=args.seed)
    finally:
        if started:
            ray.shutdown()
    if args.json:
        print(json.dumps(result))
    else:
        print(_report(args.model if checkpoint is None else checkpoint, config, result,
                      args.seed))
    return 0


def _checkpoint(model: str, checkpoint: str | None) -> Path | None:
    """The checkpoint MODEL (and --checkpoint) name, or None when MODEL is a model."""
    from rllib_llm.models import MODEL_CONFIG, resolve_checkpoint
    from rllib_llm.outputs.checkpoints import find_checkpoint

    path = Path(model).expanduser()
    if checkpoint is not None or (path.is_dir() and not (path / MODEL_CONFIG).is_file()):
        return find_checkpoint(path, checkpoint)
    resolve_checkpoint(model, kind="model")  # a missing path or a broken directory fails here
    return None


def check_evaluable(config: RLVRConfig) -> None:
    """What RLVR would refuse only once built (seconds of loading later, as a traceback): the
    held-out problems must not be the training ones."""
    from rllib_llm.algorithm.config_rules.evaluation_rules import check_held_out

    check_held_out(config, config.get_evaluation_config_object())


def export_sampling(model: str) -> dict[str, Any]:
    """The evaluation settings an export's generation_config.json records (the run's sampler,
    `rllib_llm.outputs.checkpoints._generation_config`): response_length from max_new_tokens,
    temperature (0 where do_sample is false: greedy) and top_p. Empty for anything but an
    export of ours (a directory with `EXPORT_INFO`)."""
    from rllib_llm.outputs.checkpoints import EXPORT_INFO

    path = Path(model).expanduser()
    generation = path / "generation_config.json"
    if not (path / EXPORT_INFO).is_file() or not generation.is_file():
        return {}
    recorded = json.loads(generation.read_text())
    settings: dict[str, Any] = {}
    if isinstance(recorded.get("max_new_tokens"), int):
        settings["response_length"] = recorded["max_new_tokens"]
    if recorded.get("do_sample") is False:
        settings["temperature"] = 0.0
    elif isinstance(recorded.get("temperature"), (int, float)):
        settings["temperature"] = float(recorded["temperature"])
    if isinstance(recorded.get("top_p"), (int, float)):
        settings["top_p"] = float(recorded["top_p"])
    return settings


def eval_config(args: argparse.Namespace, checkpoint: Path | None) -> RLVRConfig:
    """What to evaluate with: the checkpoint's run config, or RLVRConfig's defaults for a model,
    sampling in this process, with the options given set in its evaluation config."""
    from rllib_llm.algorithm.config import RLVRConfig
    from rllib_llm.algorithm.fields import check_field
    from rllib_llm.outputs.checkpoints import load_run_config

    if checkpoint is None:
        config = RLVRConfig().environment(args.env or "math_verify").training(
            model_name_or_path=args.model)
    else:
        config = load_run_config(checkpoint)
        if args.env:
            config.environment(args.env)
    overrides = {} if checkpoint is not None else export_sampling(args.model)
    overrides.update({field: getattr(args, option) for option, field in EVAL_OPTIONS.items()
                      if getattr(args, option) is not None})
    for field, value in overrides.items():
        check_field(field, value, in_evaluation=True)
    return (config
            .env_runners(num_env_runners=0, weight_sync_backend="object_store")
            .learners(num_learners=0)
            .evaluation(evaluation_interval=None, evaluation_num_env_runners=0,
                        evaluation_config={**(config.evaluation_config or {}), **overrides}))


def evaluate(config: RLVRConfig, checkpoint: Path | None, *, seed: int | None) -> dict[str, Any]:
    """`RLVR.evaluate_accuracy` of `build_evaluator(config, checkpoint)`."""
    algo = build_evaluator(config, checkpoint)
    try:
        return algo.evaluate_accuracy(seed=seed)
    finally:
        algo.stop()


def build_evaluator(config: RLVRConfig, checkpoint: Path | None):
    """The algorithm `config` builds, with the checkpoint's policy weights restored into its
    learner (RLlib then syncs them to the env runner that samples)."""
    from rllib_llm.outputs.checkpoints import POLICY_MODULE

    algo = config.build_algo()
    if checkpoint is not None:
        try:
            algo.restore_from_path(checkpoint / POLICY_MODULE, component=POLICY_MODULE.as_posix())
        except BaseException:
            algo.stop()
            raise
    return algo


def _report(model: str | Path, config: RLVRConfig, result: dict[str, Any],
            seed: int | None) -> str:
    from rllib_llm.algorithm.held_out_evaluation import (
        NUM_PROBLEMS,
        PASS_AT_1,
        PASS_AT_K,
        SAMPLES_PER_PROBLEM,
    )

    ev = config.get_evaluation_config_object()
    dataset = ev.eval_dataset or (ev.env_config or {}).get("dataset", "the env's dataset")
    k = result[SAMPLES_PER_PROBLEM]
    lines = [
        f"model     {model}",
        f"problems  {result[NUM_PROBLEMS]} of {dataset} (split {ev.eval_split!r}), {k} "
        f"sample(s) each, temperature {ev.temperature}, response_length "
        f"{ev.response_length}, seed {(config.seed or 0) if seed is None else seed}",
        f"pass@1    {result[PASS_AT_1]:.4f}",
    ]
    if k > 1:  # (with one sample pass@k is pass@1)
        lines.append(f"pass@{k:<5d}{result[PASS_AT_K]:.4f}")
    return "\n".join(lines)
