"""PPO's critic (adv_estimator='gae'): where values sit, what trains them and when.

The value of response token t is the head on the trunk's state before the token; a shared trunk
computes the policy's logits exactly as the causal LM does; a reward model's score head starts
the value head; env runners never hold a critic; the critic's optimizer step equals a
hand-computed Adam step on the hand-written value loss; value pretraining fits Monte-Carlo
returns with the actor frozen, lowers the value loss and is not repeated after a resume.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rllib_llm.learner.module import RLVRModule
from rllib_llm.models.value_model import load_value_model
from rllib_llm.recipes.embedded import embedded_config

GAE = dict(adv_estimator="gae", num_return_sequences_in_group=1, rollout_batch_size=4,
           response_length=4)


def _module(critic: dict | None, *, inference_only: bool = False) -> RLVRModule:
    return RLVRModule(inference_only=inference_only, model_config={
        "model_name_or_path": "embedded", "model_dtype": "float32", "temperature": 1.0,
        "critic": critic})


def _batch(prompt: int = 5, t: int = 4, b: int = 3) -> dict[str, torch.Tensor]:
    """Packed rows: a left-padded prompt (row i has i pads) then t response tokens."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 60, (b, prompt + t), generator=gen)
    attention = torch.ones(b, prompt + t, dtype=torch.long)
    for i in range(b):
        attention[i, :i] = 0
        ids[i, :i] = 0
    return {"input_ids": ids, "attention_mask": attention, "response_ids": ids[:, prompt:]}


SEPARATE = {"model_name_or_path": "embedded", "shares_trunk": False}
SHARED = {"model_name_or_path": "embedded", "shares_trunk": True}


def test_the_value_of_a_token_is_the_head_on_the_state_before_it():
    module = _module(SEPARATE)
    torch.nn.init.normal_(module.critic.head.weight, generator=torch.Generator().manual_seed(1))
    batch, t = _batch(), 4
    values = module.compute_values(batch)  # (B, T)
    positions = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    hidden = module.critic.trunk(input_ids=batch["input_ids"],
                                 attention_mask=batch["attention_mask"],
                                 position_ids=positions).last_hidden_state  # (B, L, H)
    head = module.critic.head
    for k in range(t):  # token k of the response is predicted at position P + k - 1
        expected = hidden[:, -t - 1 + k] @ head.weight[0] + head.bias[0]
        torch.testing.assert_close(values[:, k], expected)
    assert values.shape == (3, t) and values.abs().sum() > 0


def test_a_fresh_critic_predicts_zero_and_starts_from_the_policys_trunk():
    module = _module(SEPARATE)
    assert torch.equal(module.compute_values(_batch()), torch.zeros(3, 4))
    policy_trunk = module.model.base_model.state_dict()
    for name, value in module.critic.trunk.state_dict().items():
        assert torch.equal(value, policy_trunk[name]), name
    assert module.critic.trunk is not module.model.base_model  # a copy, trained on its own


def test_a_shared_trunk_gives_the_causal_lms_log_probs_and_values_from_the_same_pass():
    shared, plain = _module(SHARED), _module(None)
    batch = _batch()
    out, ref = shared.forward_train(batch), plain.forward_train(batch)
    torch.testing.assert_close(out["logp"], ref["logp"], atol=1e-6, rtol=1e-6)
    assert not hasattr(shared, "critic") and out["values"].shape == (3, 4)
    assert set(map(id, shared.critic_parameters())) == set(map(id, shared.value_head.parameters()))


def test_a_reward_model_checkpoint_starts_the_value_head(tmp_path):
    from transformers import LlamaForSequenceClassification

    from rllib_llm.models import load_model

    config = load_model("embedded").config
    config.num_labels, config.architectures = 1, ["LlamaForSequenceClassification"]
    reward_model = LlamaForSequenceClassification(config)
    torch.nn.init.normal_(reward_model.score.weight)
    reward_model.save_pretrained(tmp_path / "rm")
    critic = load_value_model(str(tmp_path / "rm"))
    assert torch.equal(critic.head.weight, reward_model.score.weight)

    config.num_labels = 3
    LlamaForSequenceClassification(config).save_pretrained(tmp_path / "classifier")
    with pytest.raises(ValueError, match="classifier with 3 labels; a value model needs"):
        load_value_model(str(tmp_path / "classifier"))


def test_env_runners_never_build_hold_or_receive_the_critic():
    runner_module = _module(SEPARATE, inference_only=True)
    assert not runner_module.has_critic
    learner_module_ = _module(SEPARATE)
    state = learner_module_.get_state(inference_only=True)
    assert state and not any(k.startswith(("critic.", "value_head.")) for k in state)
    runner_module.set_state(state)  # what a weight sync sends fits the runner's module
    with pytest.raises(ValueError, match="has no critic"):
        runner_module.compute_values(_batch())


