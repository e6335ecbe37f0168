"""Peak extra memory of a broadcast weight sync from an FSDP2 learner: streamed from its shards a
bucket at a time (what `FSDP2RLVRLearner.broadcast_weights` sends), against the same sync from a
whole state dict (what it sent before).

    python benchmarks/memory/weight_sync_memory.py [--model embedded|smollm2-135m]
        [--bucket-mib 8 256]

Per bucket size, two processes over gloo: the sender, an FSDP2 learner's side (the model sharded
by `fsdp2.shard_model` over a world of one, in the float32 master weights FSDP2 keeps), and the
receiver, a torch engine loading what arrives (`TorchRolloutEngine.receive_weights`). Both run
with MALLOC_MMAP_THRESHOLD_=65536: glibc then gives every block of 64 KiB or more back to the
system when it is freed, so the peak RSS above the RSS before a sync (VmHWM, reset through
/proc/self/clear_refs) counts the bytes the sync held at once, not what the allocator kept.
After one warm-up sync (gloo's buffers), each process measures each mode:
- streamed: `Sender.send` over `ShardedWeights.shards` (DTensors, each piece's rows read from the
  shards into its bucket: a weight over the bucket size travels in pieces of whole rows);
- whole state dict: `ShardedWeights.state_dict` (gathered a bucket at a time into one CPU copy of
  the model), then sent.
Also: seconds per sync on each side, and the checksums' cost (a digest of every weight, which
each side computes once per sync).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

# harness.py is shared by every folder of benchmarks/, so it sits one level up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import DEFAULT_SMOLLM2_DIR, model_path, reset_peak_rss, rss_mib  # noqa: E402

MIB = 2**20
MODES = ("streamed", "whole state dict")


def _send(path: str, bucket_bytes: int, address_box, results, store: str) -> None:
    """The learner's side: one warm-up sync, then one sync per mode, each measured."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from rllib_llm.exchange import weight_broadcast as wb
    from rllib_llm.exchange.weight_checksums import tensor_digest
    from rllib_llm.learner import fsdp2
    from rllib_llm.models import load_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    model = load_model(path)
    fsdp2.shard_model(model, init_device_mesh("cpu", (1,)), model_dtype="float32")
    weights = fsdp2.ShardedWeights(model, bucket_bytes=bucket_bytes, first=True)
    sender = wb.Sender("gloo", weights.shards(""), world_size=2, timeout_s=600,
                       bucket_bytes=bucket_bytes)
    address_box.put(sender.address())
    sender.join()
    sender.send(weights.shards(""), version=0)
    out: dict = {"model_mib": sum(s.nbytes for s in sender.layout) / MIB,
                 "largest_mib": max(s.nbytes for s in sender.layout) / MIB,
                 "buckets": len(wb.buckets(sender.layout, bucket_bytes))}
    for version, mode in enumerate(MODES, start=1):
        before = reset_peak_rss()
        start = time.perf_counter()
        state = weights.shards("") if mode == "streamed" else weights.state_dict(lambda k: True)
        sender.send(state, version=version)
        del state
        out[mode] = {"peak": rss_mib("VmHWM") - before, "s": time.perf_counter() - start}
    whole = weights.state_dict(lambda k: True)
    start = time.perf_counter()
    for tensor in {id(t): t for t in whole.values()}.values():
        tensor_digest(tensor)
    out["checksum_s"] = time.perf_counter() - start
    dist.destroy_process_group()
    results.put(("sender", out))


def _receive(path: str, address_box, results) -> None:
    """A torch engine's side: the warm-up sync, then one per mode, each measured."""
    import torch

    from rllib_llm.models import load_model
    from rllib_llm.rollout.torch_engine import TorchRolloutEngine

    torch.set_num_threads(1)
    engine = TorchRolloutEngine(load_model(path), eos_token_id=0, pad_token_id=0)
    engine.join_weight_broadcast(first_rank=1, **address_box.get(timeout=600))
    engine.receive_weights()
    out = {}
    for mode in MODES:
        before = reset_peak_rss()
        start = time.perf_counter()
        engine.receive_weights()
        out[mode] = {"peak": rss_mib("VmHWM") - before, "s": time.perf_counter() - start}
    results.put(("receiver", out))


def measure(path: str, bucket_bytes: int) -> dict:
    ctx = mp.get_context("spawn")
    address_box, results = ctx.Queue(), ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_send, args=(path, bucket_bytes, address_box, results,
                                                 str(Path(tmp) / "store"))),
                 ctx.Process(target=_receive, args=(path, address_box, results))]
        for p in procs:
            p.start()
        got = dict(results.get(timeout=1800) for _ in procs)
        for p in procs:
            p.join(timeout=120)
    return got


def cpu_line() -> str:
    """The CPU's name and what it has for bf16 (AVX-512 BF16, AMX), from /proc/cpuinfo."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                 if line.startswith("model name")), platform.processor() or platform.machine())
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines()
                      if line.startswith("flags")), []))
    bf16 = [f for f in ("avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return f"{name}, {os.cpu_count()} cores, bf16: {', '.join(bf16) or 'none (AVX2 only)'}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--smollm2-dir", default=DEFAULT_SMOLLM2_DIR)
    parser.add_argument("--bucket-mib", type=float, nargs="+", default=[8, 256])
    args = parser.parse_args()
    args.dtype = "float32"  # the export's dtype, where SmolLM2 is exported (FSDP2's masters)
    path = model_path(args)
    # Read by the children's allocator at start (spawn passes this process's environment).
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(2**16)

    import torch

    rows = []
    for bucket_mib in args.bucket_mib:
        got = measure(path, int(bucket_mib * MIB))
        rows.append((bucket_mib, got["sender"], got["receiver"]))
    sender = rows[0][1]
    print(f"\n{time.strftime('%Y-%m-%d')}; {cpu_line()}; torch {torch.__version__}; model "
          f"{args.model}: {sender['model_mib']:.1f} MiB in float32 (FSDP2's master weights), "
          f"largest weight {sender['largest_mib']:.1f} MiB (a weight over the bucket size "
          f"travels in pieces of whole rows); one torch thread per process\n")
    print("| bucket MiB | buckets | sync from | sender peak extra MiB | receiver peak extra MiB "
          "| sender s | receiver s |")
    print("|---|---|---|---|---|---|---|")
    for bucket_mib, s, r in rows:
        for mode in MODES:
            print(f"| {bucket_mib:g} | {s['buckets']} | {mode} | {s[mode]['peak']:.1f} | "
                  f"{r[mode]['peak']:.1f} | {s[mode]['s']:.2f} | {r[mode]['s']:.2f} |")
    print(f"\nchecksums: {sender['checksum_s']:.2f} s to digest every weight once (each side "
          "does so per sync)")


if __name__ == "__main__":
    main()
