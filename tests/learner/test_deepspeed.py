"""learner_strategy='deepspeed' (ZeRO-2 and ZeRO-3 on CPU, gloo): two DeepSpeed learners take the
update of one torch learner, and their checkpoint (weights and Adam's per-parameter state,
gathered from the partitions) restores into a torch learner and into DeepSpeed learners; under
ZeRO-3 the env runners receive the weights gathered from both; with CPU offload, the same
update."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import LEARNER_RESULTS

from rllib_llm.learner.learner import MicroBatchLoss
from rllib_llm.learner.step_metrics import MicroBatchMetrics
from rllib_llm.recipes.embedded import embedded_config

pytestmark = [
    pytest.mark.slow,  # two learner processes per test, DeepSpeed's start-up: outside test-fast
    pytest.mark.usefixtures("ray_session"),  # tests/conftest.py
    pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                       reason="needs the deepspeed extra"),
]
# 4 prompts x 4 responses; 2 mini-batches of 2 groups, 2 micro-batches per learner, 2 epochs.
SETTINGS = dict(rollout_batch_size=4, num_return_sequences_in_group=4, response_length=6,
                mini_batch_size=8, micro_batch_size=2, ppo_epochs=2, lr=1e-3,
                use_kl_loss=True, kl_loss_coef=0.1)


# ZeRO-3 partitions every weight (DeepSpeed keeps weights under 1e5 elements whole by default:
# all of the embedded model's), and gathers them for syncs and checkpoints in several buckets
# (the embedded model is ~1 MB).
ZERO = {"zero2": {"zero_stage": 2},
        "zero3": {"zero_stage": 3, "weight_sync_bucket_bytes": 2**17,
                  "deepspeed_config": {"zero_optimization": {
                      "stage3_param_persistence_threshold": 0}}}}


def build(strategy: str, num_learners: int, **zero):
    return embedded_config("topr", seed=3, **SETTINGS, learner_strategy=strategy, **zero) \
        .learners(num_learners=num_learners).build_algo()


def weights(algo) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v).clone()
            for k, v in algo.learner_group.get_weights()[DEFAULT_MODULE_ID].items()}


def adam_state(algo) -> dict:
    """The first learner's optimizer state as saved in a checkpoint."""
    from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_OPTIMIZER

    state = algo.get_state(components=f"{COMPONENT_LEARNER_GROUP}/{COMPONENT_LEARNER}")
    (optim,) = state[COMPONENT_LEARNER_GROUP][COMPONENT_LEARNER][COMPONENT_OPTIMIZER].values()
    return optim["state"]


def test_the_config_rejects_what_the_deepspeed_learner_does_not_do():
    with pytest.raises(ValueError, match="needs num_learners >= 1"):
        embedded_config("topr", learner_strategy="deepspeed").validate()
    with pytest.raises(ValueError, match="does not train a critic"):
        embedded_config("ppo", adv_estimator="gae", learner_strategy="deepspeed") \
            .learners(num_learners=2).validate()
    with pytest.raises(ValueError, match="zero_stage=1 .*must be one of \\[2, 3\\]"):
        embedded_config("topr", learner_strategy="deepspeed", zero_stage=1).validate()
    with pytest.raises(ValueError, match="offload_param=True\\) only with zero_stage=3"):
        embedded_config("topr", learner_strategy="deepspeed", offload_param=True) \
            .learners(num_learners=1).validate()
    with pytest.raises(ValueError, match="LoRA adapters on ZeRO-3"):
        embedded_config("topr", learner_strategy="deepspeed", zero_stage=3, lora_rank=4) \
            .learners(num_learners=1).validate()
    for zero in ({"zero_stage": 3}, {"offload_optimizer": True}, {"deepspeed_config": {"a": 1}}):
        with pytest.raises(ValueError, match="configure DeepSpeed's ZeRO, but learner_strategy="):
            embedded_config("topr", **zero).validate()
    with pytest.raises(ValueError, match="sets gradient_clipping, zero_optimization.stage from"):
        embedded_config("topr", learner_strategy="deepspeed", deepspeed_config={
            "gradient_clipping": 2.0, "zero_optimization": {"stage": 1}}) \
            .learners(num_learners=1).validate()


