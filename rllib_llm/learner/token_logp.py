"""log pi(token) and the entropy of pi from a causal LM's logits, without full-vocabulary
temporaries.

The obvious `log_softmax(logits / T)` materialises a (B, T, V) float32 tensor (49k entries per
position for SmolLM2), keeps it for the backward pass, and the entropy's `exp(logp) * logp` makes
two more. `TokenLogp` instead walks the positions in chunks of `CHUNK_POSITIONS` (of a row, or of
several short rows): log pi(token) = x_token - logsumexp(x) and the entropy logsumexp(x) -
sum(softmax(x) * x), with x = logits / T, so forward holds only the logits it is given plus one
chunk; backward writes the logits' gradient (softmax(x) - onehot(token)) * -grad / T chunk by
chunk, recomputing the softmax.
Same values as the obvious formula (float32 rounding; tested).
"""

from __future__ import annotations

import torch

# Positions per chunk (of one row, or of several short rows): a (CHUNK_POSITIONS, V) float32
# temporary (12 MiB at V = 49k).
CHUNK_POSITIONS = 64
# Positions per chunk of `LinearTokenLogp`, which also multiplies by the LM head: bigger matmuls
# (a few (128, V) float32 temporaries: 24 MiB each at V = 49k).
HEAD_CHUNK_POSITIONS = 128


def token_logp_and_entropy(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float, *,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(token) and the entropy of pi under logits / temperature, both (B, T) float32.

    The sampler drew tokens from softmax(logits / temperature), so the learner scores them the
    same way, in float32 so that bf16 models do not lose the small log-prob differences that
    importance ratios are made of. With `entropy_grad=False` the entropy is a metric (computed
    without autograd) and the chunked `TokenLogp` computes both; with a gradient for the entropy
    (entropy_coef > 0) the full log-softmax is built, as its gradient needs it anyway.
    """
    if entropy_grad and torch.is_grad_enabled():
        logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)  # (B, T, V)
        logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (B, T)
        return logp, -(logp_all.exp() * logp_all).sum(-1)
    return TokenLogp.apply(logits, tokens, float(temperature))


class TokenLogp(torch.autograd.Function):
    """(log pi(token), entropy), both (B, T), from logits (B, T, V), chunk by chunk; only the
    log-probs carry a gradient."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, tokens: torch.Tensor, temperature: float):
        b, t, _ = logits.shape
        logp = torch.empty((b, t), dtype=torch.float32, device=logits.device)
        entropy = torch.empty_like(logp)
        lse = torch.empty_like(logp)
        for rows, start, stop in _chunks(b, t):
            x = logits[rows, start:stop].float() / temperature  # (R, C, V)
            chunk_lse = torch.logsumexp(x, dim=-1)
            lse[rows, start:stop] = chunk_lse
            picked = x.gather(-1, tokens[rows, start:stop, None]).squeeze(-1)
            logp[rows, start:stop] = picked - chunk_lse
            p = torch.exp(x - chunk_lse[..., None])
            entropy[rows, start:stop] = chunk_lse - (p * x).sum(-1)
        ctx.save_for_backward(logits, tokens, lse)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor, _grad_entropy: torch.Tensor):
        logits, tokens, lse = ctx.saved_tensors
        temperature = ctx.temperature
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        b, t, _ = logits.shape
        for rows, start, stop in _chunks(b, t):
            x = logits[rows, start:stop].float() / temperature
            g = grad_logp[rows, start:stop, None].float()  # (R, C, 1)
            # d logp / d x = onehot(token) - softmax(x); x = logits / T.
            chunk = torch.exp(x - lse[rows, start:stop, None]) * -g
            chunk.scatter_add_(-1, tokens[rows, start:stop, None], g)
            grad[rows, start:stop] = chunk / temperature
        return grad, None, None


