"""What one RLVR update means: optimizer steps counted in responses with prompt groups whole,
one step equal to a hand-computed update, whole-mini-batch metrics under micro-batching,
non-finite steps skipped and then stopped, and the module's scoring details."""

from __future__ import annotations

import math

import pytest
import torch
from ray.rllib.core import COMPONENT_OPTIMIZER

from rllib_llm import core
from rllib_llm.learner import learner as learner_module
from rllib_llm.learner.optimizer_steps import minibatch_rows
from rllib_llm.learner.step_context import StepContext, with_context
from rllib_llm.recipes.embedded import embedded_config

pytestmark = pytest.mark.usefixtures("ray_session")  # tests/conftest.py

SMALL = dict(rollout_batch_size=4, num_return_sequences_in_group=2, response_length=4)


@pytest.mark.parametrize("epochs, mini", [(1, None), (2, None), (2, 4), (3, 2)])
def test_minibatch_rows_cover_every_response_once_per_epoch_in_whole_groups(epochs, mini):
    rows, group = 8, 2
    steps = minibatch_rows(rows, group_size=group, mini_batch_size=mini, num_epochs=epochs,
                           generator=torch.Generator().manual_seed(0))
    size = mini or rows
    assert len(steps) == epochs * math.ceil(rows / size)
    per_epoch = len(steps) // epochs
    for e in range(epochs):
        seen = torch.cat(steps[e * per_epoch:(e + 1) * per_epoch]).tolist()
        assert sorted(seen) == list(range(rows))  # every response exactly once per epoch
    for step in steps:
        groups = {r // group for r in step.tolist()}
        assert len(step) == size and len(groups) * group == size  # whole groups only


@pytest.mark.parametrize("epochs, mini", [(1, None), (2, None), (2, 4), (3, 2)])
def test_an_iteration_takes_epochs_times_minibatches_optimizer_steps(watch_learner, epochs,
                                                                    mini):
    calls = []
    watch_learner("optimizer_step",
                  lambda learner, batch, **kwargs: calls.append(batch["action_mask"].shape[0]))
    algo = embedded_config("ppo", ppo_epochs=epochs, mini_batch_size=mini, **SMALL).build_algo()
    model = algo.learner_group.local_learner.module["default_policy"].model
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    result = algo.train()["learners"]["default_policy"]
    # The steps counted were taken: the weights moved.
    assert any(not torch.equal(v, initial[k]) for k, v in model.state_dict().items())
    total = SMALL["rollout_batch_size"] * SMALL["num_return_sequences_in_group"]
    expected = epochs * math.ceil(total / (mini or total))
    assert result["num_optimizer_steps"] == expected
    assert calls == [mini or total] * expected  # responses per step, not tokens
    algo.stop()


def test_one_step_equals_a_hand_computed_adam_update(monkeypatch, watch_learner):
    captured = {}

    def capture(self, batch, **kw):
        captured["batch"] = {k: v.clone() for k, v in batch["default_policy"].items()}
        captured["before"] = {k: v.detach().clone() for k, v in
                              self.module["default_policy"].model.state_dict().items()}

    watch_learner("update", capture)
    trims = []  # freed host memory is handed back once per update (exchange/host_memory.py)
    monkeypatch.setattr(learner_module, "release_freed_memory", lambda: trims.append(1) or True)
    algo = embedded_config("vanilla", lr=1e-3, grad_clip=None, loss_agg_mode="token-mean",
                           **SMALL).build_algo()
    algo.train()
    assert trims == [1]
    learner = algo.learner_group.local_learner
    after = learner.module["default_policy"].model.state_dict()

    # The reference: a fresh copy of the model, the loss written out by hand, torch's Adam.
    from rllib_llm.models import load_model

    model = load_model("embedded")
    model.load_state_dict(captured["before"])
    model.train()
    b = captured["batch"]
    t = b["response_ids"].shape[1]
    positions = (b["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                   position_ids=positions).logits[:, -t - 1:-1]  # (B, T, V)
    # log pi(a) = x_a - log sum exp(x), written as the learner computes it: Adam's first step is
    # about lr * sign(gradient), so a gradient entry near 0 flips with float rounding order.
    logits = logits.float()
    logp = logits.gather(-1, b["response_ids"][..., None])[..., 0] - logits.logsumexp(-1)
    mask = b["action_mask"]
    loss = (-b["advantages"] * logp * mask).sum() / mask.sum()  # vanilla, token-mean
    assert b["advantages"].abs().sum() > 0
    optim = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    loss.backward()
    optim.step()
    for name, value in model.state_dict().items():
        torch.testing.assert_close(after[name], value, atol=1e-6, rtol=1e-5, msg=name)
    assert any(not torch.equal(after[n], captured["before"][n]) for n in after)
    # Adam's two float32 moments per trained weight (the step counts are scalars).
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert learner.optimizer_state_bytes() == 2 * 4 * trained
    algo.stop()


def test_micro_batches_report_the_whole_mini_batchs_metrics():
    results = []
    for micro in (None, 1):
        algo = embedded_config("ppo", seed=5, micro_batch_size=micro, ppo_epochs=2,
                               **SMALL).build_algo()
        algo.train()
        results.append(algo.train()["learners"]["default_policy"])
        algo.stop()
    whole, micro = results
    for key in ("pg_loss", "loss", "entropy", "ratio_mean", "ratio_max", "ratio_min",
                "approx_kl", "clipfrac", "grad_norm"):
        assert micro[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-6), key
    # The second epoch's ratios are those of a policy the first epoch's step moved.
    assert whole["ratio_max"] - whole["ratio_min"] > 1e-3, whole


def test_a_non_finite_step_is_skipped_counted_and_then_stops_training(monkeypatch):
    algo = embedded_config("ppo", max_consecutive_nonfinite_steps=2, **SMALL).build_algo()
    learner = algo.learner_group.local_learner
    weights = {k: v.clone() for k, v in learner.module["default_policy"].state_dict().items()}
    real = core.compute_advantages

    def nan_advantages(*args, **kwargs):
        adv, returns, extra = real(*args, **kwargs)
        return torch.full_like(adv, float("nan")), returns, extra

    monkeypatch.setattr(core, "compute_advantages", nan_advantages)
    result = algo.train()["learners"]["default_policy"]
    assert result["num_nonfinite_steps_skipped"] == 1 and result["num_optimizer_steps"] == 1
    for k, v in learner.module["default_policy"].state_dict().items():
        assert torch.equal(v, weights[k]), k  # the skipped step changed nothing
    with pytest.raises(Exception, match=r"2 optimizer steps in a row had a non-finite loss.*lr=") \
            as stopped:
        algo.train()
    algo.stop()
    # float32, clipped gradients, a small lr: none of those is named as a cause to fix.
    assert "try 'float32'" not in str(stopped.value)
    assert "no gradient clipping" not in str(stopped.value)


RLVR_REWARDS = "non-finite rewards or advantages (a verifier's or a custom estimator's)"


def test_the_non_finite_stop_names_only_the_causes_that_apply():
    """After lr=10 diverged the message said "too little precision (model_dtype='float32': try
    'float32')" and "no gradient clipping (grad_clip=1.0)"."""
    from rllib_llm.algorithm.config import RLVRConfig
    from rllib_llm.learner.learner import nonfinite_causes

    def causes(**training) -> str:
        return nonfinite_causes(RLVRConfig().training(**training))

    assert causes(lr=10.0) == (
        "Likely causes: a learning rate too high (lr=10.0: above 0.001 is large for fine-tuning "
        f"a pretrained model; try 1e-5 or lower), or {RLVR_REWARDS}")
    assert causes(lr=[[0, 1e-6], [100, 0.5]]).startswith(
        "Likely causes: a learning rate too high (lr=[[0, 1e-06], [100, 0.5]], peaking at 0.5: ")
    assert causes(model_dtype="bfloat16", grad_clip=None) == (
        "Likely causes: too little precision (model_dtype='bfloat16': try 'float32'), no "
        f"gradient clipping (grad_clip=None: set e.g. grad_clip=1.0), or {RLVR_REWARDS}")
    assert "(model_dtype='float16': try 'bfloat16' or 'float32')" in causes(model_dtype="float16")
    assert causes() == ("lr=1e-06, model_dtype='float32' and grad_clip=1.0 are not the usual "
                        f"suspects; likely cause: {RLVR_REWARDS}, else lower lr")


def test_a_finite_step_resets_the_run_of_non_finite_ones(monkeypatch):
    """Not about moving weights: the count of skipped non-finite steps is its subject."""
    algo = embedded_config("ppo", max_consecutive_nonfinite_steps=2, **SMALL).build_algo()
    real = core.compute_advantages
    poison = iter([True, False, True, False])

    def sometimes_nan(*args, **kwargs):
        adv, returns, extra = real(*args, **kwargs)
        return (adv * float("nan") if next(poison) else adv), returns, extra

    monkeypatch.setattr(core, "compute_advantages", sometimes_nan)
    counts = [algo.train()["learners"]["default_policy"]["num_nonfinite_steps_skipped"]
              for _ in range(4)]
    assert counts == [1, 1, 2, 2]
    algo.stop()


def test_entropy_has_a_graph_only_when_its_coefficient_is_on():
    for coef, needs_grad in ((0.0, False), (0.01, True)):
        algo = embedded_config("ppo", entropy_coef=coef, **SMALL).build_algo()
        module = algo.learner_group.local_learner.module["default_policy"]
        batch = _packed_batch(algo)
        out = module.forward_train(batch)
        assert out["entropy"].requires_grad is needs_grad
        assert out["logp"].requires_grad
        algo.stop()


def test_reference_scores_in_eval_mode_and_scoring_honours_micro_batch_size():
    algo = embedded_config("ppo", use_kl_loss=True, micro_batch_size=2, **SMALL).build_algo()
    module = algo.learner_group.local_learner.module["default_policy"]
    for layer in module.reference_model.model.layers:
        layer.self_attn.attention_dropout = 0.9  # dropout would make the scores random
    module.train()
    assert module.model.training and not module.reference_model.training
    batch = _packed_batch(algo)
    sizes = []
    hook = module.reference_model.register_forward_pre_hook(
        lambda _m, _a, kw: sizes.append(kw["input_ids"].shape[0]), with_kwargs=True)
    first = module.score_tokens(batch, reference=True)
    second = module.score_tokens(batch, reference=True)
    hook.remove()
    assert torch.equal(first, second)
    assert sizes and max(sizes) == 2 and sum(sizes) == 2 * batch["input_ids"].shape[0]
    algo.stop()


def test_topr_and_roll_terms_split_by_the_verifiers_correct_flag_not_the_score():
    # A wrong but well-formatted answer scores format_score > 0: it must count as negative.
    algo = embedded_config("topr", rl_loss_coef=0.0, positive_loss_coef=1.0,
                           use_topr_neg_loss_coef=0.0, **SMALL).build_algo()
    learner = algo.learner_group.local_learner
    b, t = 2, 2
    batch = {
        "action_mask": torch.ones(b, t), "old_logp": torch.zeros(b, t),
        "advantages": torch.ones(b, t), "scores": torch.tensor([0.1, 1.1]),
        "correct": torch.tensor([0.0, 1.0]),
    }
    logp = torch.tensor([[-1.0, -1.0], [-2.0, -4.0]], requires_grad=True)
    fwd = {"logp": logp, "entropy": torch.zeros(b, t)}
    loss = learner.compute_loss_for_module(module_id="default_policy", config=learner.config,
                                           batch=with_context(batch, StepContext.of(batch)),
                                           fwd_out=fwd)
    # Only row 1 is positive: seq-mean-token-mean of -logp*A over it, divided by both rows.
    assert loss.item() == pytest.approx(3.0 / 2)
    algo.stop()


def _packed_batch(algo) -> dict[str, torch.Tensor]:
    from rllib_llm.learner.packing import episode_tokens, pack

    runner = algo.env_runner_group.local_env_runner
    items = [episode_tokens(e) for e in runner.sample()]
    return pack(items, runner.env.tokenizer.pad_token_id)


def test_env_runner_places_module_and_engine_on_the_device_rllib_assigns(monkeypatch):
    from rllib_llm.rollout import env_runner

    asked = []

    def fake_get_device(config, num_gpus_requested=1):
        asked.append(num_gpus_requested)
        return torch.device("cpu")  # the only device here; the call's argument is what counts

    monkeypatch.setattr(env_runner, "get_device", fake_get_device)
    algo = embedded_config("ppo", **SMALL).env_runners(num_gpus_per_env_runner=0).build_algo()
    runner = algo.env_runner_group.local_env_runner
    assert asked and asked[-1] == 0  # the runner asked for its configured GPUs
    assert runner.engine.device == runner.device == torch.device("cpu")
    assert next(runner.module.parameters()).device == runner.device
    algo.stop()


def test_fused_optimizer_takes_the_default_adams_update_up_to_rounding():
    """fused_optimizer=True steps every optimizer with torch's fused Adam kernel, and
    False with RLlib's default Adam; from the same seed, one iteration of each (4 optimizer steps)
    ends at the same weights within float rounding, and Adam's moments agree the same way."""
    states = {}
    for fused in (True, False):
        algo = embedded_config("vanilla", seed=3, fused_optimizer=fused, ppo_epochs=2,
                               mini_batch_size=4, **SMALL).build_algo()
        algo.train()
        learner = algo.learner_group.local_learner
        optims = dict(learner.get_optimizers_for_module("default_policy"))
        assert [o.defaults["fused"] for o in optims.values()] == [fused]
        (optim,) = optims.values()
        assert next(iter(optim.state.values()))["step"] == 4  # 2 epochs x 2 mini-batches
        states[fused] = ({k: v.clone() for k, v in learner.module["default_policy"].state_dict()
                          .items()}, [s["exp_avg_sq"].clone() for s in optim.state.values()])
        algo.stop()
    (w_fused, v_fused), (w_default, v_default) = states[True], states[False]
    for name, value in w_default.items():
        torch.testing.assert_close(w_fused[name], value, atol=1e-6, rtol=1e-5, msg=name)
    for a, b in zip(v_fused, v_default):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-4)


def test_a_restored_optimizer_keeps_this_runs_kernel_and_the_saved_moments():
    """A checkpoint's param groups say which kernel saved them; a restore keeps the moments and
    step counts it holds and this run's fused_optimizer (torch's load_state_dict alone would
    take the saved choice)."""
    algos = {fused: embedded_config("vanilla", seed=3, fused_optimizer=fused, **SMALL)
             .build_algo() for fused in (False, True)}
    algos[False].train()
    # A checkpoint's optimizer part, through RLlib's state API (what a restore calls).
    saved = algos[False].learner_group.local_learner.get_state(
        components=COMPONENT_OPTIMIZER)[COMPONENT_OPTIMIZER]
    learner = algos[True].learner_group.local_learner
    learner.set_state({COMPONENT_OPTIMIZER: saved})
    (optim,) = dict(learner.get_optimizers_for_module("default_policy")).values()
    assert all(g["fused"] is True and g["foreach"] is None for g in optim.param_groups)
    (saved_optim,) = saved.values()
    for i, state in enumerate(optim.state.values()):
        assert state["step"] == 1
        torch.testing.assert_close(state["exp_avg"], saved_optim["state"]["state"][i]["exp_avg"])
    algos[True].train()  # the fused kernel steps from the restored state
    assert next(iter(optim.state.values()))["step"] == 2
    for algo in algos.values():
        algo.stop()