def test_deepspeed_config_extras_merge_into_the_built_config():
    from rllib_llm.learner.deepspeed_config import deepspeed_config

    cfg = embedded_config("topr", learner_strategy="deepspeed", zero_stage=3,
                          offload_optimizer=True, grad_clip=0.5,
                          deepspeed_config={"zero_optimization": {"overlap_comm": False}})
    built = deepspeed_config(cfg, num_trainable=1000)
    assert built["zero_optimization"] == {
        "stage": 3, "reduce_bucket_size": 1000, "allgather_bucket_size": 1000,
        "offload_optimizer": {"device": "cpu"}, "overlap_comm": False}
    assert built["gradient_clipping"] == 0.5


@pytest.mark.parametrize("zero", sorted(ZERO))
def test_two_deepspeed_learners_take_the_update_of_one_torch_learner_and_checkpoint_it(
        tmp_path, zero):
    one, two = build("torch", 0), build("deepspeed", 2, **ZERO[zero])
    try:
        # ZeRO-3: each learner holds a partition of every weight (placeholders in the module).
        held = two.learner_group.foreach_learner(lambda learner: sum(
            p.numel() for p in learner.module[DEFAULT_MODULE_ID].parameters())).result_or_errors
        assert all((r.get() == 0) == (zero == "zero3") for r in held)
        if zero == "zero3":  # syncs and checkpoints gather them a bucket (128 KiB) at a time
            buckets = two.learner_group.foreach_learner(lambda learner: [
                [v.ds_numel * v.element_size() for _, v in bucket] for bucket in
                learner.module[DEFAULT_MODULE_ID].partitioned.buckets(lambda key: True)])
            for sizes in (r.get() for r in buckets.result_or_errors):
                assert len(sizes) >= 8, sizes  # (a larger weight is a bucket of its own)
                assert all(sum(b) <= 2**17 or len(b) == 1 for b in sizes), sizes
        episodes = one.env_runner_group.local_env_runner.sample()
        results = {}
        for name, algo in (("one", one), ("two", two)):
            algo.metrics.aggregate(algo.update_learners(episodes), key=LEARNER_RESULTS)
            results[name] = algo.metrics.peek((LEARNER_RESULTS, DEFAULT_MODULE_ID))
        w1, w2 = weights(one), weights(two)
        s1, s2 = adam_state(one), adam_state(two)
        two.save_to_path(tmp_path / "deepspeed")
    finally:
        one.stop()
        two.stop()
    for k in w1:
        assert torch.allclose(w2[k], w1[k], atol=2e-5), k
    r1, r2 = results["one"], results["two"]
    assert r1["num_optimizer_steps"] == r2["num_optimizer_steps"] == 4
    assert r1["num_module_steps_trained"] == r2["num_module_steps_trained"] == 16
    for name in ("loss", "pg_loss", "kl_loss", "grad_norm", "entropy"):
        assert r2[name] == pytest.approx(r1[name], rel=1e-4, abs=1e-6), name
    # Adam's moments, gathered from the two partitions, are the torch learner's, parameter by
    # parameter, in torch Adam's format.
    assert s2["state"].keys() == s1["state"].keys()
    for i, entry in s1["state"].items():
        assert float(s2["state"][i]["step"]) == float(entry["step"]) == 4
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(torch.as_tensor(s2["state"][i][key]),
                                       torch.as_tensor(entry[key]), atol=1e-6, rtol=1e-4)

    # The checkpoint restores into a torch learner, and into two DeepSpeed learners; both then
    # take the same next update (DeepSpeed's fp32 master weights and step count restored too).
    after = {}
    for strategy, n in (("torch", 0), ("deepspeed", 2)):
        algo = build(strategy, n, **(ZERO[zero] if n else {}))
        try:
            algo.restore_from_path(tmp_path / "deepspeed")
            restored, state = weights(algo), adam_state(algo)
            algo.update_learners(episodes)
            after[strategy] = weights(algo)
        finally:
            algo.stop()
        for k in w2:
            assert torch.equal(restored[k], w2[k]), (strategy, k)
        for i, entry in s2["state"].items():
            for key in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(torch.as_tensor(state["state"][i][key]),
                                   torch.as_tensor(entry[key])), (strategy, i, key)
    assert max(float((after["torch"][k] - w2[k]).abs().max()) for k in w2) > 1e-4  # it moved
    for k in w2:
        assert torch.allclose(after["deepspeed"][k], after["torch"][k], atol=2e-5), k


