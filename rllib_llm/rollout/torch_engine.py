"""The pure-PyTorch rollout engine: batched sampling from a Hugging Face causal LM with a KV cache.

A hand-written decode loop rather than `model.generate`, for three reasons: the log-probs must be
those of `logits / temperature` before top-p (generate's scores are after its warpers); sampling
must draw from a per-call `torch.Generator` (generate uses the global RNG); and the loop does less
per step than generate's stack of processors, so it is no slower: on the embedded model, 8 prompts
x 8 samples x 8 tokens, 1 CPU thread, it took 0.88-0.93x the time of `model.generate`.

On a GPU the decode step is replayed from a CUDA graph (`decode_step="cuda_graph"`,
rollout/decode_graphs.py): 11.6x the eager step at 256 rows of a 403M Llama on an H200.

The n samples of a prompt share one prefill: the prompt is run once and its KV cache copied to
its samples (as vLLM does), 2x faster than prefilling every row for short responses (8 prompts x
4 samples x 8 tokens, SmolLM2-135M and the embedded model alike).

Memory is bounded: a decode batch's KV cache and attention mask are allocated once, for the
batch's final length, and filled in place (`PreallocatedLayer`, rollout/kv_cache.py), rather
than grown by concatenation each step as transformers' `DynamicCache` does. That copied the
whole cache every step (quadratic in the response length) and held a layer's old and new keys at
once: peak memory 1 + 1/(2 x layers) times the cache, against 1.04x now
(tests/rollout/test_engine_memory.py), and it took 2.5-2.8x as long for 512 rows x 256 tokens on
the embedded model (1 CPU thread; the same time for 32 rows x 64 tokens).
`max_tokens_per_batch` bounds the allocation.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from itertools import groupby

import torch
from transformers import PreTrainedModel

from rllib_llm.exchange import token_budget
from rllib_llm.exchange.devices import mixed_precision, module_device
from rllib_llm.rollout.decode_graphs import StaticDecode
from rllib_llm.rollout.engine import Response, SamplingParams, check_generate_args, stop_end
from rllib_llm.rollout.kv_cache import kv_cache

# How the engine runs a decode step after the prefill: "eager" attends over the cache columns
# written so far, issuing each kernel from Python; "static" runs the step at fixed shapes (all
# columns, a mask; rollout/decode_graphs.py); "cuda_graph" replays that fixed-shape step from a
# CUDA graph captured once per decode batch.
DECODE_STEPS = ("eager", "static", "cuda_graph")


class TorchRolloutEngine:
    """`RolloutEngine` over a causal LM held in this process.

    Args:
        model: a Hugging Face causal LM; used in place (pass a copy to keep it apart from the
            learner's). Generation runs it in eval mode and then restores its mode, so a model
            shared with a learner keeps training with dropout where it has any.
        eos_token_id: id, or ids, that end a response (several for chat models with end-of-turn
            tokens).
        pad_token_id: id used to left-pad prompts; never attended to, never returned.
        device: where the model runs. None (the default) runs it on the device its parameters are
            on and never moves it: a sampler sharing the learner's model in one process must
            sample on the learner's device, and the shared model must stay where it is. A given
            device moves the model there.
        max_batch_size: most rows (sequences) decoded together; None: no bound on rows.
        max_tokens_per_batch: most tokens decoded together, counted as rows x (padded prompt
            length + `SamplingParams.max_tokens`); a batch holds as many rows as fit, and at least
            one (an over-long row runs alone). None: no bound on tokens. With `max_batch_size`
            both bounds hold; with neither, all prompts x n are decoded at once.
        autocast_dtype: sample under torch.autocast to this dtype (sampler_autocast).
        decode_step: how each decode step after the prefill runs: "eager" (each kernel issued
            from Python, over the cache columns so far), "static" (the fixed-shape step of
            rollout/decode_graphs.py, run eagerly: what the CPU tests compare) or "cuda_graph"
            (that step replayed from a CUDA graph captured once per decode batch; CUDA only).
        graph_fallback: with "cuda_graph", a capture that fails warns once and the engine
            decodes eagerly from then on (the reason in `graph_failure`); False raises it.

    Memory: each decode batch allocates its KV cache once, for its final length, so its size is
    known up front: about rows x (padded prompt length + max_tokens) x layers x 2 (keys, values)
    x kv_heads x head_dim x bytes per element. `max_tokens_per_batch` bounds the first two
    factors, hence the cache: e.g. SmolLM2-135M (30 layers, 3 kv heads of 64, bfloat16) holds
    22.5 KiB per token, so 65536 tokens per batch cap its cache at 1.4 GiB. (Models whose layers
    are not all plain full attention, such as sliding-window or hybrid ones, keep transformers'
    growing `DynamicCache`; see `kv_cache`.)
    """

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        eos_token_id: int | Sequence[int],
        pad_token_id: int,
        device: str | torch.device | None = None,
        max_batch_size: int | None = None,
        max_tokens_per_batch: int | None = None,
        autocast_dtype: torch.dtype | None = None,
        decode_step: str = "eager",
        graph_fallback: bool = False,
    ) -> None:
        eos_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        if not eos_ids:
            raise ValueError("eos_token_id=[] must name at least one token id")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size} must be None or >= 1")
        if max_tokens_per_batch is not None and max_tokens_per_batch < 1:
            raise ValueError(
                f"max_tokens_per_batch={max_tokens_per_batch} must be None or >= 1 (tokens of a "
                "decode batch: rows x (padded prompt length + max_tokens))"
            )
        if decode_step not in DECODE_STEPS:
            raise ValueError(f"decode_step={decode_step!r} must be one of {DECODE_STEPS}")
        if device is None:
            self.device = module_device(model)
            self.model = model
        else:
            self.device = torch.device(device)
            self.model = model.to(self.device)
        self.eos_token_ids = eos_ids
        self.pad_token_id = int(pad_token_id)
        self.max_batch_size = max_batch_size
        self.max_tokens_per_batch = max_tokens_per_batch
        # The learners' mixed precision (sampler_autocast): the behaviour log-probs then come
        # from the precision that trains (float32 sampling against bf16 training clipped 17% of
        # an on-policy step's tokens on the embedded task, none under the same autocast; on
        # SmolLM2-135M the cached decode still rounds apart from the full forward: 37% -> 33%).
        self.autocast_dtype = autocast_dtype
        if decode_step == "cuda_graph" and self.device.type != "cuda":
            raise ValueError(f"decode_step='cuda_graph' needs a CUDA device; the engine computes "
                             f"on {self.device}")
        self.decode_step = decode_step
        # 'auto' graphs (torch_engine_cuda_graphs): a capture this model or torch refuses warns
        # once and leaves the engine eager (the reason kept here) instead of failing the call.
        self.graph_fallback = graph_fallback
        self.graph_failure: str | None = None
        self._eos = torch.tensor(eos_ids, device=self.device)
        self._weight_version = 0
        self._receiver = None  # set by join_weight_broadcast

    @property
    def weight_version(self) -> int:
        return self._weight_version

    def generate(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams
    ) -> list[list[Response]]:
        """Sample `n` independent responses per prompt; see `RolloutEngine.generate`."""
        check_generate_args(prompt_ids, n)
        generator = None
        if sampling.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(sampling.seed)
        row_tokens = [len(p) + sampling.max_tokens for p in prompt_ids]
        flat: list[Response] = []
        was_training = self.model.training
        self.model.eval()  # dropout off: the log-probs must be those of the deterministic policy
        try:
            with self._autocast():
                for batch in _batches(row_tokens, n, self.max_batch_size,
                                      self.max_tokens_per_batch):
                    flat += self.generate_batch([list(prompt_ids[i]) for i, _ in batch],
                                                [count for _, count in batch], sampling,
                                                generator)
        finally:
            self.model.train(was_training)
            # A runner sharing a GPU with a learner hands back the blocks its KV caches held
            # before the learner runs (the caches were locals of `generate_batch`, gone by now).
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        return [flat[i * n : (i + 1) * n] for i in range(len(prompt_ids))]

    def _autocast(self):
        """torch.autocast to `autocast_dtype` on the engine's device; a no-op without it.

        Without autocast's cache of cast weights under a CUDA graph: a capture must not depend
        on tensors that live only as long as the autocast context (torch's graph guide)."""
        return mixed_precision(self.autocast_dtype, self.device,
                               cache=self.decode_step != "cuda_graph")

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Copy `state_dict` (all or some of the model's tensors) into the model, in place."""
        own = self.model.state_dict()  # tensors share storage with the parameters
        unknown = sorted(set(state_dict) - set(own))
        if unknown:
            raise ValueError(
                f"load_weights: state_dict keys {unknown[:5]} are not in the engine's model "
                f"(it has e.g. {sorted(own)[:3]}); strip any wrapper prefix before syncing"
            )
        self._copy_in((name, own[name], value) for name, value in state_dict.items())
        self._weight_version = int(version)

    def join_weight_broadcast(self, *, first_rank: int, **address) -> None:
        """Join the learner's broadcast group as rank `first_rank` (see `weight_broadcast`)."""
        from rllib_llm.exchange.weight_broadcast import Receiver

        self._receiver = Receiver(rank=first_rank, device=self.device, **address)

    def receive_weights(self) -> int:
        """Receive one broadcast of the learner's weights into the model; returns its version."""
        if self._receiver is None:
            raise RuntimeError("receive_weights before join_weight_broadcast")
        # Piece by piece into each weight's rows in place: the sync's extra memory here is the
        # bucket arriving and the last one read, never a whole weight larger than a bucket.
        version, pieces = self._receiver.receive_pieces()
        own = self.model.state_dict()
        self._copy_in(((name, own[name] if rows is None else own[name][rows], tensor)
                       for name, rows, tensor in pieces))
        self._weight_version = version
        return version

    def load_shared_weights(self, shared) -> int:
        """Copy the learner's weights from CUDA IPC handles (`exchange/weight_ipc.py`) into the
        model, on this engine's GPU; returns their version."""
        from rllib_llm.exchange.weight_ipc import open_shared

        if self.device.type != "cuda":
            raise ValueError("weight_sync_backend='cuda_ipc': this engine computes on "
                             f"{self.device}, not on the learner's GPU")
        own = self.model.state_dict()
        self._copy_in((name, own[name], value) for name, value in open_shared(shared))
        # The handles are the learner's own weights, which its next update overwrites as soon as
        # the driver hears back: the copies must have finished, not only been queued.
        torch.cuda.current_stream(self.device).synchronize()
        self._weight_version = shared.version
        return shared.version

    @staticmethod
    def _copy_in(items) -> None:
        """Copy each `(name, target, value)`'s value into `target`: a weight of the model, or
        a view of its rows (a piece of a broadcast)."""
        with torch.no_grad():
            for name, target, value in items:
                if target.shape != value.shape:
                    raise ValueError(
                        f"load_weights: {name} has shape {tuple(value.shape)}, the engine's model "
                        f"expects {tuple(target.shape)}"
                    )
                target.copy_(value)  # casts dtype and moves device as needed

    @torch.inference_mode()
    def generate_batch(
        self, prompts: list[list[int]], counts: list[int], sampling: SamplingParams,
        generator: torch.Generator | None,
    ) -> list[Response]:
        """One decode batch: `counts[i]` samples of `prompts[i]`, as consecutive rows, with one
        KV cache for all of them. Each prompt is prefilled once and its KV cache copied to its
        samples (a group of n shares one prefill). `generate` cuts its rows into such batches
        of at most `max_batch_size` rows and `max_tokens_per_batch` tokens (a prompt's samples
        may span batches; a row alone over the budget is a batch of its own); `generator` draws
        the samples (None: the global RNG). The model runs in the mode and precision it is
        in: `generate` puts it in eval mode and under the engine's autocast around its batches."""
        input_ids, prompt_mask = left_pad(prompts, self.pad_token_id, self.device)  # (P, L)
        L, T_max = input_ids.shape[1], sampling.max_tokens
        rows = torch.repeat_interleave(torch.arange(len(prompts), device=self.device),
                                       torch.tensor(counts, device=self.device))  # (B,)
        B = rows.shape[0]
        # Positions count real tokens only, so a left-padded prompt sees the same RoPE positions
        # as it would alone (this is what makes batched log-probs match a teacher-forced pass).
        position_ids = (prompt_mask.cumsum(-1) - 1).clamp(min=0)  # (P, L)
        # The mask of the whole decode, allocated once: the prompts' columns, then one column of
        # ones per response token; step t attends over its first L + t + 1 columns.
        attention_mask = prompt_mask.new_ones(B, L + T_max)  # (B, L + T_max)
        attention_mask[:, :L] = prompt_mask[rows]
        cache = kv_cache(self.model.config, B, L + T_max)
        logits = self.model(
            input_ids=input_ids,
            attention_mask=prompt_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]  # (P, V)
        cache.batch_select_indices(rows)  # the P prompts' KV rows become the B samples' rows
        logits = logits[rows]  # (B, V)
        next_pos = position_ids[rows, -1:] + 1  # (B, 1)
        tokens = torch.empty(B, T_max, dtype=torch.long, device=self.device)
        logps = torch.empty(B, T_max, dtype=torch.float32, device=self.device)
        done = torch.zeros(B, dtype=torch.bool, device=self.device)
        # Only when asked: (B, T_max, k) ids and log-probs of each step's k most likely tokens.
        k = min(sampling.top_logprobs, logits.shape[-1])
        top = (torch.empty(B, T_max, k, dtype=torch.long, device=self.device),
               torch.empty(B, T_max, k, dtype=torch.float32, device=self.device)) if k else None
        stops = [torch.tensor(seq, device=self.device) for seq in sampling.stop_sequences]
        step = self._decode_step(cache, attention_mask[:, :L], L + T_max)
        for t in range(T_max):
            tokens[:, t], logps[:, t] = sample_next_token(logits, sampling, generator)
            if top is not None:
                top[0][:, t], top[1][:, t] = top_k_logprobs(logits, sampling, k)
            done |= torch.isin(tokens[:, t], self._eos)
            for seq in stops:  # (L,): rows whose last L tokens are this sequence are done
                if t + 1 >= len(seq):
                    done |= (tokens[:, t + 1 - len(seq) : t + 1] == seq).all(dim=-1)
            if t + 1 == T_max or bool(done.all()):
                break
            # Finished rows keep decoding (cheaper than shrinking the cache); their extra tokens
            # are cut off in `_to_responses`.
            if step is not None:
                try:  # the same step at fixed shapes, writing column L + t
                    logits = step(tokens[:, t], next_pos, L + t)
                except Exception as e:  # noqa: BLE001 (only a first capture falls back)
                    step = self._capture_failed(step, cache, e)
            if step is None:
                logits = self.model(
                    input_ids=tokens[:, t : t + 1],
                    attention_mask=attention_mask[:, : L + t + 1],  # (B, L + t + 1), a view
                    position_ids=next_pos,
                    past_key_values=cache,
                    use_cache=True,
                ).logits[:, -1]  # (B, V)
            next_pos = next_pos + 1
        responses = _to_responses(tokens[:, : t + 1], logps[:, : t + 1], self.eos_token_ids,
                                  sampling.stop_sequences)
        if top is not None:
            for response, ids, values in zip(responses, top[0].tolist(), top[1].tolist(),
                                             strict=True):
                n = len(response.token_ids)  # the row's tokens up to its end
                response.top_logprobs = [list(zip(i, v, strict=True)) for i, v in
                                         zip(ids[:n], values[:n], strict=True)]
        return responses

    def _decode_step(self, cache, prompt_mask: torch.Tensor, max_len: int) -> StaticDecode | None:
        """The fixed-shape step of `decode_step` 'static' or 'cuda_graph'; None: the eager loop.
        A model or cache the fixed-shape step cannot serve is refused (ValueError); 'auto'
        graphs check that when the engine is built (`decode_graphs.cuda_graph_decode`)."""
        if self.decode_step == "eager":
            return None
        return StaticDecode(self.model, cache, prompt_mask, max_len,
                            capture=self.decode_step == "cuda_graph")

    def _capture_failed(self, step: StaticDecode, cache, error: Exception) -> None:
        """Go on eagerly after a failed first capture, if `graph_fallback`; else raise `error`.
        The warm-up runs wrote only the step's own column, which the eager step writes again."""
        if not self.graph_fallback or step.graph is not None or not step.capture:
            raise error
        self.graph_failure = f"{type(error).__name__}: {error}"[:300]
        warnings.warn(f"rllib_llm: the torch engine could not capture its decode step in a CUDA "
                      f"graph ({self.graph_failure}); it decodes eagerly from now on", stacklevel=2)
        self.decode_step = "eager"
        for layer in cache.layers:
            layer.write_at = None
        return None


def _batches(
    row_tokens: list[int], n: int, max_rows: int | None, max_tokens: int | None = None
) -> list[list[tuple[int, int]]]:
    """Split `n` samples of each prompt into decode batches, in prompt order, under the
    token budget the learner's micro-batches share (exchange/token_budget.py).

    Args:
        row_tokens: per prompt, the tokens one of its rows needs: prompt length + max_tokens. A
            batch costs rows x its longest row (shorter prompts are left-padded to the longest).
        n: samples (rows) per prompt.
        max_rows: most rows per batch; None: no bound.
        max_tokens: most tokens (rows x longest row) per batch; None: no bound. A row that alone
            exceeds it still gets a batch of its own.

    Returns:
        Batches as `(prompt index, number of samples)` pairs; a group that does not fit in the
        current batch is split over batches.
    """
    # Each sample is a row as wide as its prompt's; a prompt's rows are consecutive, so each
    # batch's rows read back as runs of (prompt, samples).
    rows = [(tokens,) for tokens in row_tokens for _ in range(n)]
    return [[(prompt, len(list(run))) for prompt, run in groupby(row // n for row in batch)]
            for batch in token_budget.pack(rows, max_rows=max_rows, max_tokens=max_tokens)]


def left_pad(
    rows: list[list[int]], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into `(input_ids, attention_mask)`, both `(B, L)` long tensors.

    Left, not right: every row's last prompt token then sits in the last column, where decoding
    appends the next token.
    """
    L = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), L), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), L), dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, L - len(r) :] = torch.tensor(r, dtype=torch.long)
        attention_mask[i, L - len(r) :] = 1
    return input_ids.to(device), attention_mask.to(device)


def reported_logits(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """`(B, V)` float32 logits of the distribution the engine reports log-probs of:
    logits / temperature, or the logits themselves when greedy (temperature 1)."""
    x = logits.float()
    return x if sampling.greedy else x / sampling.temperature


def sample_next_token(
    logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row from `logits` `(B, V)`; return `(token (B,), logp (B,))`.

    `logp` is `log_softmax(logits / temperature)[token]`, before top-p (the learner's quantity),
    computed as the learner computes it (`learner/token_logp.py`): x[token] − logsumexp(x) with
    x = logits / temperature in float32, so that for equal logits the two are bit-equal (torch's
    fused `log_softmax` rounds differently, by up to ~1e-6).
    """
    x = reported_logits(logits, sampling)  # (B, V)
    if sampling.greedy:
        token = x.argmax(dim=-1)  # (B,); logp reported at temperature 1
    else:
        probs = torch.log_softmax(x, dim=-1).exp()
        if sampling.top_p < 1.0:
            probs = top_p_filter(probs, sampling.top_p)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
    return token, x.gather(-1, token[:, None]).squeeze(-1) - torch.logsumexp(x, dim=-1)


def top_k_logprobs(
    logits: torch.Tensor, sampling: SamplingParams, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The `k` most likely tokens of each row of `logits` `(B, V)` and their log-probs, both
    `(B, k)`, most likely first: of the distribution `sample_next_token` reports the sampled
    token's log-prob from (logits / temperature before top-p; temperature 1 when greedy),
    computed with the same operations, so a sampled token found here has bit-equal log-probs.
    """
    x = reported_logits(logits, sampling)  # (B, V)
    values, ids = x.topk(k, dim=-1)  # (B, k), sorted
    return ids, values - torch.logsumexp(x, dim=-1, keepdim=True)


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero all but the smallest set of most likely tokens whose mass reaches `top_p`.

    `probs` `(B, V)`; returns unnormalised `(B, V)` (`torch.multinomial` normalises). The most
    likely token always survives.
    """
    sorted_p, order = probs.sort(dim=-1, descending=True)  # (B, V)
    mass_before = sorted_p.cumsum(dim=-1) - sorted_p  # mass of strictly more likely tokens
    sorted_p = sorted_p.masked_fill(mass_before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_p)


def _to_responses(
    tokens: torch.Tensor, logps: torch.Tensor, eos_token_ids: list[int],
    stop_sequences: tuple[tuple[int, ...], ...] = (),
) -> list[Response]:
    """Cut each row `(T,)` after its first EOS or stop sequence (kept) into a `Response`;
    neither → "length"."""
    eos = set(eos_token_ids)
    out = []
    for row_tokens, row_logps in zip(tokens.tolist(), logps.tolist(), strict=True):
        if stop_sequences:
            end = stop_end(row_tokens, eos, stop_sequences)
        else:
            end = next((i + 1 for i, tok in enumerate(row_tokens) if tok in eos), None)
        if end is None:
            out.append(Response(row_tokens, row_logps, "length"))
        else:
            out.append(Response(row_tokens[:end], row_logps[:end], "stop"))
    return out
