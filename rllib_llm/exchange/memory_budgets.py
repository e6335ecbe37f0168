"""Token budgets sized by the device a part computes on: how many tokens the torch engine decodes
together (`max_tokens_per_generate_batch`) and a learner passes forward and backward at once
(`max_tokens_per_micro_batch`), when they are "auto" (their default).

On a CPU the budgets are the fixed defaults below, sized for a 2-core machine. On a GPU each part
(a learner, an env runner's engine) sizes its own, once, when it is built on its device, from
the GPU's free memory and the share of it the part may use (`device_memory_share`, in the spirit
of vLLM's `gpu_memory_utilization`; verl's `ppo_max_token_len_per_gpu`, chosen for the user):

    generate tokens    = (share x free - weights) / (KV cache + one layer's activations per token)
    micro-batch tokens = min(GPU_MICRO_BATCH_TOKENS,
                             (share x free - weights - 3 x trained weights) / activations per token)

where free is the device's free memory not counting the part's own weights (already there when
it sizes), a trained weight brings its gradient and Adam's two moments (each the weight's size),
and per token of a sequence:

    KV cache      = 2 (keys, values) x layers x kv_heads x head_dim x bytes per element
    logits        = 3 x vocab x 4 bytes (float32 logits, their log-softmax, its gradient)
    one layer     = bytes x (8 x hidden + 2 x kv_heads x head_dim + 4 x intermediate): the
                    inputs and outputs of the norms, attention and the SwiGLU MLP that backward
                    needs (a Llama block; Korthikanti et al. 2022, https://arxiv.org/abs/2205.05198,
                    count 34 x hidden bytes in 16-bit for a GPT block with flash attention)
    activations   = logits + layers x one layer, or with gradient checkpointing
                    logits + layers x hidden x bytes (each layer's input) + one layer recomputed

Estimates, not measurements: the share leaves the rest of the device for the caching allocator's
slack and for the other parts (a learner and an engine on one GPU at the default 0.45 use 90% of
it). This module is plain arithmetic; only `free_device_bytes` asks torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# The value of a budget field (and of gradient_checkpointing, vllm_enforce_eager) that asks for the
# device's default.
AUTO = "auto"

# The budgets on a CPU, in tokens. A learner micro-batch of 4,096 tokens holds about 5 GiB of bf16
# activations of a 400M-parameter, 24-layer Llama (hidden 1,024); 32,768 tokens of its KV cache
# are 3 GiB. Both are small for a 135M model and leave the embedded task's batches whole.
CPU_MICRO_BATCH_TOKENS = 4096
CPU_GENERATE_TOKENS = 32768

# The most tokens a learner's pass takes on a GPU, however much memory is free: a bound on
# activations, bought with time. On one H200 the 403M shape's 68k-token batch in one pass held
# 11.1 GiB beside a 7 GiB engine, over the 16 GiB the two may use (issue 35's goal); in three
# passes of at most 32,768 tokens it held 7.2 GiB, and learning took 1.51 s against 1.14 s
# (benchmarks/RESULTS.md, "On one GPU at the shipped defaults").
GPU_MICRO_BATCH_TOKENS = 32768

# A sized budget is rounded down to a multiple of this, and never below it (one sequence longer
# than a budget still runs, alone).
ROUND_TOKENS = 1024

LOGIT_COPIES = 3  # float32 logits, their log-softmax, its gradient
LOGIT_BYTES = 4  # log-probs are computed in float32
LAYER_HIDDEN_COPIES = 8  # per layer: norm inputs and outputs, q, attention out, o-proj, residuals
LAYER_MLP_COPIES = 4  # per layer: gate, up, silu(gate), silu(gate) * up
TRAINED_COPIES = 3  # per trained weight: its gradient and Adam's exp_avg and exp_avg_sq


@dataclass(frozen=True)
class ModelShape:
    """What a part's memory depends on: its causal LM's shape and the bytes of its parameters.

    Attributes:
        layers, kv_heads, head_dim, hidden, intermediate, vocab: the LM's shape (Hugging Face's
            num_hidden_layers, num_key_value_heads, head_dim, hidden_size, intermediate_size,
            vocab_size).
        dtype_bytes: bytes per element of the weights, hence of the KV cache and activations
            (2 for bfloat16, 4 for float32).
        weight_bytes: every parameter the part holds on the device (a learner's reference
            model, critic or teacher included).
        trained_bytes: the part of weight_bytes the optimizer trains (0 for an engine).
    """

    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    dtype_bytes: int
    weight_bytes: int
    trained_bytes: int = 0

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def layer_bytes_per_token(self) -> int:
        """One layer's activations that backward needs, per token."""
        return self.dtype_bytes * (LAYER_HIDDEN_COPIES * self.hidden
                                   + 2 * self.kv_heads * self.head_dim
                                   + LAYER_MLP_COPIES * self.intermediate)

    def activation_bytes_per_token(self, *, gradient_checkpointing: bool) -> int:
        """A learner's activations per token of a micro-batch (forward and backward)."""
        logits = LOGIT_COPIES * self.vocab * LOGIT_BYTES
        if gradient_checkpointing:
            return logits + self.layers * self.hidden * self.dtype_bytes + \
                self.layer_bytes_per_token
        return logits + self.layers * self.layer_bytes_per_token

    @property
    def generate_bytes_per_token(self) -> int:
        """The torch engine's memory per token of a decode batch: its KV cache, and one layer's
        activations of the prefill (which also covers a decode step's logits per row)."""
        return self.kv_bytes_per_token + self.layer_bytes_per_token