@pytest.mark.parametrize("zero", sorted(ZERO))
def test_bfloat16_weights_train_on_float32_master_weights(zero):
    algo = embedded_config("topr", seed=3, **SETTINGS, learner_strategy="deepspeed",
                           model_dtype="bfloat16", **ZERO[zero]) \
        .learners(num_learners=2).build_algo()
    try:
        episodes = algo.env_runner_group.local_env_runner.sample()
        before = weights(algo)
        algo.update_learners(episodes)
        after = weights(algo)
        dtypes = [r.get() for r in algo.learner_group.foreach_learner(lambda learner: (
            next(learner.module[DEFAULT_MODULE_ID].model.parameters()).dtype,
            # The first flat partition of the fp32 master weights (ZeRO-2's or ZeRO-3's).
            (getattr(learner.deepspeed_engine.optimizer, "single_partition_of_fp32_groups", None)
             or learner.deepspeed_engine.optimizer.fp32_partitioned_groups_flat)[0].dtype,
        )).result_or_errors]
    finally:
        algo.stop()
    assert dtypes == [(torch.bfloat16, torch.float32)] * 2
    assert all(v.dtype == torch.bfloat16 for v in after.values())
    assert max(float((after[k].float() - before[k].float()).abs().max()) for k in after) > 1e-3


def test_a_non_finite_step_is_skipped_counted_and_then_stops_training():
    algo = embedded_config("topr", seed=3, **{**SETTINGS, "mini_batch_size": None, "ppo_epochs": 1},
                           learner_strategy="deepspeed", max_consecutive_nonfinite_steps=2) \
        .learners(num_learners=2).build_algo()
    try:
        episodes = algo.env_runner_group.local_env_runner.sample()
        before = weights(algo)
        # Every learner's loss becomes NaN (its gradients too).
        algo.learner_group.foreach_learner(lambda learner: setattr(
            learner, "micro_batch_loss", lambda *, fwd_out, **kwargs: MicroBatchLoss(
                total=fwd_out["logp"].sum() * float("nan"), metrics=MicroBatchMetrics())))
        results = algo.update_learners(episodes)
        assert all(torch.equal(v, before[k]) for k, v in weights(algo).items())  # nothing moved
        algo.metrics.aggregate(results, key=LEARNER_RESULTS)
        result = algo.metrics.peek((LEARNER_RESULTS, DEFAULT_MODULE_ID))
        assert result["num_nonfinite_steps_skipped"] == 1
        assert result["num_optimizer_steps"] == 1
    except Exception:
        algo.stop()
        raise
    with pytest.raises(Exception, match=r"2 optimizer steps in a row had a non-finite loss"):
        try:
            algo.update_learners(episodes)
        finally:
            algo.stop()


def test_zero3_with_cpu_offload_takes_the_same_update_and_syncs_it_to_the_env_runners():
    """Weights and Adam's state in CPU memory (offload_param, offload_optimizer): the update of
    one torch learner, and the env runners get the weights gathered from the two partitions."""
    one = build("torch", 0)
    two = build("deepspeed", 2, **ZERO["zero3"], offload_optimizer=True, offload_param=True)
    try:
        episodes = one.env_runner_group.local_env_runner.sample()
        weights_before = weights(one)
        for algo in (one, two):
            algo.update_learners(episodes)
        w1 = weights(one)
        two.sync_weights()
        runner = two.env_runner_group.local_env_runner.module.get_state(
            inference_only=True)
    finally:
        one.stop()
        two.stop()
    assert runner.keys() == {k for k in w1 if k.startswith("model.")}
    assert max(float((w1[k] - weights_before[k]).abs().max()) for k in runner) > 1e-4
    for k in runner:
        assert torch.allclose(torch.as_tensor(runner[k]), w1[k], atol=2e-5), k
