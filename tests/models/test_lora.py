"""LoRA (lora_rank > 0): the learner trains the adapters alone, the reference is the base with
the adapters off, env runners and exports get W + (alpha / rank) · B A, checkpoints hold the
adapters."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_llm.learner.module import RLVRModule
from rllib_llm.models import lora
from rllib_llm.outputs.checkpoints import POLICY_MODULE, export_policy
from rllib_llm.recipes.embedded import embedded_config

SPACES = dict(observation_space=gym.spaces.Discrete(2), action_space=gym.spaces.Discrete(2))
SMALL = dict(rollout_batch_size=4, num_return_sequences_in_group=4, response_length=6)


def test_merge_is_w_plus_scaling_times_b_a():
    base = {"l.weight": torch.eye(2), "other.weight": torch.ones(1)}
    adapters = {"l.lora_A.default.weight": torch.tensor([[1.0, 2.0]]),  # rank 1 x in 2
                "l.lora_B.default.weight": torch.tensor([[1.0], [0.0]])}  # out 2 x rank 1
    merged = lora.merge_adapters(base, adapters, scaling=0.5)
    assert merged.keys() == {"l.weight"}
    assert merged["l.weight"].tolist() == [[1.5, 1.0], [0.0, 1.0]]
    assert base["l.weight"].tolist() == [[1.0, 0.0], [0.0, 1.0]]  # pure


def modules(**overrides):
    spec = embedded_config("topr", **SMALL, lora_rank=4, use_kl_loss=True,
                           **overrides).get_default_rl_module_spec()
    learner = RLVRModule(**SPACES, model_config=spec.model_config)
    runner = RLVRModule(**SPACES, model_config=spec.model_config, inference_only=True)
    with torch.no_grad():  # B starts at 0 (the adapters change nothing): give them a value
        for name, param in learner.model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0, 0.05)
    return learner, runner


def logits(module, ids):
    with torch.no_grad():
        return module.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def test_the_learner_holds_adapters_and_runners_and_exports_get_merged_weights():
    learner, runner = modules()
    trainable = {n for n, p in learner.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n for n in trainable)
    state = learner.get_state()
    assert set(state) == {f"model.{n.split('.', 1)[1]}" for n in trainable}  # no frozen base
    ids = torch.randint(3, 20, (2, 9))
    runner.set_state(learner.get_state(inference_only=True))  # what a weight sync sends
    assert not lora.has_adapters(runner.model)
    torch.testing.assert_close(logits(runner, ids), logits(learner, ids), atol=2e-5, rtol=0)
    # An export builds a plain module and gives it the learner's (adapter) state: merged.
    _, exported = modules()
    exported.set_state(state)
    torch.testing.assert_close(logits(exported, ids), logits(learner, ids), atol=2e-5, rtol=0)


def test_the_reference_is_the_base_with_the_adapters_off_and_no_second_copy():
    learner, base = modules()
    assert learner.has_reference and not hasattr(learner, "reference_model")
    ids = torch.randint(3, 20, (2, 9))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_ids": ids[:, -4:]}
    reference = learner.score_tokens(batch, reference=True)
    torch.testing.assert_close(reference, base.score_tokens(batch, reference=False),
                               atol=1e-5, rtol=0)  # the untouched base
    policy = learner.score_tokens(batch, reference=False)
    assert (policy - reference).abs().max() > 1e-3  # the adapters are back on afterwards


def test_lora_settings_without_a_rank_or_matching_no_layer_are_errors():
    with pytest.raises(ValueError, match="lora_alpha=16 configure LoRA adapters, but lora_rank=0"):
        embedded_config("topr", **SMALL, lora_alpha=16).validate()
    with pytest.raises(ValueError, match="lora_rank=-1 .*must be an integer >= 0"):
        embedded_config("topr", **SMALL, lora_rank=-1).validate()
    with pytest.raises(ValueError, match="no_such_layer"):
        modules(lora_target_modules=["no_such_layer"])


@pytest.mark.usefixtures("ray_session")
def test_one_update_moves_the_adapters_alone_and_the_checkpoint_holds_them(tmp_path):
    algo = embedded_config("topr", seed=0, **SMALL, lora_rank=4, lr=1e-3, use_kl_loss=True) \
        .learners(num_learners=0).build_algo()
    full = embedded_config("topr", seed=0, **SMALL).build_algo()
    try:
        learner = algo.learner_group.local_learner
        module = learner.module[DEFAULT_MODULE_ID]
        optimized = [p for _, optim in learner.get_optimizers_for_module(DEFAULT_MODULE_ID)
                     for group in optim.param_groups for p in group["params"]]
        adapters = [p for n, p in module.named_parameters() if ".lora_" in n]
        assert {id(p) for p in optimized} == {id(p) for p in adapters}
        base = {n: p.detach().clone() for n, p in module.named_parameters() if ".lora_" not in n}
        before = {n: p.detach().clone() for n, p in module.named_parameters() if ".lora_" in n}
        result = algo.train()
        assert all(torch.equal(p, base[n]) for n, p in module.named_parameters()
                   if ".lora_" not in n)  # the base did not move, bit for bit
        # The adapters did. Adam moves a weight with a gradient by about lr on its first step,
        # so each B (zero at the start) moves by at least half of lr=1e-3; A has no gradient
        # while B is zero, so it waits for the next step (one optimizer step here).
        assert result["learners"][DEFAULT_MODULE_ID]["num_optimizer_steps"] == 1
        moved = {n: float((p.detach() - before[n]).abs().max())
                 for n, p in module.named_parameters() if ".lora_B" in n}
        assert moved and min(moved.values()) >= 0.5 * 1e-3, moved
        # The env runner samples with the merged weights of the update.
        ids = torch.randint(3, 20, (2, 9))
        runner = algo.env_runner_group.local_env_runner.module
        torch.testing.assert_close(logits(runner, ids), logits(module, ids), atol=2e-5, rtol=0)
        algo.save_to_path(tmp_path / "lora")
        full.save_to_path(tmp_path / "full")
        export_policy(tmp_path / "lora", tmp_path / "export")
    finally:
        algo.stop()
        full.stop()
    size = {name: (tmp_path / name / POLICY_MODULE / "module_state.pkl").stat().st_size
            for name in ("lora", "full")}
    assert size["lora"] < size["full"] / 10, size  # 23.5k adapter weights against 537k
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "export")
    with torch.no_grad():
        out = exported(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    torch.testing.assert_close(out, logits(module, ids), atol=2e-5, rtol=0)