def _tokens(room: float, per_token: int) -> int:
    """Whole ROUND_TOKENS of `per_token` bytes in `room` bytes; at least ROUND_TOKENS."""
    return max(ROUND_TOKENS, int(room // per_token) // ROUND_TOKENS * ROUND_TOKENS)


def budgets_for_device(free_bytes: int, share: float, shape: ModelShape, *,
                       gradient_checkpointing: bool,
                       most_micro_batch_tokens: int | None = GPU_MICRO_BATCH_TOKENS,
                       ) -> tuple[int, int]:
    """(generate tokens, micro-batch tokens) that fit `share` of `free_bytes` beside the part's
    weights (and, for the learner, their gradients and Adam's moments), the micro-batch at most
    `most_micro_batch_tokens` (None: what fits); see the module docstring.

    Args:
        free_bytes: the device's free memory, not counting the part's own weights.
        share: the part's share of it, in (0, 1] (`device_memory_share`).
        shape: the part's model (`model_shape`).
        gradient_checkpointing: whether the learner recomputes layer activations in backward.

    Each is a multiple of ROUND_TOKENS, and at least ROUND_TOKENS even where the weights leave
    no room (the part will not fit whatever its budget).
    """
    room = share * free_bytes - shape.weight_bytes
    generate = _tokens(room, shape.generate_bytes_per_token)
    learn = _tokens(room - TRAINED_COPIES * shape.trained_bytes,
                    shape.activation_bytes_per_token(
                        gradient_checkpointing=gradient_checkpointing))
    if most_micro_batch_tokens is not None:
        learn = min(learn, most_micro_batch_tokens)
    return generate, learn


def model_shape(model, *, others=(), trained: bool = False) -> ModelShape:
    """The ModelShape of a Hugging Face causal LM `model` as a part holds it: its config's shape,
    and the bytes of its parameters and those of `others` (modules beside it on the device: a
    reference model, a critic). `trained`: the optimizer trains the parameters that require a
    gradient (a learner); else nothing (an engine)."""
    cfg = model.config
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg  # (multimodal)
    heads = cfg.num_attention_heads
    hidden = cfg.hidden_size
    params = {id(p): p for m in (model, *others) for p in m.parameters()}.values()
    first = next(iter(params))
    return ModelShape(
        layers=cfg.num_hidden_layers,
        kv_heads=getattr(cfg, "num_key_value_heads", None) or heads,
        head_dim=getattr(cfg, "head_dim", None) or hidden // heads,
        hidden=hidden,
        intermediate=getattr(cfg, "intermediate_size", None) or 4 * hidden,
        vocab=cfg.vocab_size,
        dtype_bytes=first.element_size(),
        weight_bytes=sum(p.numel() * p.element_size() for p in params),
        trained_bytes=sum(p.numel() * p.element_size() for p in params
                          if trained and p.requires_grad),
    )


def free_device_bytes(device) -> int | None:
    """Free memory of a CUDA device in bytes (torch.cuda.mem_get_info); None on any other
    device (a CPU keeps the fixed budgets)."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def generate_budget(value, device, model, share: float,
                    free_bytes: int | None = None) -> tuple[int | None, str]:
    """The torch engine's `max_tokens_per_batch` for `max_tokens_per_generate_batch=value`, with
    `model` (a Hugging Face causal LM) on `device`, and how it was sized ("" unless sized).

    An explicit value (an int, or None = no bound) is returned as it is; "auto" is
    CPU_GENERATE_TOKENS on a CPU, else what fits `share` of the device's free memory
    (`free_bytes`, default asked of torch now, with the model's weights already there).
    """
    if value != AUTO:
        return value, ""
    if free_bytes is None:
        free_bytes = free_device_bytes(device)
    if free_bytes is None:
        return CPU_GENERATE_TOKENS, ""
    shape = model_shape(model)
    free_before = free_bytes + shape.weight_bytes
    tokens, _ = budgets_for_device(free_before, share, shape, gradient_checkpointing=False)
    return tokens, f"max_tokens_per_generate_batch={tokens} ({sizing_note(free_before, share)})"


def sizing_note(free_bytes: int, share: float) -> str:
    """How an "auto" budget was sized, for the line a part prints at build."""
    return f"auto: {share:.0%} of {free_bytes / 2**30:.1f} GiB free"
