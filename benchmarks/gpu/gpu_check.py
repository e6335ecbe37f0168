"""The GPU check: where every process computes, that training learns there, and the 403M shape
against TRL's GRPOTrainer, in one run sized for a short GPU loan (on one H200, 2026-11-27, with
80 placement iterations: 389 s in all, 218 s of it (b); 150 iterations add about 100 s; RESULTS.md).

    python benchmarks/gpu/gpu_check.py [--json PATH] [--parts placements shape]
    python benchmarks/gpu/gpu_check.py --parts shape --ours-set max_tokens_per_micro_batch=131072
    python benchmarks/gpu/gpu_check.py --parts shape --runs cuda_ipc async --profile
    python benchmarks/gpu/gpu_check.py --parts shape --shape 1.5b --runs
    python benchmarks/gpu/gpu_check.py --small [--json PATH]    # the same code paths on the CPU

(a) Placements. The embedded task (`rllib_llm.recipes.embedded.embedded_config`, TOPR) in three
    placements: one process (a local learner on the GPU, sampling with its model); a local
    learner on the GPU and one remote env runner holding half of it; a remote learner and a remote
    env runner, half a GPU each. Every process reports its device itself: each learner its
    parameters' (`foreach_learner`), each env runner, the driver's included, its module's and its
    engine's (`foreach_env_runner`). Held-out greedy pass@1 on 500 problems is scored before and
    after 150 iterations (the examples' budget); it learns when it rises by MIN_GAIN. Fewer swing
    with the seed on the split by operand pair: at 80 iterations on the CPU the "local learner +
    remote runner" placement ended at 0.574, 0.710 and 0.572 from 0.598 (seeds 0, 1, 2), and at
    150 at 0.668 and 0.710 (seeds 0, 2).
(b) The 403M shape against TRL. A randomly initialised Llama (hidden 1024, 24 layers, MLP 4096, 16
    heads, the embedded char tokenizer's 98 tokens: 403M parameters), GRPO on 32 prompts x 8
    responses x 256 tokens in bfloat16, one optimizer step per batch at a constant lr: rllib_llm
    with its default memory settings (a local learner on the GPU and one remote env runner at 0.5
    GPU) against TRL's GRPOTrainer with its defaults (gradient checkpointing, bf16) and the GRPO
    settings of benchmarks/peers/trl_comparison.py, each side in a process of its own. EOS never
    ends a response: the saved tokenizer's EOS is an id the model's logits do not have, so every
    response is exactly --tokens long on both sides (checked). Per side: s/update (median after
    the warm-up updates), each process's peak CUDA memory (max allocated and reserved, counted
    from the end of the warm-up), generated tokens/s, and the update's MFU: 6 x parameters x
    trained tokens (prompt + response) / learn seconds / the GPU's dense bf16 peak (989 TFLOP/s
    for H100/H200 SXM). Our side also reports the budgets its processes sized for their device
    (the "auto" settings), where an update's time goes (the env runner's generate, verify and
    replay, the rest of its sample call, the episodes' transfer to the driver, the learner, the
    weight sync and the runner's weight load: median seconds from the iteration's metrics), and,
    after the updates, its torch engine alone against `model.generate` on the same model, the
    same --prompts x --group prompts and --tokens, in the env runner's process (tokens/s), and,
    where the engine decodes from CUDA graphs (torch_engine_cuda_graphs), the same seeded call
    with its eager step: the speed-up, identical rows and the largest log-prob difference. It
    checks that the runner's engine holds the learner's weights after the last sync (each
    tensor's sum, the learner's cast to the engine's dtype as a sync casts it), and on a GPU it
    runs the shape again for 3 updates with weight_sync_backend='cuda_ipc', to time that sync
    against the shipped one and check its weights the same way. Then
    ours/TRL, and the goal: s/update <= 0.5x TRL's, learner + runner peak reserved <= 16 GiB,
    and the engine >= 3x `model.generate`.

    `--shape 1.5b` runs (b) on Qwen2.5-1.5B's shape at 32 x 8 x 512 instead (shapes.py: the shapes
    and the model written). `--runs` picks the short runs of our side beside the main one:
    cuda_ipc (the default, on a GPU), async (the asynchronous path at async_generation_ratio=1,
    max_staleness=1, as many updates as the main run: its s/update against the synchronous run's
    and TRL's, goal <= 0.3x TRL's), or none. `--profile` adds one update of the main run under
    torch.profiler after the measured ones: the learn phase by pass, kernels, launches, host
    gaps, top ops and MFU (profile_summary.py; the learner is local, so its process is traced).
    The tables are report_tables.py's.

The check fails (exit 1, after the tables) when a process given a GPU computes on the CPU, a
learner's parameters are not on its device after training, a part raises, a response ends before
--tokens, or (full mode) a placement does not learn. The goal is reported, not enforced.

`--small` (CI: tests/project/test_gpu_check.py) runs all of it on the CPU: no GPUs anywhere, 2
iterations per placement, a 2-layer Llama of hidden 64 on 4 prompts x 4 x 16 tokens in float32, 2
updates, peak RSS instead of CUDA memory. TRL is the `bench` extra; without it its side is skipped
with a note. On a GPU machine without Ray, gymnasium, math-verify or TRL, carry their wheels and
put them on PYTHONPATH (Ray's workers inherit it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

# The script's folder is on sys.path (also in the children it starts: they run this file).
import profile_summary
from report_tables import compare, print_placements, print_shape
from shapes import LR, PROMPTS_FILE, SHAPES, Sizes, write_model

GIB = 2**30
# Dense bf16 peak of one GPU in FLOP/s, by a piece of `torch.cuda.get_device_name()` (first match).
PEAK_BF16_FLOPS = (("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12))
CHILD_TIMEOUT_S = 300  # each side of a shape (403M: about a minute or two on a GPU)
MIN_GAIN = 0.05  # held-out greedy pass@1 gain that counts as learning (full mode)
# Settings that bound memory, printed with the values our side ran with (where the config has them).
MEMORY_SETTINGS = ("model_dtype", "micro_batch_size", "max_tokens_per_micro_batch",
                   "gradient_checkpointing", "max_tokens_per_generate_batch", "use_fused_kernels")


# --- what each process reports about itself (run inside it by foreach_learner/env_runner) --------
def learner_report(learner) -> dict:
    """The learner's device: where its parameters are, and where RLlib placed it."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    params = next(module.parameters())
    return {"role": "learner", "pid": os.getpid(), "device": str(params.device),
            "assigned": str(learner.device),
            # What the "auto" settings became on this device (printed at build as well).
            "sized": {"max_tokens_per_micro_batch": module.micro_batch_tokens,
                      "gradient_checkpointing": module.gradient_checkpointing}}


