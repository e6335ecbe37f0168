"""log pi(token) and the entropy of pi from a causal LM's logits, without full-vocabulary
temporaries.

The obvious `log_softmax(logits / T)` materialises a (B, T, V) float32 tensor (49k entries per
position for SmolLM2), keeps it for the backward pass, and the entropy's `exp(logp) * logp` makes
two more. `TokenLogp` instead walks the positions a row at a time, in chunks of `CHUNK_POSITIONS`:
log pi(token) = x_token - logsumexp(x) and the entropy logsumexp(x) - sum(softmax(x) * x), with
x = logits / T, so forward holds only the logits it is given plus one chunk; backward writes the
logits' gradient (softmax(x) - onehot(token)) * -grad / T chunk by chunk, recomputing the softmax.
Same values as the obvious formula (float32 rounding; tested).
"""

from __future__ import annotations

import torch

# Positions per chunk: a (CHUNK_POSITIONS, V) float32 temporary (12 MiB at V = 49k).
CHUNK_POSITIONS = 64


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
        for row, start, stop in _chunks(b, t):
            x = logits[row, start:stop].float() / temperature  # (C, V)
            chunk_lse = torch.logsumexp(x, dim=-1)
            lse[row, start:stop] = chunk_lse
            picked = x.gather(-1, tokens[row, start:stop, None]).squeeze(-1)
            logp[row, start:stop] = picked - chunk_lse
            p = torch.exp(x - chunk_lse[:, None])
            entropy[row, start:stop] = chunk_lse - (p * x).sum(-1)
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
        for row, start, stop in _chunks(b, t):
            x = logits[row, start:stop].float() / temperature
            g = grad_logp[row, start:stop, None].float()  # (C, 1)
            # d logp / d x = onehot(token) - softmax(x); x = logits / T.
            chunk = torch.exp(x - lse[row, start:stop, None]) * -g
            chunk.scatter_add_(-1, tokens[row, start:stop, None], g)
            grad[row, start:stop] = chunk / temperature
        return grad, None, None


def _chunks(rows: int, positions: int):
    """(row, start, stop) over every position of every row, CHUNK_POSITIONS at a time."""
    for row in range(rows):
        for start in range(0, positions, CHUNK_POSITIONS):
            yield row, start, min(start + CHUNK_POSITIONS, positions)
