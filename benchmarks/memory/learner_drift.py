"""How far two data-parallel learners' weights drift from one torch learner's, update by update:
DDP, DeepSpeed ZeRO-2 and FSDP2 in the harness of tests/learner/test_fsdp2.py (the embedded model
in float32, 4 prompts x 4 responses, 4 Adam steps per update at lr 1e-3 with a KL term).

    python benchmarks/memory/learner_drift.py [--updates 5 --only ddp zero2 fsdp2 ...]

Each row trains its learners beside a torch learner in the driver on the same episodes (sampled
with the torch learner's weights) and prints the largest weight difference after each update.
The rows marked "+ scoring" add what that test's first run adds (a distillation teacher,
use_remove_padding, use_fused_kernels; ZeRO has no teacher), each beside a torch learner with
the same settings. The question it answers: can any data-parallel strategy stay within 1e-6 of
one learner after five updates in float32 (issue 49)?
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "learner"))

# (key for --only, row label, learner_strategy, extra settings for both sides, for the pair only)
ROWS = (("ddp", "torch DDP", "torch", {}, {}),
        ("zero2", "DeepSpeed ZeRO-2", "deepspeed", {}, {}),
        ("fsdp2", "FSDP2", "fsdp2", {}, {}),
        ("ddp+scoring", "torch DDP + scoring", "torch", "SCORING", {}),
        ("fsdp2+scoring", "FSDP2 + scoring, gradient checkpointing", "fsdp2", "SCORING",
         {"gradient_checkpointing": True}))


def drift(strategy: str, both: dict, pair: dict, updates: int) -> list[float]:
    from test_fsdp2 import build, update_both  # the test's settings, seed and loop

    one, two = build("torch", 0, **both), build(strategy, 2, **both, **pair)
    try:
        return update_both(one, two, updates)[0]
    finally:
        one.stop()
        two.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--only", nargs="+", choices=[r[0] for r in ROWS])
    args = parser.parse_args()
    import ray
    from test_fsdp2 import SCORING

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    print("| learners | " + " | ".join(f"after {i + 1}" for i in range(args.updates)) + " |")
    print("|---|" + "---|" * args.updates)
    for key, label, strategy, both, pair in ROWS:
        if args.only is None or key in args.only:
            both = SCORING if both == "SCORING" else both
            values = drift(strategy, both, pair, args.updates)
            print(f"| {label} | " + " | ".join(f"{v:.1e}" for v in values) + " |", flush=True)


if __name__ == "__main__":
    main()