def runner_report(runner) -> dict:
    """An env runner's device: its module's parameters, and its engine's (once built)."""
    engine = runner.built_engine
    report = {"role": f"env runner {runner.worker_index}", "index": runner.worker_index,
              "pid": os.getpid(), "device": str(next(runner.module.parameters()).device),
              "engine": str(engine.device) if engine is not None else "not built"}
    if engine is not None and hasattr(engine, "max_tokens_per_batch"):  # the torch engine
        report["sized"] = {"max_tokens_per_generate_batch": engine.max_tokens_per_batch}
    return report


def reset_peak_memory(_=None) -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_memory(_=None) -> dict:
    """This process's peak RSS, and where CUDA is, its peak allocated and reserved CUDA memory
    since the last `reset_peak_memory` (GiB)."""
    import resource

    import torch

    peak = {"pid": os.getpid(),
            "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB}
    if torch.cuda.is_available():
        peak.update(allocated_gib=torch.cuda.max_memory_allocated() / GIB,
                    reserved_gib=torch.cuda.max_memory_reserved() / GIB)
    return peak


def runner_peak_memory(runner) -> tuple[str, dict]:
    return f"env runner {runner.worker_index}", peak_memory()


def runner_weight_sums(runner) -> dict[str, tuple[str, float]]:
    """Each of the engine's weights: its dtype and its sum (float64)."""
    return {name: (str(t.dtype), t.double().sum().item())
            for name, t in runner.engine.model.state_dict().items()}


def learner_weight_sums(dtypes: dict[str, str]):
    """`fn(learner)`: the sums of the learner's weights, each cast first to the runner's dtype
    (the cast a sync makes); None for a name the runner lacks."""
    def sums(learner) -> dict[str, float | None]:
        import torch
        from ray.rllib.core import DEFAULT_MODULE_ID

        weights = learner.module[DEFAULT_MODULE_ID].unwrapped().policy_weights()
        return {name: t.detach().to(getattr(torch, dtypes[name].split(".")[-1])).double()
                .sum().item() if name in dtypes else None for name, t in weights.items()}
    return sums


def weights_synced(algo) -> dict:
    """Whether every remote runner's engine holds the learner's weights after the last sync:
    the learner's tensors a runner lacks, and those whose sums differ (both sides make the same
    cast, so equal weights give equal sums)."""
    out = {"backend": algo.config.weight_sync_backend, "runners": []}
    for runner in on_runners(algo, runner_weight_sums, local=False):
        learner = algo.learner_group.foreach_learner(learner_weight_sums(
            {k: dtype for k, (dtype, _) in runner.items()})).result_or_errors[0].get()
        out["runners"].append({
            "missing": sorted(k for k, total in learner.items() if total is None),
            "differ": sorted(k for k, total in learner.items()
                             if total is not None and total != runner[k][1]),
        })
    out["ok"] = all(not r["missing"] and not r["differ"] for r in out["runners"])
    return out


def on_runners(algo, func, *, local: bool = True) -> list:
    """`func(runner)` on every env runner; raises a runner's error (RLlib returns it instead)."""
    results = algo.env_runner_group.foreach_env_runner(func, local_env_runner=local)
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


def process_reports(algo) -> list[dict]:
    learners = [r.get() for r in algo.learner_group.foreach_learner(learner_report)
                .result_or_errors]
    return learners + on_runners(algo, runner_report)


def gpu_given(config, report: dict) -> bool | None:
    """Whether the config gives this process a GPU to compute on; None for the driver's env
    runner beside remote ones, which does not sample."""
    if report["role"] == "learner":
        return config.num_gpus_per_learner > 0
    if report["index"]:
        return config.num_gpus_per_env_runner > 0
    if config.num_env_runners:
        return None
    if config.num_learners == 0:  # one process: it samples with the local learner's model
        return config.num_gpus_per_learner > 0
    return config.num_gpus_per_env_runner > 0


def same_device(a: str, b: str) -> bool:
    """"cuda" and "cuda:0" are one device."""
    (kind_a, _, index_a), (kind_b, _, index_b) = a.partition(":"), b.partition(":")
    return kind_a == kind_b and (index_a or "0") == (index_b or "0")


def device_problems(config, reports: list[dict]) -> list[str]:
    """A GPU-given process on the CPU; a learner whose parameters left its device."""
    problems = []
    for r in reports:
        r["gpu_given"] = gpu_given(config, r)
        devices = [r["device"]] + ([r["engine"]] if r.get("engine", "not built") != "not built"
                                   else [])
        if r["gpu_given"] and any(not d.startswith("cuda") for d in devices):
            problems.append(f"{r['role']} (pid {r['pid']}) was given a GPU but computes on "
                            f"{', '.join(devices)}")
        if r["role"] == "learner" and not same_device(r["device"], r["assigned"]):
            problems.append(f"learner (pid {r['pid']}): parameters on {r['device']} after "
                            f"training, not on its device {r['assigned']}")
    return problems


# --- (a) placements ------------------------------------------------------------------------------
def one_process(config, gpu: float):
    return config.learners(num_learners=0, num_gpus_per_learner=gpu).env_runners(
        num_env_runners=0)


def local_learner_remote_runner(config, gpu: float):
    return config.learners(num_learners=0, num_gpus_per_learner=gpu).env_runners(
        num_env_runners=1, num_gpus_per_env_runner=gpu / 2)


def remote_learner_remote_runner(config, gpu: float):
    return config.learners(num_learners=1, num_gpus_per_learner=gpu / 2).env_runners(
        num_env_runners=1, num_gpus_per_env_runner=gpu / 2)


PLACEMENTS = {
    "one process": one_process,
    "local learner + remote runner": local_learner_remote_runner,
    "remote learner + remote runner": remote_learner_remote_runner,
}


def run_placement(name: str, sizes: Sizes) -> dict:
    """Build the embedded task in placement `name`, train `sizes.iterations` iterations, and
    score held-out greedy pass@1 before and after; every process reports its device."""
    from rllib_llm.recipes.embedded import embedded_config

    config = PLACEMENTS[name](embedded_config("topr", seed=0), sizes.gpu)
    out = {"placement": name, "learner_gpus": config.num_gpus_per_learner,
           "num_learners": config.num_learners, "num_env_runners": config.num_env_runners,
           "runner_gpus": config.num_gpus_per_env_runner}
    algo = config.build_algo()
    try:
        out["before"] = algo.evaluate_accuracy(num_problems=sizes.eval_problems,
                                               temperature=0)["pass@1"]
        seconds = []
        for _ in range(sizes.iterations):
            start = time.perf_counter()
            algo.train()
            seconds.append(time.perf_counter() - start)
        out["after"] = algo.evaluate_accuracy(num_problems=sizes.eval_problems,
                                              temperature=0)["pass@1"]
        out["s_per_iteration"] = statistics.median(seconds)
        out["processes"] = process_reports(algo)
        out["problems"] = device_problems(config, out["processes"])
    finally:
        algo.stop()
    return out


# --- (b) our side, in a process of its own (connected to the driver's Ray) -----------------------
def shape_config(sizes: Sizes, path: str, overrides: dict | None = None):
    """GRPO as benchmarks/peers/trl_comparison.py runs it, on the 403M shape; memory settings at
    their defaults unless `overrides` (--ours-set) names training settings. A local learner on the
    GPU, one remote env runner at half of it; a learner_strategy that shards ('fsdp2',
    'deepspeed': ranks of RLlib's remote learner group) gets one remote learner at the other
    half."""
    from rllib_llm import RLVRConfig

    remote = (overrides or {}).get("learner_strategy", "torch") != "torch"
    learners = dict(num_learners=1, num_gpus_per_learner=sizes.gpu / 2) if remote else \
        dict(num_learners=0, num_gpus_per_learner=sizes.gpu)
    return (RLVRConfig()
            .environment("math_verify", env_config={"dataset": "arithmetic"})
            .training(model_name_or_path=path, model_dtype=sizes.dtype, pg_variant="ppo",
                      adv_estimator="grpo", rollout_batch_size=sizes.prompts,
                      num_return_sequences_in_group=sizes.group, response_length=sizes.tokens,
                      lr=LR, use_kl_loss=False, pg_clip=0.2, grad_clip=1.0, temperature=1.0,
                      advantage_clip=None)
            .training(**(overrides or {}))
            .learners(**learners)
            .env_runners(num_env_runners=1, num_gpus_per_env_runner=sizes.gpu / 2)
            .debugging(seed=0, log_level="ERROR"))


def metric(result: dict, key: str, default=None):
    for part in key.split("/"):
        if default is not None and part not in result:
            return default
        result = result[part]
    return result


def phase_times(result: dict, backend: str, update_s: float) -> dict:
    """Where one update of `update_s` seconds went, from its result: the env runner's sample
    call by part (rollout/sample_metrics.py), the driver's timers, the runner's weight load and
    the rest of the driver's time; they add up to `update_s`. A direct sync (`backend` not
    'object_store') waits for the load, so its timer holds it; the object store's only sends,
    and the driver's next call to the runner waits for the load instead (measured on the CPU:
    87 ms of a 50M model's update), so there the load counts as much of it as the driver's rest
    waited for."""
    from rllib_llm.outputs import metric_names as m
    from rllib_llm.rollout.sample_metrics import WEIGHT_LOAD_S

    call, sample = metric(result, m.SAMPLE_CALL_S), metric(result, m.TIME_SAMPLE_S)
    learn, sync = metric(result, m.TIME_LEARN_S), metric(result, m.TIME_WEIGHT_SYNC_S)
    load = metric(result, f"env_runners/{WEIGHT_LOAD_S}", 0.0)
    rest = update_s - sample - learn - sync  # outside the driver's timers (metrics, bookkeeping)
    if backend == "object_store":
        load = min(load, max(rest, 0.0))
        rest -= load
    else:
        sync -= load
    parts = {"generate": metric(result, m.GENERATE_S), "verify": metric(result, m.VERIFY_S),
             "replay": metric(result, m.REPLAY_S)}
    return {**parts, "rest of the sample call": call - sum(parts.values()),
            "transfer to the driver": sample - call, "learn": learn,
            "weight sync (driver)": sync, "weight load (runner)": load,
            "rest of the update (driver)": rest}


def engine_vs_generate(runner, prompts: int, group: int, tokens: int) -> dict:
    """The env runner's torch engine alone against `model.generate` on the engine's own model,
    in the runner's process: the same `prompts` prompts x `group` samples x `tokens` tokens,
    sampled at temperature 1 (EOS never ends a response in the 403M shape), each timed after a
    short warm-up; seconds, tokens and tokens/s of each, and the engine's speed-up."""
    import torch

    from rllib_llm.exchange.columns import PROMPT_IDS
    from rllib_llm.rollout.engine import SamplingParams

    engine, tok = runner.engine, runner.env.tokenizer
    batch = [list(runner.env.reset()[1][PROMPT_IDS]) for _ in range(prompts)]
    engine.generate(batch[:1], 1, SamplingParams(max_tokens=2, seed=0))
    start = time.perf_counter()
    responses = engine.generate(batch, group, SamplingParams(max_tokens=tokens, seed=0))
    engine_s = time.perf_counter() - start
    engine_tokens = sum(len(r.token_ids) for g in responses for r in g)
    rows = [p for p in batch for _ in range(group)]
    width = max(len(p) for p in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id, device=engine.device)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(rows):  # left-padded, as the engine pads
        ids[i, width - len(p):] = torch.tensor(p, device=engine.device)
        mask[i, width - len(p):] = 1
    model, was_training = engine.model, engine.model.training
    model.eval()

    def generate(new_tokens: int) -> int:
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                 temperature=1.0, top_p=1.0, max_new_tokens=new_tokens,
                                 pad_token_id=tok.pad_token_id)
        return int(out[:, width:].numel())  # (no EOS: every row runs to new_tokens)

    try:
        generate(2)
        start = time.perf_counter()
        generate_tokens = generate(tokens)
        generate_s = time.perf_counter() - start
    finally:
        model.train(was_training)
    out = {"engine_s": engine_s, "engine_tokens": engine_tokens,
           "engine_tokens_per_s": engine_tokens / engine_s, "generate_s": generate_s,
           "generate_tokens": generate_tokens,
           "generate_tokens_per_s": generate_tokens / generate_s}
    out["speedup"] = out["engine_tokens_per_s"] / out["generate_tokens_per_s"]
    if engine.decode_step == "cuda_graph":
        out.update(graphs_against_eager(engine, batch, group, tokens, responses))
    out["graph_failure"] = engine.graph_failure  # a capture that fell back to the eager step
    return out


