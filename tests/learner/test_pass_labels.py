"""The learner's pass labels and benchmarks/gpu/profile_summary.py, which reads them: a label is a
null context without a profiler; the summary's passes, gaps and busy time by hand on a made-up
trace; and on a CPU profile of one tiny update, the rows the GPU check will print."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from rllib_llm.learner.pass_labels import (
    BACKWARD,
    FORWARD,
    OLD_LOGP,
    OPTIMIZER_STEP,
    REFERENCE_LOGP,
    label,
)
from rllib_llm.recipes.embedded import embedded_config

ROOT = Path(__file__).resolve().parents[2]


def _profile_summary():
    """benchmarks/gpu/profile_summary.py, a script's module beside gpu_check.py (not a package)."""
    spec = importlib.util.spec_from_file_location(
        "profile_summary", ROOT / "benchmarks" / "gpu" / "profile_summary.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


ps = _profile_summary()


def test_a_label_is_a_null_context_unless_a_profiler_records():
    assert isinstance(label(FORWARD), contextlib.nullcontext)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with label(FORWARD):
            torch.ones(2) + 1
    assert isinstance(label(FORWARD), contextlib.nullcontext)
    assert [e.name for e in prof.events() if e.name == FORWARD] == [FORWARD]


def test_passes_busy_time_and_gaps_by_hand():
    # Labels: forward 0-100 us, backward 100-300, optimizer step 300-350. Kernels (name, start,
    # end, launched at): two launched in forward, one in backward, one in the step (it runs
    # after its label ended: it counts for the step still), one after the learn phase (not
    # counted).
    kernels = [("k1", 20, 60, 10), ("k2", 70, 90, 50), ("k3", 160, 260, 150),
               ("k4", 355, 365, 320), ("later", 400, 500, 390)]
    trace = ps.Trace(
        labels=[ps.Span(FORWARD, 0, 100), ps.Span(BACKWARD, 100, 300),
                ps.Span(OPTIMIZER_STEP, 300, 350)],
        host_ops=[], launches=[ps.Span("cudaLaunchKernel", t, t + 2) for *_, t in kernels],
        syncs=[ps.Span("cudaStreamSynchronize", 310, 330, 20)],
        device=[ps.Span(n, a, b, b - a, t) for n, a, b, t in kernels])
    s = ps.summarize(trace)
    passes = {p["pass"]: p for p in s["passes"]}
    assert passes[FORWARD]["device_s"] == pytest.approx(60e-6) and passes[FORWARD]["kernels"] == 2
    assert passes[BACKWARD]["device_s"] == pytest.approx(100e-6)
    assert passes[OPTIMIZER_STEP]["device_s"] == pytest.approx(10e-6)
    assert passes[BACKWARD]["host_s"] == pytest.approx(200e-6)
    d = s["device"]
    # Busy 40 + 20 + 100 + 10 us of the span 20-365; gaps 10, 70, 95 us.
    assert d["kernels"] == 4 and d["launch_calls"] == 4
    assert d["busy_s"] == pytest.approx(170e-6) and d["span_s"] == pytest.approx(345e-6)
    assert d["idle_s"] == pytest.approx(175e-6)
    assert (d["gaps"], d["gaps_over_50us"], d["largest_gap_ms"]) == (3, 2, pytest.approx(0.095))
    assert s["host"] == {"learn_s": pytest.approx(350e-6), "syncs": 1,
                         "sync_s": pytest.approx(20e-6)}
    assert [t["op"] for t in s["top"]] == ["k3", "k1", "k2", "k4"]
    mfu = ps.with_mfu(s, flops=1e6, peak_flops=1e12, learn_s=1e-3)
    assert mfu["mfu"] == pytest.approx(1e-3) and mfu["mfu_device_busy"] == pytest.approx(1 / 170)


@pytest.mark.usefixtures("ray_session")  # tests/conftest.py
def test_a_cpu_profile_of_one_update_has_every_pass():
    config = embedded_config("ppo", seed=0, rollout_batch_size=2, num_return_sequences_in_group=2,
                             response_length=4, use_kl_loss=True, recompute_old_logp=True)
    algo = config.build_algo()
    try:
        _, trace = ps.profiled(algo.train)
    finally:
        algo.stop()
    summary = ps.summarize(trace)
    passes = {p["pass"]: p for p in summary["passes"]}
    assert set(passes) == {OLD_LOGP, REFERENCE_LOGP, FORWARD, BACKWARD, OPTIMIZER_STEP}
    assert all(p["calls"] >= 1 and p["host_s"] > 0 for p in passes.values())
    assert sum(p["host_s"] for p in passes.values()) <= summary["learn_s"]
    # On a CPU: no kernels; the top ops are host ops by self time, the matmuls among them.
    assert summary["device"]["kernels"] == 0 and summary["top"]
    assert all(t["where"] == "host (self)" and t["s"] > 0 for t in summary["top"])
    assert any("mm" in t["op"] or "linear" in t["op"] for t in summary["top"])
    lines = ps.table_lines(ps.with_mfu(summary, flops=1.0, peak_flops=None, learn_s=1.0))
    assert any(line.startswith(f"| {BACKWARD} |") for line in lines)


def test_a_gpu_traces_events_sort_into_labels_kernels_launches_and_syncs():
    # What torch.profiler's events() holds on a GPU, made up: the label on the host and again on
    # the device (skipped there), a host op that launches a kernel, the launch call, a sync.
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    def event(name, start, end, device=DeviceType.CPU, id=0, linked=0, annotation=False):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end),
                               device_type=device, id=id, linked_correlation_id=linked,
                               is_user_annotation=annotation, is_async=False,
                               self_cpu_time_total=end - start)

    trace = ps.trace_of([
        event(FORWARD, 0, 100, annotation=True),
        event(FORWARD, 5, 400, DeviceType.CUDA, annotation=True),
        event("aten::mm", 10, 30, id=7),
        event("cudaLaunchKernel", 12, 20, linked=7),
        event("sm90_gemm", 150, 300, DeviceType.CUDA, linked=7),
        event("cudaStreamSynchronize", 40, 90),
    ])
    assert trace.labels == [ps.Span(FORWARD, 0, 100)]
    assert trace.device == [ps.Span("sm90_gemm", 150, 300, 150, 10)]  # launched at 10 us
    assert [s.name for s in trace.launches] == ["cudaLaunchKernel"]
    assert [s.name for s in trace.syncs] == ["cudaStreamSynchronize"]
    assert [s.name for s in trace.host_ops] == ["aten::mm"]
    forward, = ps.summarize(trace)["passes"]
    assert (forward["device_s"], forward["kernels"]) == (pytest.approx(150e-6), 1)
