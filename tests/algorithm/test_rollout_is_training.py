"""Mismatch correction inside RLVR (torch engine, no vLLM needed): the connector recomputes
old_logp and keeps the sampler's as rollout_logp, the learner scales the per-token pg loss by
the truncated weights, and the mismatch is logged."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaForCausalLM

from rllib_llm.learner.step_context import StepContext, with_context
from rllib_llm.models import load_tokenizer
from rllib_llm.models.tiny_llama import tiny_llama_config
from rllib_llm.recipes.embedded import embedded_config

TINY = dict(rollout_batch_size=2, num_return_sequences_in_group=2, response_length=4)


pytestmark = pytest.mark.usefixtures("ray_session")  # tests/conftest.py


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama")
    tokenizer = load_tokenizer("embedded")
    torch.manual_seed(0)
    config = tiny_llama_config(len(tokenizer), hidden_size=32, intermediate_size=64,
                               pad_token_id=tokenizer.pad_token_id,
                               eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_recomputed_old_logp_equals_the_torch_samplers_and_weights_are_one(model_dir):
    """Not about moving weights: the log-probs of the sampler and the learner before the first step, and the
    weights of 1 they give, are its subject."""
    algo = embedded_config("ppo", model_name_or_path=model_dir, recompute_old_logp=True,
                           rollout_is_level="sequence", **TINY).build_algo()
    learner = algo.train()["learners"]["default_policy"]
    # The torch engine scores exactly as the learner does: no mismatch, weights of 1.
    assert abs(learner["rollout_kl_k1"]) < 1e-5 and 0 <= learner["rollout_kl_k3"] < 1e-8
    assert learner["rollout_is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    assert learner["rollout_is_truncated_frac"] == 0
    algo.stop()


def test_learner_scales_the_per_token_pg_loss_by_the_truncated_weights(model_dir):
    algo = embedded_config("vanilla", model_name_or_path=model_dir, use_kl_loss=False,
                           recompute_old_logp=True, **TINY).build_algo()
    learner = algo.learner_group.local_learner
    b, t = 2, 3
    batch = {
        "action_mask": torch.ones(b, t), "old_logp": torch.zeros(b, t),
        "rollout_logp": torch.full((b, t), math.log(0.5)),  # pi_old / pi_rollout = 2
        "advantages": torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.3, -1.0]]), "scores": torch.zeros(b),
    }
    fwd = {"logp": torch.zeros(b, t, requires_grad=True), "entropy": torch.zeros(b, t)}

    def loss(**fields) -> torch.Tensor:
        cfg = learner.config.copy(copy_frozen=False)
        for name, value in fields.items():
            setattr(cfg, name, value)
        return learner.compute_loss_for_module(module_id="default_policy", config=cfg,
                                               batch=with_context(batch, StepContext.of(batch)),
                                               fwd_out=fwd)

    plain = loss(rollout_is_level=None)
    torch.testing.assert_close(loss(rollout_is_level="token", rollout_is_threshold=1.5),
                               1.5 * plain)  # weight 2, capped at 1.5
    torch.testing.assert_close(loss(rollout_is_level="sequence", rollout_is_threshold=100.0),
                               8.0 * plain)  # 2 ** 3 tokens
    algo.stop()