def graphs_against_eager(engine, batch, group: int, tokens: int, graphed) -> dict:
    """The same seeded call with the engine's eager decode step: its speed, and how far the
    CUDA-graph step's samples are from it (the graph's step attends over the whole cache with a
    mask, so only float rounding differs: identical rows, and the log-probs' largest difference
    over each row's tokens before it first differs)."""
    from rllib_llm.rollout.engine import SamplingParams

    engine.decode_step = "eager"
    try:
        start = time.perf_counter()
        eager = engine.generate(batch, group, SamplingParams(max_tokens=tokens, seed=0))
        eager_s = time.perf_counter() - start
    finally:
        engine.decode_step = "cuda_graph"
    rows = same = 0
    worst = 0.0
    for graph_group, eager_group in zip(graphed, eager, strict=True):
        for a, b in zip(graph_group, eager_group, strict=True):
            agree = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y),
                         min(len(a.token_ids), len(b.token_ids)))
            rows += 1
            same += a.token_ids == b.token_ids
            if agree:
                worst = max(worst, max(abs(x - y) for x, y in
                                       zip(a.logprobs[:agree], b.logprobs[:agree], strict=True)))
    eager_tokens = sum(len(r.token_ids) for g in eager for r in g)
    return {"eager_s": eager_s, "eager_tokens_per_s": eager_tokens / eager_s,
            "identical_rows": same / rows, "max_logp_difference": worst}


