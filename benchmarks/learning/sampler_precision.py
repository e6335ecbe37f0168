"""The sampler in the learner's precision: one on-policy TOPR iteration of SmolLM2-135M-Instruct
on `dataset="compare"` with the learner under bf16 autocast, the sampler once in float32 (the
default) and once under the same autocast (`sampler_autocast=True`).

    make setup-smollm2
    python benchmarks/learning/sampler_precision.py [--prompts 8 --group 8 --tokens 32 --seed 0]

With one optimizer step per batch the ratio pi / pi_old is the learner's log-prob over the
sampler's: exactly 1 if both compute the same numbers. Printed per sampler precision: clipfrac,
the ratio's min and max, approx_kl, and the seconds of generation and of the update (a 2-core CPU
here: share them as ratios measured in one run).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from rllib_llm import RLVRConfig

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import DEFAULT_SMOLLM2_DIR, smollm2_path  # noqa: E402


def one_iteration(model: str, args: argparse.Namespace, *, sampler_autocast: bool) -> dict:
    config = (
        RLVRConfig()
        .environment("math_verify", env_config={"dataset": "compare"})
        .training(model_name_or_path=model, pg_variant="topr", adv_estimator="grpo",
                  rollout_batch_size=args.prompts, num_return_sequences_in_group=args.group,
                  prompt_length=96, response_length=args.tokens, lr=2e-5, use_kl_loss=False,
                  temperature=1.0, autocast_dtype="bfloat16", sampler_autocast=sampler_autocast)
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    learner = result["learners"]["default_policy"]
    return {"sampler": "bf16 autocast" if sampler_autocast else "float32",
            **{k: round(float(learner[k]), 4)
               for k in ("clipfrac", "ratio_min", "ratio_max", "approx_kl")},
            "generate_s": round(result["env_runners"]["time_generate_s"], 2),
            "learn_s": round(result["timers"]["learn"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    notes: list[str] = []
    model = smollm2_path(args, notes)
    if model is None:
        print("; ".join(notes))
        return
    rows = [one_iteration(model, args, sampler_autocast=on) for on in (False, True)]
    print("| sampler | clipfrac | ratio min | ratio max | approx_kl | generate s | learn s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['sampler']} | {r['clipfrac']} | {r['ratio_min']} | {r['ratio_max']} | "
              f"{r['approx_kl']} | {r['generate_s']} | {r['learn_s']} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
