"""autocast_dtype: learners' passes in bfloat16 mixed precision over float32 weights, gradients
and Adam state; the values and gradients of float32 up to bfloat16's rounding; refused where it
cannot mean that."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from rllib_llm import RLVRConfig
from rllib_llm.exchange.precision import native_bf16
from rllib_llm.learner import token_logp
from rllib_llm.learner.module import RLVRModule
from rllib_llm.recipes.embedded import embedded_config

SPACES = dict(observation_space=gym.spaces.Discrete(2), action_space=gym.spaces.Discrete(2))
SMALL = dict(rollout_batch_size=4, num_return_sequences_in_group=4, response_length=6)


def module(**overrides) -> RLVRModule:
    spec = embedded_config("ppo", **SMALL, **overrides).get_default_rl_module_spec()
    return RLVRModule(**SPACES, model_config=spec.model_config)


def packed_batch(vocab: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, vocab, (4, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    return {"input_ids": ids * mask, "attention_mask": mask, "response_ids": ids[:, -6:]}


def matmul_dtypes(model: torch.nn.Module) -> list[torch.dtype]:
    """Records the output dtype of every linear layer the model runs."""
    seen = []
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    return seen


@pytest.mark.parametrize("fused", [False, True], ids=["logits", "fused-kernels"])
def test_mixed_precision_matches_float32_up_to_bfloat16_rounding(monkeypatch, fused):
    monkeypatch.setattr(token_logp, "HEAD_CHUNK_POSITIONS", 5)
    full = module(entropy_coef=0.01, use_fused_kernels=fused)
    mixed = module(entropy_coef=0.01, use_fused_kernels=fused, autocast_dtype="bfloat16")
    mixed.load_state_dict(full.state_dict())
    batch = packed_batch(full.model.config.vocab_size)
    weights = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    seen = matmul_dtypes(mixed.model)
    outs = []
    for m in (full, mixed):
        out = m.forward_train(batch)
        ((out["logp"] * weights).sum() + (out["entropy"] * weights.flip(0)).sum()).backward()
        outs.append(out)
    # The trunk's matmuls ran in bfloat16 (fused kernels: the head runs inside their function).
    assert seen and set(seen) == {torch.bfloat16}
    # The outputs are float32 values near float32's; weights and gradients stay float32.
    for key in ("logp", "entropy"):
        assert outs[1][key].dtype == torch.float32
        torch.testing.assert_close(outs[1][key], outs[0][key], atol=0.05, rtol=0.02)
        assert not torch.equal(outs[1][key], outs[0][key])  # it did round
    for (name, p_full), p_mixed in zip(full.named_parameters(), mixed.parameters()):
        assert p_mixed.dtype == p_mixed.grad.dtype == torch.float32, name
        cosine = torch.nn.functional.cosine_similarity(p_full.grad.flatten(),
                                                       p_mixed.grad.flatten(), dim=0)
        assert cosine > 0.98, (name, float(cosine))
    # Scoring passes (old and reference log-probs) are mixed precision too.
    seen.clear()
    torch.testing.assert_close(mixed.score_tokens(batch, reference=False), outs[0]["logp"],
                               atol=0.05, rtol=0.02)
    assert seen and set(seen) == {torch.bfloat16}


def test_without_it_everything_runs_in_float32():
    full = module()
    seen = matmul_dtypes(full.model)
    full.forward_train(packed_batch(full.model.config.vocab_size))["logp"].sum().backward()
    assert seen and set(seen) == {torch.float32}


@pytest.mark.usefixtures("ray_session")
def test_an_iteration_in_mixed_precision_keeps_float32_weights_and_adam_state():
    algo = embedded_config("vanilla", seed=2, autocast_dtype="bfloat16", **SMALL).build_algo()
    learner = algo.learner_group.local_learner
    model = learner.module["default_policy"].model
    trained = []  # the dtypes of the matmuls that build a gradient (not the sampler's)
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_hook(
                lambda _m, _i, out: trained.append(out.dtype) if out.requires_grad else None)
    result = algo.train()["learners"]["default_policy"]
    assert trained and set(trained) == {torch.bfloat16}
    assert algo.env_runner_group.local_env_runner.engine.autocast_dtype is None  # by default
    assert result["num_optimizer_steps"] == 1 and result["grad_norm"] > 0
    (optim,) = dict(learner.get_optimizers_for_module("default_policy")).values()
    for p in learner.module["default_policy"].model.parameters():
        assert p.dtype == torch.float32
        assert optim.state[p]["exp_avg"].dtype == torch.float32
    algo.stop()


def test_sampler_autocast_samples_under_the_learners_autocast():
    """An on-policy step divides the learner's log-probs by the sampler's. Sampled in float32
    against bf16 training, one TOPR step clipped 17% of the embedded task's tokens (ratios 0.82
    to 1.09) where float32 throughout clips none; sampled under the learner's autocast, the ratio
    is 1 up to the decode's own rounding. That rounding is the CPU's: exactly 1 on the
    development machine (AMX), while a CPU without bf16 instructions, which emulates bf16,
    clipped 5.7% (ratios to 1.038). So the precision is "auto", the device's choice: bf16 on
    the first, float32 (ratio exactly 1) on the second, and learner and sampler agree."""
    algo = embedded_config("topr", seed=0, autocast_dtype="auto",
                           sampler_autocast=True).build_algo()
    expected = torch.bfloat16 if native_bf16(torch.device("cpu")) else None
    try:
        result = algo.train()["learners"]["default_policy"]
        assert algo.env_runner_group.local_env_runner.engine.autocast_dtype == expected
        module = algo.learner_group.local_learner.module["default_policy"]
        assert module.autocast_dtype == expected
        assert result["clipfrac"] <= 0.01, result
        assert 0.99 <= result["ratio_min"] <= result["ratio_max"] <= 1.01, result
    finally:
        algo.stop()


@pytest.mark.parametrize("settings, message", [
    ({"model_dtype": "bfloat16"}, "over float32 weights, but model_dtype='bfloat16'"),
    ({"autocast_dtype": None, "sampler_autocast": True}, "no autocast to sample under"),
    ({"learner_strategy": "deepspeed"}, "not combined with learner_strategy='deepspeed'"),
    ({}, None),
])
def test_autocast_needs_float32_weights_and_a_torch_learner(settings, message):
    config = RLVRConfig().training(**{"autocast_dtype": "bfloat16", **settings}).learners(
        num_learners=1 if settings.get("learner_strategy") else 0)
    if message is None:
        config.validate()
        return
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config.validate()


@pytest.mark.parametrize("value", ["float16", "bf16", True])
def test_other_autocast_dtypes_are_refused(value):
    with pytest.raises(ValueError, match="autocast_dtype"):
        RLVRConfig().training(autocast_dtype=value).validate()