def run_ours(sizes: Sizes, path: str, ray_address: str, overrides: dict,
             engine_check: bool = True, profile: bool = False) -> dict:
    """Our side: `sizes.updates` updates, then (`profile`) one more under torch.profiler, not
    counted in the medians (profile_summary.py), then the checks and the engine alone."""
    import ray

    from rllib_llm.outputs.metric_names import RESPONSE_LENGTH, TIME_LEARN_S, TIME_SAMPLE_S

    ray.init(address=ray_address, log_to_driver=False)
    config = shape_config(sizes, path, overrides)
    algo = config.build_algo()
    try:
        rows = []
        for update in range(sizes.updates):
            if update == sizes.warmup:
                algo.learner_group.foreach_learner(reset_peak_memory)
                on_runners(algo, reset_peak_memory, local=False)
            start = time.perf_counter()
            result = algo.train()
            update_s = time.perf_counter() - start
            rows.append({"update_s": update_s, "sample_s": metric(result, TIME_SAMPLE_S),
                         "learn_s": metric(result, TIME_LEARN_S),
                         "response_tokens": metric(result, RESPONSE_LENGTH)})
            if not config.async_generation_ratio:  # (overlapped, the phases do not add up)
                rows[-1]["phases"] = phase_times(result, config.weight_sync_backend, update_s)
        profiled = profiled_update(algo) if profile else None
        synced = weights_synced(algo)
        learner = algo.learner_group.foreach_learner(peak_memory).result_or_errors[0].get()
        where = "remote" if config.num_learners else "driver"
        memory = {f"learner ({where})": learner,
                  **dict(on_runners(algo, runner_peak_memory, local=False))}
        processes = process_reports(algo)
        # The memory settings, and whatever --ours-set changed (the table's settings line).
        settings = {name: getattr(config, name) for name in dict.fromkeys(
            (*MEMORY_SETTINGS, *overrides)) if hasattr(config, name)}
        # After the peaks are read: model.generate's memory is not ours.
        engine, = on_runners(algo, lambda runner: engine_vs_generate(
            runner, sizes.prompts, sizes.group, sizes.tokens), local=False) \
            if engine_check else (None,)
    finally:
        algo.stop()
    return {"measured": rows[sizes.warmup:], "memory": memory, "processes": processes,
            "problems": device_problems(config, processes), "settings": settings,
            "sized": {k: v for p in processes for k, v in p.get("sized", {}).items()},
            "engine_vs_generate": engine, "weights_synced": synced, "profile": profiled}


