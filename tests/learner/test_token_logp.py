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
# 11 positions: chunks of 4, 4 and 3 in each row; or 2 rows in a chunk of 24 (rows 0-1, then 2)
@pytest.mark.parametrize("chunk", [4, 24])
def test_chunked_values_and_gradients_are_the_full_log_softmaxs(monkeypatch, dtype, temperature,
                                                                chunk):
    monkeypatch.setattr(token_logp, "CHUNK_POSITIONS", chunk)
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


def head_reference(hidden, weight, bias, tokens, temperature):
    return reference(torch.nn.functional.linear(hidden, weight, bias), tokens, temperature)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("entropy_grad", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_head_chunks_values_and_gradients_are_the_full_formulas(monkeypatch, dtype, temperature,
                                                                 entropy_grad, with_bias):
    monkeypatch.setattr(token_logp, "HEAD_CHUNK_POSITIONS", 4)  # 3 x 11 positions: 9 chunks
    torch.manual_seed(0)
    logp_w, entropy_w = torch.randn(3, 11), torch.randn(3, 11)
    tokens = torch.randint(0, 50, (3, 11))
    start = (torch.randn(3, 12, 8), torch.randn(50, 8), torch.randn(50) if with_bias else None)
    values, grads = [], []
    for fn in (token_logp.LinearTokenLogp.apply, None):
        hidden, weight, bias = (None if x is None else x.to(dtype).requires_grad_()
                                for x in start)
        if fn is None:
            logp, entropy = head_reference(hidden[:, :-1], weight, bias, tokens, temperature)
        else:
            logp, entropy = fn(hidden[:, :-1], weight, bias, tokens, temperature, entropy_grad)
        assert entropy.requires_grad is (entropy_grad or fn is None)
        loss = (logp * logp_w).sum() + ((entropy * entropy_w).sum() if entropy_grad else 0)
        loss.backward()
        values.append((logp.detach(), entropy.detach()))
        grads.append([None if x is None else x.grad for x in (hidden, weight, bias)])
    (logp, entropy), (ref_logp, ref_entropy) = values
    assert logp.dtype == entropy.dtype == torch.float32
    # bf16: a (chunk, H) matmul and a (B, T, H) one round some logits to neighbouring bf16
    # values (0.06 apart at |logit| ~ 8); the gradients' sums are float32 here, bf16 there.
    atol = 1e-4 if dtype == torch.float32 else 0.15
    torch.testing.assert_close(logp, ref_logp, atol=atol, rtol=0)
    torch.testing.assert_close(entropy, ref_entropy, atol=atol, rtol=0)
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    for got, want in zip(grads[0], grads[1]):
        if want is None:
            assert got is None
            continue
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)
    assert not grads[0][0][:, -1].any()  # the position outside the view gets no gradient


def saved_sizes(fn) -> list[int]:
    """The sizes (numel) of the tensors autograd keeps for the backward pass of fn()."""
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x.numel()) or x,
                                                  lambda x: x):
        logp, entropy = fn()
    (logp.sum() + entropy.sum()).backward()
    return saved


def test_head_chunks_never_keep_the_logits_for_backward():
    torch.manual_seed(0)
    hidden = torch.randn(2, 40, 16, requires_grad=True)
    weight = torch.randn(1000, 16, requires_grad=True)
    tokens = torch.randint(0, 1000, (2, 40))
    logits_size = 2 * 40 * 1000
    ours = saved_sizes(
        lambda: token_logp.LinearTokenLogp.apply(hidden, weight, None, tokens, 1.0, True))
    assert max(ours) == weight.numel() < logits_size  # the head's weight, hidden and (B*T)'s
    plain = saved_sizes(lambda: head_reference(hidden, weight, None, tokens, 1.0))
    assert max(plain) >= logits_size  # (what the hooks see when the logits are kept)
