"""The GPU check's report: the comparison of a shape's sides against the issue's goals, and the
tables benchmarks/gpu/gpu_check.py prints (placements; a shape's sides, phases, weight syncs, the
asynchronous run and the profiled update). Reads the report's dicts only; computes nothing on a
device.
"""

from __future__ import annotations

# The script's folder is on sys.path (gpu_check.py's).
import profile_summary
from shapes import LR, Sizes

GOAL_PEAK_GIB = 16.0  # learner + env runner peak reserved CUDA memory
GOAL_TIME_RATIO = 0.5  # our s/update over TRL's
GOAL_ASYNC_TIME_RATIO = 0.3  # the same with max_staleness=1 (issue 50)
GOAL_ENGINE_SPEEDUP = 3.0  # the torch engine's tokens/s over model.generate's


def peak_gib(side: dict, kind: str) -> float | None:
    """A side's processes' peak memory of `kind` (reserved_gib, ...), summed; None if absent."""
    values = [m.get(kind) for m in side.get("memory", {}).values()]
    return sum(values) if values and None not in values else None


def compare(ours: dict, trl: dict, *, on_gpu: bool, ours_async: dict | None = None) -> dict:
    if "update_s" not in ours:
        return {}
    kind = "reserved_gib" if on_gpu else "rss_gib"
    out = {"memory_kind": kind, "ours_peak_gib": peak_gib(ours, kind)}
    if "update_s" in trl:
        out["time_ratio"] = ours["update_s"] / trl["update_s"]
        if out["ours_peak_gib"] and peak_gib(trl, kind):
            out["memory_ratio"] = out["ours_peak_gib"] / peak_gib(trl, kind)
    if "engine_vs_generate" in ours:
        out["engine_speedup"] = ours["engine_vs_generate"]["speedup"]
    if ours_async and "update_s" in ours_async:  # --runs async
        out["async_over_sync"] = ours_async["update_s"] / ours["update_s"]
        if "update_s" in trl:
            out["async_time_ratio"] = ours_async["update_s"] / trl["update_s"]
    if on_gpu:  # the goal is set for a GPU
        if "time_ratio" in out:
            out["goal_time"] = out["time_ratio"] <= GOAL_TIME_RATIO
        if out["ours_peak_gib"] is not None:
            out["goal_memory"] = out["ours_peak_gib"] <= GOAL_PEAK_GIB
        if "engine_speedup" in out:
            out["goal_engine"] = out["engine_speedup"] >= GOAL_ENGINE_SPEEDUP
        if "async_time_ratio" in out:
            out["goal_async_time"] = out["async_time_ratio"] <= GOAL_ASYNC_TIME_RATIO
    return out