def profiled_update(algo) -> dict:
    """One update under torch.profiler, summarised (the learner is local: in this process; the
    env runner's process is not traced), with its learn seconds from its metrics."""
    from rllib_llm.outputs.metric_names import TIME_LEARN_S

    start = time.perf_counter()
    try:
        result, trace = profile_summary.profiled(algo.train)
        summary = profile_summary.summarize(trace)
    except Exception as e:  # reported (a failure); the measured updates stand
        return {"error": repr(e)[:500]}
    return {**summary, "update_learn_s": metric(result, TIME_LEARN_S),
            "profiled_update_s": time.perf_counter() - start}


# --- (b) TRL's side, in a process of its own ------------------------------------------------------
def run_trl(sizes: Sizes, path: str) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rllib_llm.models import DTYPES

    torch.set_num_threads(1)  # as our processes (num_torch_threads)
    on_gpu = bool(sizes.gpu) and torch.cuda.is_available()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[sizes.dtype])
    prompts = json.loads((Path(path) / PROMPTS_FILE).read_text())

    def reward(prompts, completions, **kwargs):  # a random model: all 0, as on our side
        return [0.0] * len(prompts)

    class Timer(TrainerCallback):
        """Wall time of each optimizer step; peak memory counted from the end of the warm-up."""

        def __init__(self):
            self.steps: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == sizes.warmup:
                reset_peak_memory()
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.steps.append(time.perf_counter() - self.start)

    # trl_comparison.py's GRPO settings; TRL's defaults for the rest (gradient checkpointing on).
    # One optimizer step per batch, in micro-batches of the shape's trl_micro_batch rows.
    batch_rows = sizes.prompts * sizes.group
    micro = sizes.trl_micro_batch or batch_rows
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=micro,
        gradient_accumulation_steps=batch_rows // micro, num_generations=sizes.group,
        max_completion_length=sizes.tokens, learning_rate=LR, lr_scheduler_type="constant",
        warmup_steps=0, max_steps=sizes.updates, beta=0.0, epsilon=0.2, num_iterations=1,
        loss_type="grpo", scale_rewards="group", temperature=1.0, top_p=1.0, max_grad_norm=1.0,
        weight_decay=0.0, use_cpu=not on_gpu, bf16=sizes.dtype == "bfloat16", report_to=[],
        logging_steps=1, save_strategy="no", seed=0, disable_dropout=True)
    timer = Timer()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config,
                          train_dataset=Dataset.from_dict({"prompt": prompts}),
                          processing_class=tokenizer, callbacks=[timer])
    generate_s = []
    generate = trainer._generate_and_score_completions  # timed: the step's sampling phase

    def timed_generate(*args, **kwargs):
        start = time.perf_counter()
        out = generate(*args, **kwargs)
        generate_s.append(time.perf_counter() - start)
        return out

    trainer._generate_and_score_completions = timed_generate
    trainer.train()
    lengths = [h["completions/min_length"] for h in trainer.state.log_history
               if "completions/min_length" in h]
    rows = [{"update_s": s, "sample_s": g, "learn_s": s - g, "response_tokens": n}
            for s, g, n in zip(timer.steps, generate_s, lengths)]
    device = str(next(model.parameters()).device)
    return {"measured": rows[sizes.warmup:], "memory": {"GRPOTrainer": peak_memory()},
            "settings": {"gradient_checkpointing": config.gradient_checkpointing,
                         "bf16": config.bf16, "model_dtype": sizes.dtype,
                         "per_device_train_batch_size": config.per_device_train_batch_size,
                         "gradient_accumulation_steps": config.gradient_accumulation_steps,
                         "steps_per_generation": config.steps_per_generation},
            "device": device, "problems": [f"the trainer computes on {device}"]
            if on_gpu and not device.startswith("cuda") else []}


