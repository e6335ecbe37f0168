"""use_remove_padding=True: the learner's forward runs on the micro-batch's real tokens only, its
log-probs, entropies, values and every gradient equal the padded path's, the micro-batch budget
counts real tokens, one training iteration takes the same update in fewer passes, and a model
that would let packed rows see each other is rejected."""

from __future__ import annotations

import pytest
import torch

from rllib_llm.exchange import token_budget
from rllib_llm.learner import micro_batches, remove_padding


def padded_batch(vocab: int) -> dict[str, torch.Tensor]:
    """4 rows of a 5-token prompt (left-padded by 2, 1, 0, 0) and a 6-token response
    (right-padded by 0, 3, 5, 1): 32 real tokens of 44."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, vocab, (4, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :2] = mask[1, :1] = 0
    mask[1, -3:] = mask[2, -5:] = mask[3, -1:] = 0
    ids = ids * mask
    return {"input_ids": ids, "attention_mask": mask, "response_ids": ids[:, -6:]}


def test_unpad_lays_out_the_real_tokens_and_their_predictors():
    batch = padded_batch(50)
    rows = remove_padding.unpad(batch)
    mask = batch["attention_mask"].bool()
    assert rows.input_ids.shape == (1, 32)
    assert torch.equal(rows.input_ids[0], batch["input_ids"][mask])
    # Positions restart in each row: rows of 3+6, 4+3, 5+1 and 5+5 real tokens.
    starts = (rows.position_ids[0] == 0).nonzero().flatten().tolist()
    assert starts == [0, 9, 16, 22]
    assert rows.position_ids[0, :9].tolist() == list(range(9))
    # Each real response token is predicted by the token before it in its own row.
    assert torch.equal(rows.input_ids[0, rows.predictors + 1], rows.response_ids[0])
    assert rows.response_ids.shape == (1, 6 + 3 + 1 + 5)
    spread = rows.scatter(torch.arange(15.0))
    assert spread[1].tolist() == [6.0, 7.0, 8.0, 0.0, 0.0, 0.0]
    assert spread[2].tolist() == [9.0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("overrides", [
    {"entropy_coef": 0.0},
    {"entropy_coef": 0.01},  # the entropy carries a gradient
    {"adv_estimator": "gae", "critic_shares_trunk": True, "entropy_coef": 0.01},
    {"adv_estimator": "gae", "critic_shares_trunk": False},  # a separate value model
    {"lora_rank": 2, "entropy_coef": 0.0},
    {"use_fused_kernels": True, "entropy_coef": 0.01},
], ids=["logp", "entropy-grad", "shared-trunk-critic", "critic", "lora", "fused"])
def test_the_unpadded_path_gives_the_padded_paths_values_and_gradients(small_module, overrides):
    padded = small_module(use_remove_padding=False, **overrides)
    unpadded = small_module(use_remove_padding=True, **overrides)
    unpadded.load_state_dict(padded.state_dict())
    batch = padded_batch(padded.model.config.vocab_size)
    real = batch["attention_mask"][:, -6:].bool()
    weights = torch.randn(4, 6, generator=torch.Generator().manual_seed(1)) * real
    seen = []
    unpadded.model.get_input_embeddings().register_forward_hook(
        lambda _m, args, _out: seen.append(tuple(args[0].shape)))
    outs = []
    for m in (padded, unpadded):
        out = m.forward_train(batch)
        loss = (out["logp"] * weights).sum()
        if out["entropy"].requires_grad:
            loss = loss + (out["entropy"] * weights.flip(0) * real).sum()
        if "values" in out:
            loss = loss + (out["values"] * real).square().sum()
        loss.backward()
        outs.append(out)
    assert seen[0] == (1, 32)  # the policy's trunk saw the 32 real tokens, no padding
    for key in outs[0]:
        torch.testing.assert_close(outs[1][key][real], outs[0][key][real], atol=1e-5, rtol=0)
        assert not outs[1][key][~real].any(), key  # zero at padding
    grads = [{n: p.grad for n, p in m.named_parameters() if p.grad is not None}
             for m in (padded, unpadded)]
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_scoring_is_the_same(small_module):
    settings = dict(use_kl_loss=True, adv_estimator="gae", critic_shares_trunk=False)
    padded = small_module(use_remove_padding=False, **settings)
    unpadded = small_module(use_remove_padding=True, **settings)
    unpadded.load_state_dict(padded.state_dict())
    batch = padded_batch(padded.model.config.vocab_size)
    real = batch["attention_mask"][:, -6:].bool()
    for score in (lambda m: m.score_tokens(batch, reference=False),
                  lambda m: m.score_tokens(batch, reference=True), lambda m: m.score_values(batch)):
        torch.testing.assert_close(score(unpadded)[real], score(padded)[real], atol=1e-5, rtol=0)


def test_the_budget_counts_real_tokens():
    assert token_budget.pack_unpadded([5, 5, 5], max_rows=None, max_tokens=10) == [[0, 1], [2]]
    assert token_budget.pack_unpadded([5, 5, 5], max_rows=1, max_tokens=None) == [[0], [1], [2]]
    assert token_budget.pack_unpadded([12, 3], max_rows=None, max_tokens=10) == [[0], [1]]
    # One row of 8 tokens and four of 2 (each a 1-token prompt): padded, the long row widens
    # the others to 8 (2 x 8 = 16 tokens, then 3 x 2); unpadded they fit 16 tokens together.
    prompts, responses = torch.ones(5, dtype=torch.long), torch.tensor([7, 1, 1, 1, 1])
    padded = micro_batches.plan(prompts, responses, max_tokens=16)
    unpadded = micro_batches.plan(prompts, responses, max_tokens=16, unpadded=True)
    assert [r.tolist() for r in padded] == [[0, 1], [2, 3, 4]]
    assert [r.tolist() for r in unpadded] == [[0, 1, 2, 3, 4]]


@pytest.mark.usefixtures("ray_session")
def test_one_iteration_takes_the_same_update_in_fewer_passes(monkeypatch, one_iteration):
    settings = dict(mini_batch_size=8, ppo_epochs=2, lr=1e-3, use_kl_loss=True,
                    kl_loss_coef=0.1, entropy_coef=0.01, max_tokens_per_micro_batch=26)
    split = micro_batches.split
    passes = []

    def counted(*args, **kwargs):
        micros = split(*args, **kwargs)
        passes.append(len(micros))
        return micros

    monkeypatch.setattr(micro_batches, "split", counted)
    weights, metrics, counts = [], [], []
    for unpadded in (False, True):
        passes.clear()
        result, initial, after = one_iteration(use_remove_padding=unpadded, **settings)
        metrics.append(result)
        weights.append(after)
        counts.append(sum(passes))
        assert max(float((v - initial[k]).abs().max())
                   for k, v in after.items()) > 1e-3  # 4 Adam steps at lr 1e-3
    assert metrics[0]["num_optimizer_steps"] == metrics[1]["num_optimizer_steps"] == 4
    # The embedded task's rows differ by 1-2 tokens, so little is padding: at this budget the
    # 4 steps take 16 passes padded and 14 unpadded (seed 5; measured).
    assert counts[1] < counts[0], counts
    for key in ("loss", "entropy", "kl_loss", "approx_kl"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-5, abs=1e-6), key
    # As with fused kernels: Adam's first steps move each entry by about lr * sign(g), so
    # float rounding of a gradient entry near 0 shows as ~1e-5 in a few entries.
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, atol=1e-4, rtol=0)


def test_a_model_that_lets_packed_rows_meet_is_rejected(small_module):
    trunk = small_module().model.base_model
    forward = trunk.forward
    # A trunk that ignores the positions attends across the packed rows, as a model without
    # transformers' packed-sequence masking would.
    trunk.forward = lambda input_ids, **kwargs: forward(input_ids=input_ids, use_cache=False)
    with pytest.raises(ValueError, match="lets packed rows attend to each other"):
        remove_padding.check_packed_rows(trunk)
    trunk.forward = forward
    remove_padding.check_packed_rows(trunk)


def test_a_dense_mask_is_refused_on_a_gpu_and_the_learner_picks_its_attention(small_module):
    unpadded = small_module(use_remove_padding=True)
    remove_padding.check_attention_for_device(unpadded.model, torch.device("cpu"))
    with pytest.raises(ValueError, match="use_remove_padding=True on cuda: with 'sdpa'"):
        remove_padding.check_attention_for_device(unpadded.model, torch.device("cuda"))
    unpadded.model.set_attn_implementation("flex_attention")  # (compiled at its first forward)
    remove_padding.check_attention_for_device(unpadded.model, torch.device("cuda"))
    # attn_implementation reaches every model a learner loads (eager here: flex attention
    # compiles for a minute on a CPU, and runs no backward there); env runners keep the default.
    settings = dict(use_remove_padding=True, use_kl_loss=True, attn_implementation="eager")
    learner = small_module(**settings)
    for model in (learner.model, learner.reference_model):
        assert model.config._attn_implementation == "eager"
    runner = small_module(**settings, inference_only=True)
    assert runner.model.config._attn_implementation == "sdpa"
    assert not runner.remove_padding
