"""use_fused_kernels=True: the learner's log-probs, entropies and every gradient equal the plain
path's (the LM head's logits), for the policy, a shared-trunk critic and the reference; one
training iteration takes the same update; what fused kernels cannot compute is rejected."""

from __future__ import annotations

import pytest
import torch

from rllib_llm.learner import token_logp
from rllib_llm.learner.module import check_fused_head
from rllib_llm.recipes.embedded import embedded_config


def packed_batch(vocab: int) -> dict[str, torch.Tensor]:
    """4 rows of a 5-token prompt (two left-padded) and a 6-token response."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, vocab, (4, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :2] = mask[1, :1] = 0
    return {"input_ids": ids * mask, "attention_mask": mask, "response_ids": ids[:, -6:]}


@pytest.mark.parametrize("overrides", [
    {"entropy_coef": 0.0},
    {"entropy_coef": 0.01},  # the entropy carries a gradient
    {"adv_estimator": "gae", "critic_shares_trunk": True, "entropy_coef": 0.01},
    {"lora_rank": 2, "entropy_coef": 0.0},  # adapters on every linear layer but the head
], ids=["logp", "entropy-grad", "shared-trunk-critic", "lora"])
def test_the_fused_path_gives_the_plain_paths_values_and_gradients(monkeypatch, small_module,
                                                                  overrides):
    monkeypatch.setattr(token_logp, "HEAD_CHUNK_POSITIONS", 5)  # 24 positions: 5 chunks
    plain = small_module(use_fused_kernels=False, **overrides)
    fused = small_module(use_fused_kernels=True, **overrides)
    fused.load_state_dict(plain.state_dict())
    batch = packed_batch(plain.model.config.vocab_size)
    weights = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    outs = []
    for m in (plain, fused):
        out = m.forward_train(batch)
        loss = (out["logp"] * weights).sum()
        if out["entropy"].requires_grad:
            loss = loss + (out["entropy"] * weights.flip(0)).sum()
        if "values" in out:
            loss = loss + out["values"].square().sum()
        loss.backward()
        outs.append(out)
    assert outs[1]["entropy"].requires_grad is (overrides["entropy_coef"] > 0)
    for key in outs[0]:
        torch.testing.assert_close(outs[1][key], outs[0][key], atol=1e-5, rtol=0)
    grads = [{n: p.grad for n, p in m.named_parameters() if p.grad is not None}
             for m in (plain, fused)]
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_scoring_is_the_same_and_holds_no_logits(small_module):
    plain = small_module(use_fused_kernels=False, use_kl_loss=True)
    fused = small_module(use_fused_kernels=True, use_kl_loss=True)
    fused.load_state_dict(plain.state_dict())
    batch = packed_batch(plain.model.config.vocab_size)
    for reference in (False, True):
        torch.testing.assert_close(fused.score_tokens(batch, reference=reference),
                                   plain.score_tokens(batch, reference=reference),
                                   atol=1e-5, rtol=0)
    # The fused path never runs the model's own head over the response (only the trunk).
    calls = []
    fused.model.get_output_embeddings().register_forward_hook(lambda *_: calls.append(1))
    fused.forward_train(batch)["logp"].sum().backward()
    assert not calls


@pytest.mark.usefixtures("ray_session")
def test_one_iteration_takes_the_same_update(one_iteration):
    settings = dict(mini_batch_size=8, micro_batch_size=4, ppo_epochs=2, lr=1e-3,
                    use_kl_loss=True, kl_loss_coef=0.1, entropy_coef=0.01)
    weights, metrics = [], []
    for fused in (False, True):
        result, initial, after = one_iteration(use_fused_kernels=fused, **settings)
        metrics.append(result)
        weights.append(after)
        assert max(float((v - initial[k]).abs().max())
                   for k, v in after.items()) > 1e-3  # 4 Adam steps at lr 1e-3
    assert metrics[0]["num_optimizer_steps"] == metrics[1]["num_optimizer_steps"] == 4
    for key in ("loss", "entropy", "kl_loss", "approx_kl"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-5, abs=1e-6), key
    # Adam's first steps move each entry by about lr * sign(g) = 1e-3: float rounding of a
    # gradient entry near 0 shows as ~1e-5 in a few entries (measured: 2e-5 at most).
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, atol=1e-4, rtol=0)


def test_what_fused_kernels_cannot_compute_is_rejected(small_module):
    with pytest.raises(ValueError, match="LM head is a peft.*, not a plain torch.nn.Linear"):
        small_module(use_fused_kernels=True, lora_rank=2, lora_target_modules=["lm_head"])
    # A model that scales its logits after the head (as Cohere's logit_scale or Gemma's
    # soft-capping do) would be trained on other log-probs than it samples from.
    model = small_module().model
    forward = model.forward

    def scaled(*args, **kwargs):
        out = forward(*args, **kwargs)
        out.logits = out.logits * 0.5
        return out

    model.forward = scaled
    with pytest.raises(ValueError, match="logits are not its LM head on its last hidden"):
        check_fused_head(model)
    model.forward = forward
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="config sets final_logit_softcapping"):
        check_fused_head(model)
    small_module(use_fused_kernels=True, model_dtype="bfloat16")  # a plain head in bf16 passes
    with pytest.raises(ValueError, match="use_fused_kernels=True.*zero_stage=2"):
        embedded_config("topr", learner_strategy="deepspeed", zero_stage=3,
                        use_fused_kernels=True).learners(num_learners=1).validate()