# --- (b) the driver: both sides, then the comparison ---------------------------------------------
def run_child(side: str, sizes: Sizes, path: str, timeout_s: float, *extra: str) -> dict:
    """Run one side in a fresh interpreter; its last stdout line is its result as JSON, else
    {"error": ...} with the last lines of its stderr (all of it is echoed to ours)."""
    cmd = [sys.executable, __file__, "--child", side, "--path", path,
           "--sizes", json.dumps(asdict(sizes)), *extra]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr[-8000:])
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-3:]
        return {"error": f"exit {proc.returncode}: {' / '.join(tail)}"}
    return json.loads(lines[-1])


def summarise(side: dict, sizes: Sizes, model: dict, peak_flops: float | None) -> None:
    """Medians of the measured updates, tokens/s and MFU, added to `side`."""
    rows = side["measured"]
    med = {k: statistics.median(r[k] for r in rows) for k in ("update_s", "sample_s", "learn_s")}
    responses = sizes.prompts * sizes.group
    if all("phases" in r for r in rows):  # (ours)
        side["phases"] = {k: statistics.median(r["phases"][k] for r in rows)
                          for k in rows[0]["phases"]}
    side.update(med, tokens_per_s=responses * sizes.tokens / med["update_s"],
                generate_tokens_per_s=responses * sizes.tokens / med["sample_s"],
                full_length=all(r["response_tokens"] == sizes.tokens for r in rows),
                mfu=(update_flops(sizes, model) / med["learn_s"] / peak_flops
                     if peak_flops else None))


def update_flops(sizes: Sizes, model: dict) -> float:
    """An update's training FLOPs for MFU: 6 x parameters x trained tokens (prompt + response;
    forward + backward; the scoring passes and recomputed activations not counted)."""
    trained = sizes.prompts * sizes.group * (model["mean_prompt_tokens"] + sizes.tokens)
    return 6 * model["parameters"] * trained


def gpu_peak_flops(sizes: Sizes) -> tuple[str, float | None]:
    import torch

    if not sizes.gpu or not torch.cuda.is_available():
        return "CPU", None
    name = torch.cuda.get_device_name(0)
    return name, next((flops for key, flops in PEAK_BF16_FLOPS if key in name), None)


# The short runs of our side that --runs adds beside the main one: name -> (the settings it adds,
# updates or None for the main run's, GPU only). cuda_ipc: the CUDA IPC weight sync, not yet the
# default, timed and checked (its weights) in a short run; async: the asynchronous path at
# max_staleness=1 (one batch generated ahead while the learner updates), its s/update against
# the synchronous run's and TRL's.
EXTRA_RUNS = {
    "cuda_ipc": ({"weight_sync_backend": "cuda_ipc"}, 2, True),
    "async": ({"async_generation_ratio": 1, "max_staleness": 1}, None, False),
}