@pytest.mark.usefixtures("ray_session")
def test_actor_and_critic_have_their_own_optimizers_and_learning_rates():
    algo = embedded_config("ppo", lr=3e-4, critic_lr=7e-4, **GAE).build_algo()
    learner = algo.learner_group.local_learner
    optimizers = dict(learner.get_optimizers_for_module("default_policy"))
    assert sorted(optimizers) == ["actor", "critic"]
    assert optimizers["actor"].param_groups[0]["lr"] == pytest.approx(3e-4)
    assert optimizers["critic"].param_groups[0]["lr"] == pytest.approx(7e-4)
    module = learner.module["default_policy"]
    assert {id(p) for g in optimizers["critic"].param_groups for p in g["params"]} == \
        {id(p) for p in module.critic.parameters()}
    algo.stop()


def _capture_update(watch_learner) -> dict:
    captured = {}

    def capture(self, batch, **kw):
        module = self.module["default_policy"]
        captured["batch"] = {k: v.clone() for k, v in batch["default_policy"].items()}
        captured["critic"] = {k: v.detach().clone() for k, v in module.critic.state_dict().items()}
        captured["policy"] = {k: v.detach().clone() for k, v in module.model.state_dict().items()}

    watch_learner("update", capture)
    return captured


@pytest.mark.usefixtures("ray_session")
def test_a_pretraining_step_is_adam_on_the_hand_written_value_loss_and_the_actor_stays(
        watch_learner):
    captured = _capture_update(watch_learner)
    algo = embedded_config("ppo", lr=1e-3, grad_clip=None, loss_agg_mode="token-mean",
                           value_pretrain_steps=1, gamma=0.9, **GAE).build_algo()
    result = algo.train()["learners"]["default_policy"]
    module = algo.learner_group.local_learner.module["default_policy"]
    b = captured["batch"]
    mask = b["action_mask"]

    # The targets: Monte-Carlo returns of the score on the last token, discounted by gamma.
    n_tokens = mask.sum(-1, keepdim=True)
    position = mask.cumsum(-1)
    expected_returns = b["scores"][:, None] * 0.9 ** (n_tokens - position) * mask
    torch.testing.assert_close(b["mc_returns"], expected_returns.float())

    critic = load_value_model("embedded")
    critic.load_state_dict(captured["critic"])
    critic.train()
    positions = (b["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    values = critic(b["input_ids"], b["attention_mask"], mask.shape[1], positions)
    loss = (0.5 * (values - b["mc_returns"]).square() * mask).sum() / mask.sum()
    assert result["value_loss"] == pytest.approx(loss.item(), rel=1e-5)
    optim = torch.optim.Adam(critic.parameters(), lr=1e-3)
    loss.backward()
    optim.step()
    for name, value in critic.state_dict().items():
        torch.testing.assert_close(module.critic.state_dict()[name], value, atol=1e-6, rtol=1e-5)
    # Adam's first step moves a weight with a gradient by about lr = 1e-3.
    assert max(float((value - captured["critic"][name]).abs().max())
               for name, value in module.critic.state_dict().items()) > 5e-4
    for name, value in module.model.state_dict().items():
        assert torch.equal(value, captured["policy"][name]), name  # the actor did not move
    assert result["value_pretraining"] == 1.0 and "grad_norm" not in result
    algo.stop()


@pytest.mark.usefixtures("ray_session")
def test_after_pretraining_both_move_and_the_critic_trains_on_gae_returns(watch_learner):
    captured = _capture_update(watch_learner)
    algo = embedded_config("ppo", value_pretrain_steps=1, critic_lambd=1.0, lambd=0.5,
                           **GAE).build_algo()
    algo.train()
    result = algo.train()["learners"]["default_policy"]
    module = algo.learner_group.local_learner.module["default_policy"]
    assert result["value_pretraining"] == 0.0 and result["grad_norm"] > 0
    assert any(not torch.equal(v, captured["policy"][k])
               for k, v in module.model.state_dict().items())
    b = captured["batch"]
    # Decoupled GAE: with critic_lambd = 1 the critic's returns are the Monte-Carlo returns,
    # whatever the actor's lambda.
    torch.testing.assert_close(b["returns"], b["mc_returns"])
    assert (b["values"] * (1 - b["action_mask"])).abs().sum() == 0  # no value on padding
    algo.stop()


@pytest.mark.usefixtures("ray_session")
def test_the_issue_call_trains_with_critic_metrics_and_remote_runners_hold_no_critic():
    """Not about moving weights: that the call builds and runs, reports the critic's metrics and keeps the
    critic off the runners is its subject; the critic's updates are checked by hand above."""
    from rllib_llm import RLVRConfig

    algo = (RLVRConfig().environment("math_verify")
            .training(adv_estimator="gae", critic_lambd=1.0, length_adaptive_alpha=0.05,
                      value_pretrain_steps=1)
            .training(rollout_batch_size=2, response_length=4)  # small, to keep CI short
            .env_runners(num_env_runners=1).debugging(seed=0).build_algo())
    results = [algo.train()["learners"]["default_policy"] for _ in range(2)]
    assert [r["value_pretraining"] for r in results] == [1.0, 0.0]
    for key in ("value_loss", "explained_variance", "value_mean", "return_mean",
                "value_abs_error", "critic_grad_norm"):
        assert all(np.isfinite(r[key]) for r in results), key
    assert "grad_norm" in results[1] and "pg_loss" in results[1]
    held = algo.env_runner_group.foreach_env_runner(lambda r: r.module.has_critic,
                                                    local_env_runner=False)
    assert held == [False]
    algo.stop()


@pytest.mark.usefixtures("ray_session")
def test_the_learner_batch_carries_length_adaptive_gae_by_hand(watch_learner):
    """Not about moving weights: the advantages and returns the learner computes from one batch are its
    subject (they are computed before any step)."""
    captured = _capture_update(watch_learner)
    alpha, gamma = 0.4, 0.9
    # 32 prompts: the rebuilt checkpoint answered the first 8 all in 3 tokens (one lambda).
    algo = embedded_config("ppo", length_adaptive_alpha=alpha, gamma=gamma,
                           whiten_advantages=False, advantage_clip=None, lambd=0.3,
                           **{**GAE, "rollout_batch_size": 32, "response_length": 6}).build_algo()
    module = algo.learner_group.local_learner.module["default_policy"]
    torch.nn.init.normal_(module.critic.head.weight, std=0.5)  # values that are not all 0
    algo.train()
    b = captured["batch"]
    lengths = b["action_mask"].sum(-1).tolist()
    assert len(set(lengths)) > 1  # responses of several lengths: several lambdas
    for row in range(len(lengths)):
        tokens = b["action_mask"][row].nonzero()[:, 0].tolist()
        values = [b["values"][row, i].item() for i in tokens]
        lam = max(0.0, 1 - 1 / (alpha * len(tokens)))  # VAPO's lambda of this response
        advantage, expected = 0.0, {}
        for k in reversed(range(len(tokens))):
            reward = b["scores"][row].item() if k == len(tokens) - 1 else 0.0
            next_value = values[k + 1] if k + 1 < len(tokens) else 0.0
            advantage = reward + gamma * next_value - values[k] + gamma * lam * advantage
            expected[tokens[k]] = (advantage, advantage + values[k])
        for i, (adv, ret) in expected.items():
            assert b["advantages"][row, i].item() == pytest.approx(adv, abs=1e-5)
            assert b["returns"][row, i].item() == pytest.approx(ret, abs=1e-5)
        assert b["values"][row].abs().sum() > 0
    algo.stop()


@pytest.mark.usefixtures("ray_session")
def test_micro_batches_change_neither_the_critics_update_nor_its_metrics():
    results, critics = [], []
    for micro in (None, 1):
        algo = embedded_config("ppo", seed=6, micro_batch_size=micro, value_clip=0.1,
                               value_pretrain_steps=1, **GAE).build_algo()
        critic = algo.learner_group.local_learner.module["default_policy"].critic
        # Values that are not all 0: with the zero head and rewards of 0 here, the value loss
        # and its gradient were 0 and the critic never moved (the comparison said nothing).
        torch.manual_seed(0)
        torch.nn.init.normal_(critic.head.weight, std=0.5)
        initial = {k: v.clone() for k, v in critic.state_dict().items()}
        results.append([algo.train()["learners"]["default_policy"] for _ in range(2)])
        critic = algo.learner_group.local_learner.module["default_policy"].critic
        critics.append({k: v.clone() for k, v in critic.state_dict().items()})
        algo.stop()
        # Two Adam steps at the schedule's first lr (2e-5) moved it by ~4e-5.
        assert max(float((v - initial[k]).abs().max()) for k, v in critics[-1].items()) > 2e-5
    for whole, micro in zip(*results):
        for key in ("value_loss", "value_clipfrac", "critic_grad_norm", "explained_variance"):
            assert micro[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-6), key
    for name, value in critics[0].items():
        torch.testing.assert_close(critics[1][name], value, atol=1e-5, rtol=1e-4)
