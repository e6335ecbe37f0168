"""One learner update under `torch.profiler`, summarised: where the learn phase's time goes.

    result, trace = profiled(algo.train)    # the learner in this process (a local learner)
    summary = summarize(trace)
    print("\\n".join(table_lines(with_mfu(summary, flops=..., peak_flops=..., learn_s=...))))

The learn phase runs from the first pass label's start to the last one's end (the labels:
rllib_llm/learner/pass_labels.py). Its summary (a JSON-ready dict):
- `passes`: per pass (old log-probs, reference log-probs, forward with the loss, backward, the
  optimizer step) how many labelled calls, the host seconds inside them, and on a GPU the device
  seconds and count of the kernels their host ops launched. A kernel counts for the pass in
  whose label its launching op began, on any thread: the autograd engine runs a CUDA backward on
  a thread of its own, and a kernel runs later than its launch;
- `device`: the kernels (memcpy and memset included) the learn phase launched, the host's launch
  calls, the seconds the device was busy (the union of those kernels' intervals) over its span
  from the first kernel's start to the last one's end, and the host gaps: the device idle
  between kernels, in all, how many gaps over GAP_US, the largest;
- `host`: the learn phase's host seconds and the synchronising calls in it (cudaStreamSynchronize
  and the like: a host waiting on the device), how many and their seconds;
- `top`: the TOP ops by time: on a GPU the kernels by name (device seconds), on a CPU the host ops
  by self time (their children's excluded), each with its share of the learn phase.
MFU needs the model and the batch, so the caller adds it (`with_mfu`).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass

from rllib_llm.learner.pass_labels import PASSES

TOP = 12  # rows of the top-ops table
GAP_US = 50.0  # a device gap longer than this is counted apart (a launch is ~5 us)
NAME_CHARS = 90  # kernel names are long templates: cut in the table (whole in the JSON)
LAUNCHES = ("LaunchKernel", "GraphLaunch")  # cudaLaunchKernel(ExC), cuLaunchKernel, graphs
SYNCS = ("Synchronize",)  # cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize


@dataclass(frozen=True)
class Span:
    """One event of a trace, in microseconds from the trace's start."""

    name: str
    start_us: float
    end_us: float
    self_us: float = 0.0  # a host op's time without its children's; a device span's duration
    launched_us: float | None = None  # a device span: when its launching host op began


@dataclass(frozen=True)
class Trace:
    labels: list[Span]  # the pass labels (host ranges)
    host_ops: list[Span]  # every other host op, launch and sync calls excluded
    device: list[Span]  # kernels, memcpy and memset on the device
    launches: list[Span]  # the host's kernel-launch calls
    syncs: list[Span]  # the host's synchronising calls


def profiled(fn):
    """`fn()` under torch.profiler (the CPU, and CUDA where there is one): (its result, Trace)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        result = fn()
    return result, trace_of(prof.events())


def trace_of(events) -> Trace:
    """A Trace of a profile's `events()` (torch's FunctionEvents)."""
    from torch.autograd import DeviceType

    host = [e for e in events if e.device_type == DeviceType.CPU]
    # A device span's linked_correlation_id is its launching host op's id (torch's own pairing;
    # a torch without it: the span's own start stands in, late by the launch queue's length).
    # (Host ops only: a runtime call's id is CUDA's correlation id, another numbering.)
    began = {e.id: e.time_range.start for e in host
             if not e.is_async and not getattr(e, "linked_correlation_id", 0)}
    labels, ops, device, launches, syncs = [], [], [], [], []
    for e in events:
        start, end = e.time_range.start, e.time_range.end
        if e.name in PASSES:  # (a GPU trace repeats each label on the device: skipped)
            if e.device_type == DeviceType.CPU:
                labels.append(Span(e.name, start, end))
        elif e.device_type != DeviceType.CPU:
            if not getattr(e, "is_user_annotation", False):
                launched = began.get(getattr(e, "linked_correlation_id", None))
                device.append(Span(e.name, start, end, end - start,
                                   start if launched is None else launched))
        elif any(key in e.name for key in LAUNCHES):
            launches.append(Span(e.name, start, end))
        elif any(key in e.name for key in SYNCS):
            syncs.append(Span(e.name, start, end, end - start))
        elif not e.is_async:
            ops.append(Span(e.name, start, end, e.self_cpu_time_total))
    return Trace(labels, ops, device, launches, syncs)


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of `intervals`, as disjoint intervals in order."""
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def summarize(trace: Trace, *, top: int = TOP) -> dict:
    """The learn phase of `trace` by pass, on the device and on the host (module docstring)."""
    if not trace.labels:
        return {"error": "no pass label in the trace (rllib_llm/learner/pass_labels.py)"}
    labels = sorted(trace.labels, key=lambda s: s.start_us)
    begin, end = labels[0].start_us, max(s.end_us for s in labels)
    starts = [s.start_us for s in labels]

    def pass_of(t: float | None) -> str | None:
        """The pass whose label holds host time `t` (labels do not nest)."""
        i = bisect.bisect_right(starts, t) - 1 if t is not None else -1
        return labels[i].name if i >= 0 and t <= labels[i].end_us else None

    def within(s: Span) -> bool:
        return begin <= s.start_us <= end

    kernels = [k for k in trace.device if pass_of(k.launched_us) is not None]
    passes = {name: {"pass": name, "calls": 0, "host_s": 0.0, "device_s": 0.0, "kernels": 0}
              for name in PASSES if any(s.name == name for s in labels)}
    for s in labels:
        passes[s.name]["calls"] += 1
        passes[s.name]["host_s"] += (s.end_us - s.start_us) / 1e6
    for k in kernels:
        row = passes[pass_of(k.launched_us)]
        row["device_s"] += k.self_us / 1e6
        row["kernels"] += 1
    learn_s = (end - begin) / 1e6
    syncs = [s for s in trace.syncs if within(s)]
    return {"learn_s": learn_s, "passes": list(passes.values()),
            "device": device_summary(kernels, [s for s in trace.launches if within(s)]),
            "host": {"learn_s": learn_s, "syncs": len(syncs),
                     "sync_s": sum(s.self_us for s in syncs) / 1e6},
            "top": top_ops(kernels if kernels else [s for s in trace.host_ops if within(s)],
                           learn_s, top, on_device=bool(kernels))}