@dataclass(frozen=True)
class ShapeOptions:
    """What the shape part runs (from the command line)."""

    skip_trl: bool = False
    overrides: dict = field(default_factory=dict)  # --ours-set: our side's training settings
    runs: tuple[str, ...] = ("cuda_ipc",)  # --runs: EXTRA_RUNS beside our main run
    profile: bool = False  # --profile: one more update of our main run under torch.profiler


def run_shape(sizes: Sizes, options: ShapeOptions, out: dict, save) -> None:
    """Our main run, TRL's side, then our extra runs, one after the other, into `out`, summarised
    and saved after each (a step's timeout then loses only what had not finished)."""
    import ray

    gpu_name, peak = gpu_peak_flops(sizes)
    out.update(gpu=gpu_name, peak_bf16_flops=peak, sizes=asdict(sizes), comparison={})
    overrides = options.overrides

    def checkpoint() -> None:
        summarise_all(out, sizes, peak)
        save()

    with tempfile.TemporaryDirectory() as tmp:
        out["model"] = write_model(sizes, Path(tmp))
        free_cuda_cache()
        address = ray.get_runtime_context().gcs_address
        out["ours"] = run_child("ours", sizes, tmp, CHILD_TIMEOUT_S, "--ray-address", address,
                                "--overrides", json.dumps(overrides),
                                *(["--profile"] if options.profile else []))
        checkpoint()
        out["trl"] = run_trl_side(sizes, tmp, options.skip_trl)
        checkpoint()
        for name in options.runs:
            settings, measured, gpu_only = EXTRA_RUNS[name]
            if (gpu_only and not sizes.gpu) or all(overrides.get(k) == v
                                                   for k, v in settings.items()):
                continue  # (the main run is this one already)
            updates = sizes.updates if measured is None else sizes.warmup + measured
            out[f"ours_{name}"] = run_child(
                "ours", replace(sizes, updates=updates), tmp, CHILD_TIMEOUT_S,
                "--ray-address", address, "--no-engine-check", "--overrides",
                json.dumps({**overrides, **settings}))
            checkpoint()


def run_trl_side(sizes: Sizes, path: str, skip: bool) -> dict:
    import importlib.util

    if skip:
        return {"skipped": "--skip-trl"}
    if importlib.util.find_spec("trl") is None:
        return {"skipped": "TRL not installed (pip install -e '.[bench]')"}
    return run_child("trl", sizes, path, CHILD_TIMEOUT_S)


def summarise_all(out: dict, sizes: Sizes, peak: float | None) -> None:
    """Each finished side's medians, the profiled update's MFU, the comparison (idempotent)."""
    for side in ("ours", "trl", *(f"ours_{name}" for name in EXTRA_RUNS)):
        if "measured" in out.get(side, {}):
            summarise(out[side], sizes, out["model"], peak)
    profile = out["ours"].get("profile") or {}
    if profile.get("passes"):
        out["ours"]["profile"] = profile_summary.with_mfu(
            profile, flops=update_flops(sizes, out["model"]), peak_flops=peak,
            learn_s=profile["update_learn_s"])
    out["comparison"] = compare(out["ours"], out.get("trl", {}), on_gpu=out["gpu"] != "CPU",
                                ours_async=out.get("ours_async"))