def _chunks(rows: int, positions: int):
    """(rows, start, stop), a slice of rows and a span of positions, over every position of every
    row, at most CHUNK_POSITIONS positions at a time: whole rows together when a row is shorter
    than a chunk (short responses: one chunk per row made a Python step per row, ~7% of an
    iteration at 512 responses of 6 tokens), else a row's positions chunk by chunk."""
    per_block = max(1, CHUNK_POSITIONS // max(positions, 1))
    for first in range(0, rows, per_block):
        block = slice(first, min(first + per_block, rows))
        for start in range(0, positions, CHUNK_POSITIONS):
            yield block, start, min(start + CHUNK_POSITIONS, positions)


def head_token_logp_and_entropy(
    hidden: torch.Tensor, head: torch.nn.Linear, tokens: torch.Tensor, temperature: float, *,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(token) and the entropy of pi (B, T) float32 from the last hidden states (B, T, H)
    and the LM head (`use_fused_kernels`): the logits head(hidden) are never materialised whole,
    neither for the backward pass nor as a gradient; each chunk's are computed in forward and
    again in backward (one more LM-head matmul). The entropy carries a gradient when asked."""
    return LinearTokenLogp.apply(hidden, head.weight, head.bias, tokens, float(temperature),
                                 entropy_grad)


class LinearTokenLogp(torch.autograd.Function):
    """(log pi(token), entropy), both (B, T), from hidden (B, T, H) and an LM head's weight
    (V, H) and bias (V or None), HEAD_CHUNK_POSITIONS positions at a time (verl's
    FusedLinearForPPO, in plain torch).

    With x = (hidden @ W.T + b) / T, p = softmax(x) and g_l, g_e the upstream gradients of
    log pi(token) and the entropy, the gradient of x is
        g_l * (onehot(token) - p) + g_e * p * (E_p[x] - x)
    (d entropy / dx_j = p_j (E_p[x] - x_j), with E_p[x] = logsumexp(x) - entropy), and the
    hidden states', W's and b's follow from x = (hidden @ W.T + b) / T.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, temperature: float, entropy_grad: bool):
        b, t, h = hidden.shape
        flat_hidden, flat_tokens = hidden.reshape(b * t, h), tokens.reshape(b * t)
        logp = torch.empty(b * t, dtype=torch.float32, device=hidden.device)
        entropy, lse = torch.empty_like(logp), torch.empty_like(logp)
        for start, stop in _spans(b * t):
            x = _chunk_x(flat_hidden[start:stop], weight, bias, temperature)
            lse[start:stop] = chunk_lse = torch.logsumexp(x, dim=-1)
            logp[start:stop] = x.gather(-1, flat_tokens[start:stop, None]).squeeze(-1) - chunk_lse
            p = torch.exp(x - chunk_lse[:, None])
            entropy[start:stop] = chunk_lse - (p * x).sum(-1)
        ctx.save_for_backward(flat_hidden, weight, bias, flat_tokens, lse, entropy)
        ctx.temperature, ctx.shape, ctx.entropy_grad = temperature, (b, t, h), entropy_grad
        logp, entropy = logp.view(b, t), entropy.view(b, t)
        if not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        flat_hidden, weight, bias, tokens, lse, entropy = ctx.saved_tensors
        temperature = ctx.temperature
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        grad_logp = grad_logp.reshape(-1).float()
        grad_entropy = grad_entropy.reshape(-1).float() if ctx.entropy_grad else None
        grad_hidden = torch.empty_like(flat_hidden) if needs_hidden else None
        # Summed over every chunk in float32, cast to the weights' dtype once at the end.
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if needs_weight else None
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) \
            if needs_bias else None
        for start, stop in _spans(flat_hidden.shape[0]):
            h = flat_hidden[start:stop]
            x = _chunk_x(h, weight, bias, temperature)
            p = torch.exp(x - lse[start:stop, None])
            g = grad_logp[start:stop, None]
            gx = p * -g
            gx.scatter_add_(-1, tokens[start:stop, None], g)
            if grad_entropy is not None:
                mean_x = (lse[start:stop] - entropy[start:stop])[:, None]  # E_p[x]
                gx += grad_entropy[start:stop, None] * p * (mean_x - x)
            gz = gx / temperature  # d / d (hidden @ W.T + b)
            if needs_hidden:
                grad_hidden[start:stop] = gz.to(weight.dtype) @ weight
            if needs_weight:
                grad_weight += gz.T @ h.float()
            if needs_bias:
                grad_bias += gz.sum(0)
        return (None if grad_hidden is None else grad_hidden.view(ctx.shape),
                None if grad_weight is None else grad_weight.to(weight.dtype),
                None if grad_bias is None else grad_bias.to(bias.dtype), None, None, None)


def _chunk_x(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
             temperature: float) -> torch.Tensor:
    """A chunk's logits / T in float32, computed in the head's dtype as the model computes
    them (C, V). Under autocast (`autocast_dtype`) the hidden states arrive in the autocast
    dtype and forward's matmul ran in it; backward runs outside autocast, so the weights are
    cast the same way here and both passes compute the same logits."""
    if weight.dtype != hidden.dtype:
        weight = weight.to(hidden.dtype)
        bias = None if bias is None else bias.to(hidden.dtype)
    return torch.nn.functional.linear(hidden, weight, bias).float() / temperature


def _spans(positions: int):
    """(start, stop) over `positions` flattened positions, HEAD_CHUNK_POSITIONS at a time."""
    for start in range(0, positions, HEAD_CHUNK_POSITIONS):
        yield start, min(start + HEAD_CHUNK_POSITIONS, positions)
