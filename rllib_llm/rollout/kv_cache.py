"""The torch engine's KV cache: one decode batch's keys and values, allocated once for the batch's
final length and filled in place (`PreallocatedLayer`), rather than grown by concatenation each
step as transformers' `DynamicCache` does (see rollout/torch_engine.py's docstring for what that
saves). The eager decode loop (rollout/torch_engine.py) and the fixed-shape step
(rollout/decode_graphs.py) both write it.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedConfig
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A full-attention layer's keys and values in buffers allocated once, and filled in place.

    The buffers are `(max_rows, kv_heads, max_len, head_dim)`; the cache seen by the model is the
    filled corner `[:rows, :, :length]`, returned as views, so each step attends over the tokens
    so far only (as with `DynamicLayer`, and unlike transformers' `StaticLayer`, which attends
    over all `max_len` columns every step) and writing a step copies that step's keys alone.
    It supports what the engine's decode loop calls: `update` and one `batch_select_indices`
    after the prefill.

    Args:
        max_rows: most rows (sequences) the layer will hold: the decode batch's size.
        max_len: most tokens per row: padded prompt length + the most response tokens.
    """

    def __init__(self, max_rows: int, max_len: int):
        super().__init__()
        self.max_rows, self.max_len = max_rows, max_len
        self.rows = self.length = 0
        # Set by a fixed-shape decode (rollout/decode_graphs.py): a (1,) tensor naming the column
        # each update writes; the update then returns all `max_len` columns.
        self.write_at: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Allocate the buffers, with the dtype, device and head shape of the first keys."""
        self.dtype, self.device = key_states.dtype, key_states.device
        k_shape = (self.max_rows, key_states.shape[1], self.max_len, key_states.shape[-1])
        v_shape = (self.max_rows, value_states.shape[1], self.max_len, value_states.shape[-1])
        # `empty`: never-written columns are never read (views cover the filled corner only).
        self.keys = torch.empty(k_shape, dtype=self.dtype, device=self.device)
        self.values = torch.empty(v_shape, dtype=self.dtype, device=self.device)
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write `(rows, kv_heads, S, head_dim)` new keys and values after the `length` cached
        ones; return all cached keys and values so far, `(rows, kv_heads, length + S, head_dim)`.
        """
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.write_at is not None:  # fixed shapes: no Python-side length, nothing to check
            keys, values = self.keys.narrow(0, 0, self.rows), self.values.narrow(0, 0, self.rows)
            # (`copy_` casts; `index_copy_` does not: under autocast keys and values can differ)
            keys.index_copy_(2, self.write_at, key_states.to(keys.dtype))
            values.index_copy_(2, self.write_at, value_states.to(values.dtype))
            return keys, values
        rows, end = key_states.shape[0], self.length + key_states.shape[-2]
        if rows > self.max_rows or end > self.max_len or (self.length and rows != self.rows):
            raise ValueError(
                f"PreallocatedLayer: an update to {rows} rows x {end} tokens does not fit its "
                f"{self.max_rows} rows x {self.max_len} tokens, or changes its {self.rows} rows"
            )
        # `narrow` rather than `[...]` indexing: fewer Python-level ops per layer and step.
        keys, values = self.keys.narrow(0, 0, rows), self.values.narrow(0, 0, rows)
        keys.narrow(2, self.length, end - self.length).copy_(key_states)
        values.narrow(2, self.length, end - self.length).copy_(value_states)
        self.rows, self.length = rows, end
        return keys.narrow(2, 0, end), values.narrow(2, 0, end)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Row i becomes cached row `indices[i]`, for the `len(indices)` rows; `indices` `(B,)`.

        The gathered copy is a temporary of this layer's filled columns only, `(B, kv_heads,
        length, head_dim)`, and layers are gathered one after the other.
        """
        if len(indices) > self.max_rows:
            raise ValueError(f"PreallocatedLayer: {len(indices)} rows > max_rows={self.max_rows}")
        if self.length:
            self.keys[: len(indices), :, : self.length] = self.keys[indices, :, : self.length]
            self.values[: len(indices), :, : self.length] = self.values[indices, :, : self.length]
        self.rows = len(indices)

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.max_len


def kv_cache(config: PreTrainedConfig, max_rows: int, max_len: int) -> DynamicCache:
    """A KV cache for one decode batch of at most `max_rows` rows x `max_len` tokens.

    Every layer a `PreallocatedLayer` when transformers' `DynamicCache` would give every layer a
    plain `DynamicLayer` (full attention); otherwise (sliding-window, hybrid or linear-attention
    layers, whose caches keep less than every token) that `DynamicCache` itself, which grows by
    concatenation: such models get no preallocation.
    """
    cache = DynamicCache(config=config)
    if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [PreallocatedLayer(max_rows, max_len) for _ in cache.layers]
    return cache