def free_cuda_cache() -> None:
    """Hand this process's cached CUDA blocks back, so the next processes get the GPU's memory."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- main -----------------------------------------------------------------------------------------
def failures_of(report: dict, sizes: Sizes) -> list[str]:
    """What makes the check fail (see the module docstring)."""
    failures = []
    for row in report.get("placements", []):
        name = row["placement"]
        if "error" in row:
            failures.append(f"placement {name!r} raised: {row['error']}")
            continue
        failures += [f"placement {name!r}: {p}" for p in row["problems"]]
        if sizes.gpu and row["after"] - row["before"] < MIN_GAIN:
            failures.append(f"placement {name!r} did not learn: held-out {row['before']:.3f} -> "
                            f"{row['after']:.3f} (needs +{MIN_GAIN})")
    shape, name = report.get("shape", {}), f"{sizes.name} shape"
    if "error" in shape:
        failures.append(f"{name} raised: {shape['error']}")
    for side in ("ours", "trl", *(f"ours_{run}" for run in EXTRA_RUNS)):
        r = shape.get(side, {})
        if "error" in r:
            failures.append(f"{name}, {side}: {r['error']}")
        if r.get("full_length") is False:
            failures.append(f"{name}, {side}: responses ended before {sizes.tokens} tokens")
        failures += [f"{name}, {side}: {p}" for p in r.get("problems", [])]
        synced = r.get("weights_synced")
        if synced and not synced["ok"]:
            failures.append(f"{name}, {side}: after the last {synced['backend']} sync the "
                            f"runners' weights are not the learner's: {synced['runners']}")
        if "error" in (r.get("profile") or {}):
            failures.append(f"{name}, {side}: the profiled update: {r['profile']['error']}")
    return failures


def ours_settings(pairs: list[str]) -> dict:
    """--ours-set NAME=JSON pairs as a dict (a value that is not JSON is taken as a string)."""
    settings = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"gpu_check: --ours-set takes NAME=VALUE, got {pair!r}")
        try:
            settings[name] = json.loads(value)
        except json.JSONDecodeError:
            settings[name] = value
    return settings


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true",
                        help="everything on the CPU with tiny sizes (CI), in seconds")
    parser.add_argument("--json", help="write the report here as JSON (after each part)")
    parser.add_argument("--parts", nargs="+", default=["placements", "shape"],
                        choices=("placements", "shape"))
    parser.add_argument("--iterations", type=int, help="training iterations per placement")
    parser.add_argument("--shape", choices=tuple(SHAPES), default="403m",
                        help="the model and batch of the shape part (benchmarks/gpu/shapes.py)")
    parser.add_argument("--updates", type=int, help="updates per side of the shape")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--ours-set", action="append", default=[], metavar="NAME=JSON",
                        help="a training setting for our side of the shape (repeatable), "
                             "e.g. max_tokens_per_micro_batch=65536")
    parser.add_argument("--runs", nargs="*", choices=tuple(EXTRA_RUNS), default=["cuda_ipc"],
                        help="short runs of our side beside the main one (cuda_ipc: GPU only; "
                             "async: max_staleness=1); none: --runs alone")
    parser.add_argument("--profile", action="store_true",
                        help="one more update of our main run under torch.profiler, summarised")
    parser.add_argument("--overrides", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--no-engine-check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    parser.add_argument("--ray-address", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    start = time.perf_counter()
    args = parse_args()
    if args.child:
        sizes = Sizes(**json.loads(args.sizes))
        result = (run_ours(sizes, args.path, args.ray_address, json.loads(args.overrides),
                           engine_check=not args.no_engine_check, profile=args.profile)
                  if args.child == "ours"
                  else run_trl(sizes, args.path))
        print(json.dumps(result, default=str))
        return
    sizes = SHAPES[args.shape][1 if args.small else 0]
    sizes = replace(sizes, **{k: v for k, v in (("iterations", args.iterations),
                                                  ("updates", args.updates)) if v is not None})
    import ray
    import torch

    report = {"mode": "small" if args.small else "full", "python": platform.python_version(),
              "torch": torch.__version__, "ray": ray.__version__,
              "cuda_available": torch.cuda.is_available()}
    print(f"gpu_check ({report['mode']}): torch {torch.__version__}, ray {ray.__version__}, "
          f"cuda {report['cuda_available']}", flush=True)
    if not args.small and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device visible; on a machine without a GPU run --small")
    # Ray is told the GPUs (none with --small): an actor asking for one Ray cannot see would wait
    # for it forever.
    ray.init(num_cpus=max(2, os.cpu_count() or 1), num_gpus=0 if args.small else
             torch.cuda.device_count(), include_dashboard=False, log_to_driver=False)

    def save() -> None:
        report["failures"] = failures_of(report, sizes)
        report["seconds"] = time.perf_counter() - start
        if args.json:  # beside, then renamed: a step's timeout may kill it mid-write
            part = Path(f"{args.json}.part")
            part.write_text(json.dumps(report, indent=1, default=str))
            os.replace(part, args.json)

    def placements() -> None:
        report["placements"] = []
        for name in PLACEMENTS:
            print(f"# placement: {name}", file=sys.stderr, flush=True)
            try:
                report["placements"].append(run_placement(name, sizes))
            except Exception as e:  # reported; the other parts still run
                report["placements"].append({"placement": name, "error": repr(e)[:500]})
            free_cuda_cache()
            save()
        print_placements(report["placements"], sizes)

    def shape() -> None:
        print(f"# the {sizes.name} shape", file=sys.stderr, flush=True)
        report["shape"] = {}
        options = ShapeOptions(skip_trl=args.skip_trl, overrides=ours_settings(args.ours_set),
                               runs=tuple(args.runs), profile=args.profile)
        try:
            run_shape(sizes, options, report["shape"], save)
        except Exception as e:  # reported; the tables still print
            report["shape"]["error"] = repr(e)[:500]
        save()
        if "model" in report["shape"]:
            print_shape(report["shape"])
        else:
            print(f"\n## (b) The {sizes.name} shape: failed: {report['shape'].get('error')}")

    # In the order asked: on a short GPU loan, the part that matters most first.
    for part in dict.fromkeys(args.parts):
        {"placements": placements, "shape": shape}[part]()
    ray.shutdown()
    save()
    print(f"\n{report['seconds']:.0f} s in all")
    if report["failures"]:
        print("\n!!! GPU CHECK FAILED !!!")
        for failure in report["failures"]:
            print(f"!!! {failure}")
        sys.exit(1)
    print("GPU check passed" + (" (--small: on the CPU)" if args.small else ""))


if __name__ == "__main__":
    main()
