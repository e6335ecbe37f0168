"""The torch engine's decode step at fixed shapes, replayed from a CUDA graph.

Why: one decode step of a 24-layer model launches hundreds of small kernels, and Python issues
them one by one: at 256 rows of the 403M Llama on an H200 a step took 19-34 ms where its memory
traffic (the weights and the KV cache) needs about 1.5 ms. A captured CUDA graph launches the
whole step at once, as vLLM and SGLang decode.

A graph replays fixed shapes at fixed addresses, so the step here differs from the eager loop's
in two ways, and in nothing else:
- it attends over all `max_len` columns of the preallocated cache, the columns not yet written
  masked out by a 4-D mask (the eager loop attends over the columns written so far). A masked
  column gets a softmax weight of exactly 0, so the two differ only in the order in which the
  attention kernel adds its floats;
- its token, position and cache column are read from tensors refilled in place before each
  replay, and each layer writes its new keys and values at that column (`index_copy_`).

`StaticDecode` runs this step eagerly, or, with `capture=True` on a CUDA device, captures it on
its first call (after two warm-up runs on a side stream, as torch's CUDA-graph guide asks) and
replays it from then on. The eager form is what the CPU tests compare with the engine's eager
loop (tests/rollout/test_decode_graphs.py); on a GPU `benchmarks/gpu/gpu_check.py` compares the
replayed graph with it.

One graph serves one decode batch: its rows, prompt width and response length fix the shapes,
and the batch's KV cache is allocated for it alone (`kv_cache`), so the graph is captured when the
batch starts and freed with it. A capture costs about three eager steps.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from transformers import DynamicCache, PreTrainedModel

from rllib_llm.exchange.memory_budgets import AUTO
from rllib_llm.rollout.kv_cache import kv_cache

# Attention implementations whose 4-D mask this step knows how to write: sdpa takes a boolean
# mask (True = attend), eager an additive one (0 = attend, the dtype's minimum = masked).
MASK_KINDS = ("sdpa", "eager")
WARMUP_RUNS = 2  # on a side stream before capture (cuBLAS workspaces, lazy initialisation)


def supports_static_decode(model: PreTrainedModel, cache: DynamicCache) -> str | None:
    """None when `model` and `cache` can decode at fixed shapes, else why not (one phrase)."""
    attention = getattr(model.config, "_attn_implementation", None)
    if attention not in MASK_KINDS:
        return f"attention implementation {attention!r} (static decode supports {MASK_KINDS})"
    if not all(hasattr(layer, "write_at") for layer in cache.layers):
        return "a cache whose layers are not all preallocated full attention"
    return None


class GraphChoice(NamedTuple):
    on: bool  # replay decode steps from CUDA graphs
    note: str  # for the engine's device line: what "auto" chose ("" on a CPU)


def cuda_graph_decode(value: bool | str, device: torch.device, model: PreTrainedModel
                      ) -> GraphChoice:
    """What `torch_engine_cuda_graphs=value` means for an engine of `model` on `device`: "auto"
    is on where the device is a GPU and the model supports a fixed-shape step, else off; True
    where either is missing is refused (ValueError naming it)."""
    cuda = torch.device(device).type == "cuda"
    why_not = supports_static_decode(model, kv_cache(model.config, 1, 1))
    if value is True and (not cuda or why_not):
        raise ValueError(
            "RLVRConfig.torch_engine_cuda_graphs=True: "
            + (f"CUDA graphs need a GPU, and this engine computes on {device}" if not cuda
               else f"the model has {why_not}")
            + ". Use 'auto' (on wherever they can be) or False.")
    if value != AUTO:
        return GraphChoice(bool(value), "")
    if not cuda:
        return GraphChoice(False, "")
    if why_not:
        return GraphChoice(False, f"torch_engine_cuda_graphs=False (auto: {why_not})")
    return GraphChoice(True, "torch_engine_cuda_graphs=True (auto)")


class StaticDecode:
    """The decode step of one batch, at fixed shapes.

    Args:
        model: the causal LM (in eval mode, under inference mode, as the engine runs it).
        cache: the batch's cache, prefilled and expanded to its rows: every layer a
            `PreallocatedLayer` of `max_len` columns.
        prompt_mask: `(B, L)` 1 for prompt tokens, 0 for left padding, of the batch's rows.
        max_len: columns of the cache: L + the most response tokens.
        capture: replay the step from a CUDA graph (CUDA devices only).
    """

    def __init__(self, model: PreTrainedModel, cache: DynamicCache, prompt_mask: torch.Tensor,
                 max_len: int, *, capture: bool) -> None:
        why_not = supports_static_decode(model, cache)
        if why_not:
            raise ValueError(f"static decode does not support {why_not}")
        device = prompt_mask.device
        if capture and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device; the engine computes on {device}")
        rows = prompt_mask.shape[0]
        self.model, self.cache, self.capture = model, cache, capture
        self.tokens = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.positions = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.mask, self.attend = _decode_mask(model, prompt_mask.bool(), max_len)
        for layer in cache.layers:
            # The columns after the prompt are read (masked) from now on: uninitialised memory
            # there could hold NaN, which a weight of 0 does not cancel (0 x NaN = NaN).
            layer.keys.narrow(2, layer.length, max_len - layer.length).zero_()
            layer.values.narrow(2, layer.length, max_len - layer.length).zero_()
            layer.write_at = self.column  # every layer writes the step's keys at this column
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None  # the graph's output, overwritten by each replay

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, column: int) -> torch.Tensor:
        """Logits `(B, V)` after feeding `tokens` `(B,)` at `positions` `(B, 1)`, their keys and
        values written at cache column `column`. With a graph the tensor is the graph's own
        output: read it before the next call."""
        self.tokens.copy_(tokens[:, None])
        self.positions.copy_(positions)
        self.column.fill_(column)
        if not self.capture:
            return self._step()
        if self.graph is None:
            self._capture()
        self.graph.replay()
        return self.logits

    def _step(self) -> torch.Tensor:
        """The step the graph holds: open the new column of the mask, then one forward."""
        self.mask.index_fill_(-1, self.column, self.attend)
        return self.model(
            input_ids=self.tokens,
            attention_mask=self.mask,
            position_ids=self.positions,
            past_key_values=self.cache,
            use_cache=True,
        ).logits[:, -1]

    def _capture(self) -> None:
        # The warm-up runs compute the first step itself: it writes the same column with the
        # same values each time, so running it again (and then replaying it) changes nothing.
        side = torch.cuda.Stream(self.tokens.device)
        side.wait_stream(torch.cuda.current_stream(self.tokens.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._step()
        torch.cuda.current_stream(self.tokens.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.logits = self._step()
        self.graph = graph


def _decode_mask(model: PreTrainedModel, prompt_mask: torch.Tensor, max_len: int):
    """The `(B, 1, 1, max_len)` mask of a decode step, prompt columns filled, response columns
    closed; and the value that opens a column."""
    rows, width = prompt_mask.shape
    if model.config._attn_implementation == "sdpa":
        mask = torch.zeros(rows, 1, 1, max_len, dtype=torch.bool, device=prompt_mask.device)
        mask[:, 0, 0, :width] = prompt_mask
        return mask, True
    dtype = next(model.parameters()).dtype
    closed = torch.finfo(dtype).min
    mask = torch.full((rows, 1, 1, max_len), closed, dtype=dtype, device=prompt_mask.device)
    mask[:, 0, 0, :width].masked_fill_(prompt_mask, 0.0)
    return mask, 0.0