# --- printing -------------------------------------------------------------------------------------
def print_placements(rows: list[dict], sizes: Sizes) -> None:
    print(f"\n## (a) Placements: the embedded task, TOPR, {sizes.iterations} iterations; "
          f"held-out greedy pass@1 on {sizes.eval_problems} problems\n")
    print("| placement | process | pid | GPU given | parameters on | engine on |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        for p in row.get("processes", []):
            given = {True: "yes", False: "no", None: "- (does not sample)"}[p["gpu_given"]]
            print(f"| {row['placement']} | {p['role']} | {p['pid']} | {given} | {p['device']} "
                  f"| {p.get('engine', '-')} |")
    print("\n| placement | learner GPUs | runner GPUs | held-out before -> after | s / iteration |")
    print("|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(f"| {row['placement']} | failed: {row['error']} ||||")
            continue
        print(f"| {row['placement']} | {row['num_learners'] or 'local'} x "
              f"{row['learner_gpus']:g} | {row['num_env_runners']} x {row['runner_gpus']:g} "
              f"| {row['before']:.3f} -> {row['after']:.3f} ({row['after'] - row['before']:+.3f})"
              f" | {row['s_per_iteration']:.3f} |")


def fmt(value, spec: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def print_shape(out: dict) -> None:
    s, model = out["sizes"], out["model"]
    print(f"\n## (b) The {s['name']} shape against TRL ({model['parameters'] / 1e6:.1f}M "
          f"parameters here): Llama hidden "
          f"{s['hidden']} x {s['layers']} layers, MLP {s['intermediate']}, {s['heads']} heads "
          f"({model.get('kv_heads', s['heads'])} key/value), "
          f"vocab {model['vocab']} (EOS id {model['eos_token_id']}, never sampled); "
          f"{s['prompts']} prompts x {s['group']} x {s['tokens']} tokens, {s['dtype']}, lr {LR} "
          f"constant, {s['updates']} updates (median of the last {s['updates'] - s['warmup']})")
    peak = out["peak_bf16_flops"]
    print(f"GPU: {out['gpu']}; peak dense bf16 for MFU: "
          f"{f'{peak / 1e12:.0f} TFLOP/s' if peak else 'n/a'}")
    for side, label in (("ours", "rllib_llm"), ("trl", "TRL")):
        if "settings" in out.get(side, {}):
            print(f"{label} settings: " + ", ".join(f"{k}={v!r}"
                                                    for k, v in out[side]["settings"].items()))
    on_gpu = out["gpu"] != "CPU"
    devices = [f"{p['role']} on {p['device']}" for p in out.get("ours", {}).get("processes", [])]
    if "device" in out.get("trl", {}):
        devices.append(f"TRL's trainer on {out['trl']['device']}")
    print("parameters, as each process reports them: " + (", ".join(devices) or "-"))
    mem = "peak allocated / reserved GiB" if on_gpu else "peak RSS GiB"
    print(f"\n| side | s / update | sample / learn s | tokens/s (update) | generate tokens/s "
          f"| MFU | full-length responses | process | {mem} |")
    print("|---|---|---|---|---|---|---|---|---|")
    for side, label in (("ours", "rllib_llm"), ("trl", "TRL GRPOTrainer")):
        r = out.get(side, {"error": "not run"})
        if "update_s" not in r:
            print(f"| {label} | {r.get('error') or r.get('skipped')} ||||||||")
            continue
        head = (f"| {label} | {r['update_s']:.3f} | {r['sample_s']:.3f} / {r['learn_s']:.3f} "
                f"| {r['tokens_per_s']:,.0f} | {r['generate_tokens_per_s']:,.0f} "
                f"| {fmt(r['mfu'], '.1%', 'n/a')} | {'yes' if r['full_length'] else 'NO'} ")
        for name, m in r["memory"].items():
            used = (f"{fmt(m.get('allocated_gib'))} / {fmt(m.get('reserved_gib'))}" if on_gpu
                    else fmt(m["rss_gib"]))
            print(f"{head}| {name} | {used} |")
            head = "| | | | | | | "
    print_phases(out.get("ours", {}))
    print_cuda_ipc(out.get("ours", {}), out.get("ours_cuda_ipc"))
    c = out["comparison"]
    print_async(out, c)
    if out.get("ours", {}).get("profile"):
        print("\n### One update of rllib_llm's learner under torch.profiler (not in the medians)\n")
        print("\n".join(profile_summary.table_lines(out["ours"]["profile"])))
    if "time_ratio" in c:
        print(f"\nours / TRL: time {c['time_ratio']:.2f}x, memory ({c['memory_kind']}, all "
              f"processes) {fmt(c.get('memory_ratio'))}x")
    print(goal_line(c, on_gpu))


def print_async(out: dict, c: dict) -> None:
    """--runs async: the asynchronous run's s/update against the synchronous one's and TRL's."""
    run = out.get("ours_async")
    if run is None:
        return
    if "update_s" not in run:
        print(f"\nasynchronous run (max_staleness=1): {run.get('error') or 'no measured update'}")
        return
    print("\n(asynchronous: its sample s is the wait for a batch generated ahead)")
    print("\n| rllib_llm | s / update | sample / learn s | against the synchronous run "
          "| against TRL |")
    print("|---|---|---|---|---|")
    for label, side in (("synchronous", out["ours"]), ("async, max_staleness=1", run)):
        ratio = c.get("async_over_sync") if side is run else 1.0
        over_trl = c.get("async_time_ratio" if side is run else "time_ratio")
        print(f"| {label} | {side['update_s']:.3f} | {side['sample_s']:.3f} / "
              f"{side['learn_s']:.3f} | {fmt(ratio)}x | {fmt(over_trl)}x |")


def print_cuda_ipc(ours: dict, ipc: dict | None) -> None:
    """The short run with weight_sync_backend='cuda_ipc' against the shipped sync."""
    if ipc is None:
        return
    if "phases" not in ipc:
        print(f"\nweight sync through cuda_ipc: {ipc.get('error') or 'no measured update'}")
        return
    print("\n| weight sync | s in all | of it the runner's load | s / update | runners hold "
          "the learner's weights |")
    print("|---|---|---|---|---|")
    for label, side in ((ours.get("weights_synced", {}).get("backend", "shipped"), ours),
                        ("cuda_ipc", ipc)):
        if "phases" in side:
            p = side["phases"]
            load = p["weight load (runner)"]
            print(f"| {label} | {p['weight sync (driver)'] + load:.3f} | {load:.3f} | "
                  f"{side['update_s']:.3f} | "
                  f"{'yes' if side.get('weights_synced', {}).get('ok') else 'NO'} |")


def print_phases(ours: dict) -> None:
    """Our side: the budgets its processes sized, where an update's time went, and the engine
    alone against model.generate."""
    if "sized" in ours:
        print("\nrllib_llm, as its processes settled the 'auto' settings on their device: "
              + (", ".join(f"{k}={v!r}" for k, v in ours["sized"].items()) or "-"))
    if "phases" in ours:
        print("\n| phase of an update (rllib_llm) | median s | share of s / update |")
        print("|---|---|---|")
        for name, seconds in ours["phases"].items():
            print(f"| {name} | {seconds:.3f} | {seconds / ours['update_s']:.0%} |")
        print(f"| **s / update** | {ours['update_s']:.3f} | 100% |")
    synced = ours.get("weights_synced")
    if synced:
        print(f"\nafter the last weight sync ({synced['backend']}) the runners' engines hold the "
              f"learner's weights: {'yes' if synced['ok'] else 'NO: ' + str(synced['runners'])}")
    e = ours.get("engine_vs_generate") or {}
    if e:
        print(f"\nengine alone: {e['engine_tokens_per_s']:,.0f} tokens/s ({e['engine_s']:.2f} s) "
              f"against model.generate's {e['generate_tokens_per_s']:,.0f} ({e['generate_s']:.2f} "
              f"s): {e['speedup']:.2f}x")
    if e.get("graph_failure"):
        print(f"the engine's CUDA-graph capture FAILED and it decoded eagerly: "
              f"{e['graph_failure']}")
    if "eager_s" in e:
        print(f"the engine's CUDA-graph decode against its eager step (same seed): "
              f"{e['engine_tokens_per_s']:,.0f} against {e['eager_tokens_per_s']:,.0f} tokens/s "
              f"({e['engine_tokens_per_s'] / e['eager_tokens_per_s']:.2f}x); identical rows "
              f"{e['identical_rows']:.0%}, largest |logp difference| before a row differs "
              f"{e['max_logp_difference']:.2e}")


def goal_line(c: dict, on_gpu: bool) -> str:
    """The issue's goal, each part with its verdict (met / NOT MET / n/a where not measured)."""
    if not on_gpu:
        return ("goal (time against TRL, GPU memory, engine against model.generate): n/a on the "
                "CPU")
    return (f"goal: s/update {fmt(c.get('time_ratio'))}x TRL's <= {GOAL_TIME_RATIO}x: "
            f"{verdict(c.get('goal_time'))}; learner + runner peak reserved "
            f"{fmt(c.get('ours_peak_gib'))} GiB <= {GOAL_PEAK_GIB:.0f} GiB: "
            f"{verdict(c.get('goal_memory'))}; engine alone {fmt(c.get('engine_speedup'))}x "
            f"model.generate >= {GOAL_ENGINE_SPEEDUP:.0f}x: {verdict(c.get('goal_engine'))}"
            + (f"; async s/update {fmt(c['async_time_ratio'])}x TRL's <= "
               f"{GOAL_ASYNC_TIME_RATIO}x: {verdict(c.get('goal_async_time'))}"
               if "async_time_ratio" in c else ""))


def verdict(ok: bool | None) -> str:
    return {True: "met", False: "NOT MET", None: "n/a"}[ok]
