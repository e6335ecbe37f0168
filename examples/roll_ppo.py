"""A ROLL config file, loaded as it is, trains the embedded model: ROLL's PPO (roll_ppo.yaml).

    python examples/roll_ppo.py [--config roll_topr.yaml] [--iterations 600] [--min-gain 20]

`load_roll_config` maps ROLL's field names onto RLVRConfig's and reports every field it cannot
map. The file's algorithm settings stay as they are; only the sizes that cannot fit the embedded
tiny model (a 128-token context, trained from scratch) are overridden, and each override is
printed. It exits with status 1 if held-out accuracy rose by less than --min-gain points, so CI
can run it with a short budget and know it learned. examples/roll_topr.py runs ROLL's TOPR file.
"""

import argparse
import sys
from pathlib import Path

from topr_arithmetic import train_and_report  # held-out accuracy, training, accuracy again

from rllib_llm.algorithm.roll_config import load_roll_config

# What ROLL's 2048 + 4096 tokens and a 7B model's learning rate become on the embedded model:
# its context and the learning-rate schedule and sampling temperature calibrated for it
# (rllib_llm/recipes/embedded.py). ROLL's 512 prompts per iteration with one response each stay: 512
# responses, as the embedded presets sample.
from rllib_llm.recipes.embedded import EMBEDDED_ROLL_ENV, EMBEDDED_ROLL_OVERRIDES

HERE = Path(__file__).resolve().parent


def main(config_file: str, iterations: int, eval_problems: int, min_gain: float) -> bool:
    roll = load_roll_config(HERE / config_file)
    print(roll.report())
    for name, value in EMBEDDED_ROLL_OVERRIDES.items():
        print(f"override for the embedded model: {name}: "
              f"{roll.settings.get(name, '(not in the file)')!r} -> {value!r}")
    config = (
        roll.to_rlvr_config(**EMBEDDED_ROLL_OVERRIDES, model_name_or_path="embedded")
        .environment(**EMBEDDED_ROLL_ENV)
        .debugging(seed=0)
    )
    return train_and_report(config, iterations, eval_problems, min_gain)


def parse_args(default_config: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=default_config,
                        help="a ROLL YAML file in examples/ (or a path)")
    parser.add_argument("--iterations", type=int, default=600)
    parser.add_argument("--eval-problems", type=int, default=500)
    parser.add_argument("--min-gain", type=float, default=20.0,
                        help="accuracy points the run must gain, else exit status 1")
    return parser.parse_args()


if __name__ == "__main__":
    args = parse_args("roll_ppo.yaml")
    sys.exit(0 if main(args.config, args.iterations, args.eval_problems, args.min_gain) else 1)
