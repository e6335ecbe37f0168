"""The chunked log-probs and entropy (`rllib_llm.learner.token_logp`) equal the full
log-softmax's, values and gradients, for any temperature, dtype, strided view and chunking."""

from __future__ import annotations

import pytest
import torch

from rllib_llm.learner import token_logp
from rllib_llm.learner.token_logp import token_logp_and_entropy


def reference(logits, tokens, temperature):
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    return (logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1),
            -(logp_all.exp() * logp_all).sum(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_values_and_gradients_are_the_full_log_softmaxs(monkeypatch, dtype, temperature):
    monkeypatch.setattr(token_logp, "CHUNK_POSITIONS", 4)  # 11 positions: chunks 4, 4, 3
    torch.manual_seed(0)
    weights, tokens = torch.randn(3, 11), torch.randint(0, 50, (3, 11))
    start = (torch.randn(3, 12, 50) * 3).to(dtype)
    grads, values = [], []
    for fn in (lambda x, t: token_logp_and_entropy(x, t, temperature, entropy_grad=False),
               lambda x, t: reference(x, t, temperature)):
        full = start.clone().requires_grad_()
        logp, entropy = fn(full[:, :-1], tokens)  # a strided view, as response_logits gives
        (logp * weights).sum().backward()
        values.append((logp.detach(), entropy.detach()))
        grads.append(full.grad)
    (logp, entropy), (ref_logp, ref_entropy) = values
    assert logp.dtype == entropy.dtype == torch.float32
    torch.testing.assert_close(logp, ref_logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-4, rtol=0)
    assert grads[0].dtype == dtype
    torch.testing.assert_close(grads[0].float(), grads[1].float(), atol=1e-5, rtol=0)
    assert not grads[0][:, -1].any()  # the position outside the view gets no gradient


def test_the_entropy_carries_a_gradient_only_when_asked():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7, requires_grad=True)
    tokens = torch.randint(0, 7, (2, 5))
    _, entropy = token_logp_and_entropy(logits, tokens, 1.0, entropy_grad=False)
    assert not entropy.requires_grad
    logp, entropy = token_logp_and_entropy(logits, tokens, 1.0, entropy_grad=True)
    entropy.sum().backward()
    ref_logp, ref_entropy = reference(logits, tokens, 1.0)
    torch.testing.assert_close(entropy, ref_entropy)
    assert logits.grad.abs().sum() > 0