def device_summary(kernels: list[Span], launches: list[Span]) -> dict:
    """Kernels, launches, busy seconds and the host gaps between the learn phase's kernels."""
    busy = merged([(k.start_us, k.end_us) for k in kernels])
    gaps = [b[0] - a[1] for a, b in zip(busy, busy[1:])]
    span_us = busy[-1][1] - busy[0][0] if busy else 0.0
    busy_us = sum(b - a for a, b in busy)
    return {"kernels": len(kernels), "launch_calls": len(launches), "busy_s": busy_us / 1e6,
            "span_s": span_us / 1e6, "idle_s": (span_us - busy_us) / 1e6, "gaps": len(gaps),
            f"gaps_over_{GAP_US:.0f}us": sum(g > GAP_US for g in gaps),
            "largest_gap_ms": max(gaps, default=0.0) / 1e3}


def top_ops(spans: list[Span], learn_s: float, top: int, *, on_device: bool) -> list[dict]:
    """`spans` grouped by name, the `top` largest by (self) seconds."""
    calls: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for s in spans:
        calls[s.name] += 1
        seconds[s.name] += s.self_us / 1e6
    names = sorted(seconds, key=seconds.get, reverse=True)[:top]
    return [{"op": name, "where": "device" if on_device else "host (self)", "calls": calls[name],
             "s": seconds[name], "share": seconds[name] / learn_s if learn_s else None}
            for name in names]


def with_mfu(summary: dict, *, flops: float, peak_flops: float | None,
             learn_s: float | None) -> dict:
    """`summary` with the learn phase's MFU: `flops` (6 x parameters x trained tokens) over
    `learn_s` (the update's learn seconds, from its metrics) and over the device's busy seconds,
    each against `peak_flops`; None without a peak (a CPU) or a time."""
    busy = summary.get("device", {}).get("busy_s")
    return {**summary, "flops": flops,
            "mfu": flops / learn_s / peak_flops if peak_flops and learn_s else None,
            "mfu_device_busy": flops / busy / peak_flops if peak_flops and busy else None}


def table_lines(summary: dict) -> list[str]:
    """The summary as markdown: a line on the device and the host, the passes, the top ops."""
    if "error" in summary:
        return [f"profile of one update: {summary['error']}"]
    d, h = summary["device"], summary["host"]
    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1%}"

    lines = [f"learn phase under the profiler: {h['learn_s']:.3f} s on the host, "
             f"{h['syncs']} synchronising calls ({h['sync_s']:.3f} s); "
             f"device: {d['kernels']:,} kernels from {d['launch_calls']:,} launch calls, busy "
             f"{d['busy_s']:.3f} s of a {d['span_s']:.3f} s span, idle {d['idle_s']:.3f} s in "
             f"{d['gaps']:,} gaps ({d[f'gaps_over_{GAP_US:.0f}us']:,} over {GAP_US:.0f} us, "
             f"largest {d['largest_gap_ms']:.2f} ms); MFU {pct(summary.get('mfu'))} of the "
             f"learn seconds, {pct(summary.get('mfu_device_busy'))} of the device's busy ones",
             "", "| pass | calls | host s | device s | kernels |", "|---|---|---|---|---|"]
    lines += [f"| {p['pass']} | {p['calls']} | {p['host_s']:.3f} | {p['device_s']:.3f} | "
              f"{p['kernels']:,} |" for p in summary["passes"]]
    lines += ["", "| top op | where | calls | s | share of the learn phase |",
              "|---|---|---|---|---|"]
    lines += [f"| {t['op'][:NAME_CHARS]} | {t['where']} | {t['calls']:,} | {t['s']:.4f} | "
              f"{pct(t['share'])} |" for t in summary["top"]]
    return lines
