"""learner_strategy='fsdp2' (PyTorch's fully_shard over two learners, gloo on CPU): the update of
one torch learner (with a sharded reference and teacher, remove_padding and fused kernels; with
LoRA adapters and a critic; with a value head on the policy's trunk), the env runners' weights gathered from the shards bucket by bucket,
each learner holding about half the weights, gradients and Adam's state; and the settings it
does not combine with refused with one line."""

from __future__ import annotations

import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_llm.learner import fsdp2
from rllib_llm.recipes.embedded import embedded_config

# 4 prompts x 4 responses; 2 mini-batches of 2 groups (one group per learner), 2 micro-batches of
# 2 rows per learner, 2 epochs: 4 optimizer steps per update. KL to a reference model, which the
# fsdp2 learners shard too; Adam at lr 1e-3 clipped to grad_clip 1.0 (the default) by the whole
# model's norm.
SETTINGS = dict(rollout_batch_size=4, num_return_sequences_in_group=4, response_length=6,
                mini_batch_size=8, micro_batch_size=2, ppo_epochs=2, lr=1e-3,
                use_kl_loss=True, kl_loss_coef=0.1)
BUCKET = 2**17  # 128 KiB: the embedded model (~2 MB in float32) syncs in several buckets
# What the fsdp2 learners combine with, in two runs (each a Ray cluster's learners: the cost).
# The first test's: a sharded reference model (SETTINGS' KL term) and distillation teacher, and
# remove_padding with fused kernels, which call the trunk and the LM head apart.
SCORING = dict(use_remove_padding=True, use_fused_kernels=True,
               teacher_model_name_or_path="embedded_teacher")
# The second's: LoRA adapters on the sharded base (the reference is the base with the adapters
# off; env runners get the merged weights) and a sharded critic with its own Adam.
LORA_CRITIC = dict(lora_rank=4, adv_estimator="gae")


def build(strategy: str, num_learners: int, **settings):
    return embedded_config("topr", seed=3, **SETTINGS, learner_strategy=strategy, **settings) \
        .learners(num_learners=num_learners).build_algo()


def weights(algo) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v).clone()
            for k, v in algo.learner_group.get_weights()[DEFAULT_MODULE_ID].items()}


def update_both(one, two, updates: int):
    """`updates` times: sample with `one`'s weights, update both on the same episodes. Returns
    the largest weight difference after each update, and both algorithms' final weights."""
    drift = []
    for _ in range(updates):
        episodes = one.env_runner_group.local_env_runner.sample()
        for algo in (one, two):
            algo.update_learners(episodes)
        w1, w2 = weights(one), weights(two)
        drift.append(max(float((w2[k] - w1[k]).abs().max()) for k in w1))
    return drift, w1, w2


def test_the_config_refuses_what_the_fsdp2_learner_does_not_do():
    def fsdp2_config(num_learners: int = 2, **settings):
        return embedded_config("topr", learner_strategy="fsdp2", **settings) \
            .learners(num_learners=num_learners)

    refused = {
        "needs num_learners >= 1": fsdp2_config(0),
        "does not autocast": fsdp2_config(autocast_dtype="bfloat16"),
    }
    for message, cfg in refused.items():
        with pytest.raises(ValueError, match=f"^RLVRConfig.learner_strategy='fsdp2' {message}"):
            cfg.validate()
    with pytest.raises(ValueError, match="configure DeepSpeed's ZeRO, but learner_strategy='fsdp2'"):
        fsdp2_config(offload_optimizer=True).validate()
    with pytest.raises(ValueError, match="fsdp_reshard_after_forward.*must be True, False or 'auto'"):
        fsdp2_config(fsdp_reshard_after_forward="yes").validate()
    # What it combines with (the equivalence tests below train each against a torch learner).
    for settings in (SCORING, LORA_CRITIC, {"adv_estimator": "gae", "critic_shares_trunk": True},
                     {"grad_clip_by": "value"}, {"fsdp_reshard_after_forward": True},
                     {"model_dtype": "bfloat16", "gradient_checkpointing": True}):
        fsdp2_config(**settings).validate()


def test_mixed_precision_follows_model_dtype():
    from torch.distributed.fsdp import MixedPrecisionPolicy

    assert fsdp2.mixed_precision("float32") == MixedPrecisionPolicy()
    assert fsdp2.mixed_precision("bfloat16") == MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def test_bfloat16_computes_over_float32_shards_and_reduces_in_float32(tmp_path):
    """model_dtype='bfloat16' under fsdp2: the sharded weights Adam updates are float32, the
    forward computes in bf16, the gradients arrive in float32 (one process: a world of one)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from rllib_llm.learner.module import response_logits
    from rllib_llm.models import load_model

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        model = load_model("embedded", dtype="bfloat16")
        fsdp2.shard_model(model, init_device_mesh("cpu", (1,)), model_dtype="bfloat16")
        assert {fsdp2.local_part(p).dtype for p in model.parameters()} == {torch.float32}
        ids = torch.tensor([[5, 6, 7, 8]])
        logits = response_logits(model, ids, torch.ones_like(ids), 3)
        assert logits.dtype == torch.bfloat16
        logits.float().logsumexp(-1).sum().backward()
        grads = [p.grad for p in model.parameters()]
        assert {fsdp2.local_part(g).dtype for g in grads} == {torch.float32}
        assert float(fsdp2.grad_norm(grads)) > 0
    finally:
        dist.destroy_process_group()


def test_reshard_after_forward_keeps_layers_whole_until_their_backward(tmp_path):
    """fsdp_reshard_after_forward: True frees each layer's gathered weights after its forward,
    False keeps them whole until its backward frees them; a no-grad forward leaves whatever it
    kept whole (the root always) until `fsdp2.reshard` (one process: a world of one). 'auto' is
    True on a GPU only."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from rllib_llm.models import load_model

    def whole(model) -> dict[str, bool]:  # FSDP2 swaps in a plain tensor while gathered
        return {"layer": not isinstance(model.model.layers[0].mlp.up_proj.weight, DTensor),
                "root": not isinstance(model.lm_head.weight, DTensor)}

    assert [fsdp2.reshards_after_forward("auto", torch.device(d)) for d in ("cpu", "cuda")] \
        == [False, True]
    assert fsdp2.reshards_after_forward(True, torch.device("cpu")) is True
    # What each learner's build line says it settled on.
    assert fsdp2.reshard_note("auto", torch.device("cpu")) == \
        "fsdp_reshard_after_forward=False (auto)"
    assert fsdp2.reshard_note(True, torch.device("cpu")) == "fsdp_reshard_after_forward=True"
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        ids = torch.tensor([[5, 6, 7, 8]])
        for reshard in (True, False):
            model = fsdp2.shard_model(load_model("embedded", dtype="float32"),
                                      init_device_mesh("cpu", (1,)), model_dtype="float32",
                                      reshard_after_forward=reshard)
            loss = model(ids).logits.logsumexp(-1).sum()
            assert whole(model) == {"layer": not reshard, "root": True}, reshard
            loss.backward()
            assert whole(model) == {"layer": False, "root": False}, reshard
            with torch.no_grad():
                model(ids)
            assert whole(model) == {"layer": not reshard, "root": True}, reshard
            fsdp2.reshard(model)
            assert whole(model) == {"layer": False, "root": False}, reshard
    finally:
        dist.destroy_process_group()


def test_each_clipping_rule_clips_the_shards_as_rllib_clips_the_whole_gradients(tmp_path):
    """grad_clip_by 'value', 'norm' and 'global_norm' on two ranks' shards give what RLlib's
    clip_gradients gives on the whole tensors (grad_clip 1.0)."""
    import multiprocessing as mp

    from ray.rllib.utils.torch_utils import clip_gradients
    from sharded_clip import CLIP_GRADS, clip_on_rank  # (tests/learner: on sys.path)

    out = tmp_path / "clipped.pt"
    ctx = mp.get_context("spawn")
    ranks = [ctx.Process(target=clip_on_rank, args=(r, str(tmp_path / "store"), str(out)))
             for r in range(2)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=120)
    assert [process.exitcode for process in ranks] == [0, 0]
    clipped = torch.load(out)
    for by in ("value", "norm", "global_norm"):
        expected = {i: g.clone() for i, g in enumerate(CLIP_GRADS)}
        clip_gradients(expected, grad_clip=1.0, grad_clip_by=by)
        for i, g in expected.items():
            torch.testing.assert_close(clipped[by][i], g, rtol=1e-6, atol=1e-7, msg=f"{by} {i}")
    assert not torch.equal(clipped["norm"][0], CLIP_GRADS[0])  # each rule clipped something


def adam_state(algo) -> dict:
    """The first learner's optimizer state as saved in a checkpoint."""
    from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_OPTIMIZER

    state = algo.get_state(components=f"{COMPONENT_LEARNER_GROUP}/{COMPONENT_LEARNER}")
    (optim,) = state[COMPONENT_LEARNER_GROUP][COMPONENT_LEARNER][COMPONENT_OPTIMIZER].values()
    return optim["state"]


@pytest.mark.slow  # two learner processes: outside test-fast
@pytest.mark.usefixtures("ray_session")  # tests/conftest.py
def test_two_fsdp2_learners_take_the_update_of_one_torch_learner_holding_half_of_it(tmp_path):
    """5 iterations (sample with the torch learner's weights, update both), the fsdp2 learners
    with gradient checkpointing on, which must not change their update, both with SCORING's
    reference, teacher, remove_padding and fused kernels; then the fsdp2 learners' sharded
    checkpoint restores (into them, after a 6th update) and exports whole."""

    def held_bytes(learner) -> int:
        """Bytes a learner stores of its module's weights (every model it holds), their
        gradients and its optimizer's state: measured on the tensors it holds (a shard where
        sharded). (Nested: Ray pickles it by value into the learner actors.)"""
        params = list(learner.module[DEFAULT_MODULE_ID].parameters())
        return (fsdp2.local_bytes(params) + fsdp2.local_bytes(p.grad for p in params)
                + learner.optimizer_state_bytes())

    def bucket_sizes(learner) -> list[list[int]]:
        """The bytes of each weight a sync gathers, bucket by bucket (a tied weight once, in
        the bucket that first names it)."""
        seen, sizes = set(), []
        for bucket in learner.module[DEFAULT_MODULE_ID].partitioned.buckets(lambda key: True):
            sizes.append([])
            for _, v in bucket:
                if id(v) not in seen:
                    seen.add(id(v))
                    sizes[-1].append(v.numel() * v.element_size())
        return sizes

    one = build("torch", 0, **SCORING)
    two = build("fsdp2", 2, **SCORING, gradient_checkpointing=True,
                weight_sync_bucket_bytes=BUCKET)
    checkpoint = tmp_path / "fsdp2"
    try:
        before = weights(one)
        drift, w1, w2 = update_both(one, two, 5)  # the largest difference after each
        s1, s2 = adam_state(one), adam_state(two)
        two.sync_weights()
        runner = two.env_runner_group.local_env_runner.module.get_state(inference_only=True)
        held_one = held_bytes(one.learner_group.local_learner)
        held_two = [r.get() for r in two.learner_group.foreach_learner(held_bytes)
                    .result_or_errors]
        buckets = [r.get() for r in two.learner_group.foreach_learner(bucket_sizes)
                   .result_or_errors]
        # The checkpoint, a 6th update, back to the checkpoint and the 6th update again.
        two.save_to_path(checkpoint)
        episodes = one.env_runner_group.local_env_runner.sample()
        two.update_learners(episodes)
        w6 = weights(two)
        two.restore_from_path(checkpoint)
        restored, restored_adam = weights(two), adam_state(two)
        two.update_learners(episodes)
        w6_again = weights(two)
    finally:
        one.stop()
        two.stop()
    print(f"held bytes: one learner {held_one}, fsdp2 learners {held_two}")
    assert max(float((w1[k] - before[k]).abs().max()) for k in w1) > 1e-2  # it trained
    assert w2.keys() == w1.keys()
    # Within 1e-6 after five updates (of 4 steps each; measured 2.5e-7, 2.5e-7, 4.1e-7, 6.6e-7,
    # 9.2e-7; two DDP learners 2.5e-7 .. 9.9e-7 in this harness: benchmarks/memory/
    # learner_drift.py). On a CPU the gradients are accumulated whole over a step's micro-batches
    # and reduce-scattered once (fsdp_reshard_after_forward 'auto'), summed in DDP's order; a
    # reduce-scatter per micro-batch summed them in another (3.9e-7 .. 1.6e-6). Adam divides by
    # the root of small second moments, so any rounding grows step by step: without SCORING the
    # same learners drift to 1.4e-5 after five, DDP's to 2.8e-6, ZeRO-2's to 2.0e-5.
    print("largest weight difference after each update:", drift)
    assert drift[0] < 1e-6 and drift[-1] < 1.2e-6, drift  # (a margin for other CPUs' kernels)
    # Adam's moments, gathered from the shards, are the torch learner's, in torch Adam's format
    # (up to the drift above: each within 1% of its norm).
    assert s2["state"].keys() == s1["state"].keys()
    moment_drift = 0.0
    for i, entry in s1["state"].items():
        assert float(s2["state"][i]["step"]) == float(entry["step"]) == 20
        for key in ("exp_avg", "exp_avg_sq"):
            ours, theirs = s2["state"][i][key], torch.as_tensor(entry[key])
            assert ours.shape == theirs.shape, (i, key)
            moment_drift = max(moment_drift, float((ours - theirs).norm() / theirs.norm()))
    print("largest relative difference of Adam's moments:", moment_drift)
    assert moment_drift < 1e-2
    # The env runners hold the policy the learners hold (gathered from the shards).
    assert runner.keys() == {k for k in w1 if k.startswith("model.")}
    for k in runner:
        assert torch.equal(torch.as_tensor(runner[k]), w2[k]), k
    # Each learner holds about half of what the one learner holds.
    assert all(held / held_one <= 0.55 for held in held_two), (held_two, held_one)
    # Weights were gathered a bucket (128 KiB) at a time, a larger weight alone.
    for sizes in buckets:
        assert len(sizes) >= 8, sizes
        assert all(sum(b) <= BUCKET or len(b) == 1 for b in sizes), sizes
    # The checkpoint holds each learner's shards (torch.distributed.checkpoint) in place of the
    # whole module, and restores exactly: the fsdp2 learners then take the same 6th update again.
    learner_dir = checkpoint / "learner_group" / "learner"
    assert (learner_dir / "fsdp2_shards" / ".metadata").is_file()
    assert len(list((learner_dir / "fsdp2_shards").glob("*.distcp"))) == 2
    assert not (learner_dir / "rl_module").exists()
    # The teacher is loaded from teacher_model_name_or_path again: no shard of it is written.
    from torch.distributed.checkpoint import FileSystemReader

    saved = FileSystemReader(str(learner_dir / "fsdp2_shards")).read_metadata()
    parts = {key.split(".")[1] for key in saved.state_dict_metadata if key.startswith("model.")}
    assert parts == {"model", "reference_model"}, parts
    assert max(float((w6[k] - w2[k]).abs().max()) for k in w2) > 1e-4  # the 6th update moved
    for k in w2:
        assert torch.equal(restored[k], w2[k]), k
        assert torch.equal(w6_again[k], w6[k]), k
    for i, entry in s2["state"].items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(restored_adam["state"][i][key], entry[key]), (i, key)
    # `rllib-llm export` writes the policy whole from the shards, as a Hugging Face model.
    from transformers import AutoModelForCausalLM

    from rllib_llm.outputs.checkpoints import export_policy

    export_policy(checkpoint, tmp_path / "export")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "export").state_dict()
    for k, v in exported.items():
        assert torch.equal(v, w2[f"model.{k}"]), k


@pytest.mark.slow  # two learner processes: outside test-fast
@pytest.mark.usefixtures("ray_session")  # tests/conftest.py
def test_two_fsdp2_learners_train_lora_adapters_and_a_critic_as_one_torch_learner(tmp_path):
    """2 iterations with LORA_CRITIC (sample with the torch learner's weights, update both): the
    fsdp2 learners' adapters and critic are the torch learner's, and so are the merged weights
    their env runners receive and their sharded checkpoint exports."""
    from transformers import AutoModelForCausalLM

    from rllib_llm.outputs.checkpoints import export_policy

    one = build("torch", 0, **LORA_CRITIC)
    two = build("fsdp2", 2, **LORA_CRITIC, weight_sync_bucket_bytes=BUCKET)
    try:
        before = weights(one)
        drift, w1, w2 = update_both(one, two, 2)  # the largest difference after each
        runners = []
        for algo in (one, two):
            algo.sync_weights()
            runners.append(algo.env_runner_group.local_env_runner.module.get_state(
                inference_only=True))
        two.save_to_path(tmp_path / "fsdp2")
    finally:
        one.stop()
        two.stop()
    export_policy(tmp_path / "fsdp2", tmp_path / "export")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "export").state_dict()
    # The learners' state: the adapters (not the frozen base) and the critic, both trained.
    assert w2.keys() == w1.keys()
    for part in (".lora_", "critic."):
        trained = [k for k in w1 if part in k]
        assert trained and max(float((w1[k] - before[k]).abs().max()) for k in trained) > 1e-3
    assert all(".lora_" in k or k.startswith("critic.") for k in w1), sorted(w1)[:5]
    worst = max(w1, key=lambda k: float((w2[k] - w1[k]).abs().max()))
    print("largest weight difference after each update:", drift, "at", worst)
    assert drift[0] < 1e-5 and drift[-1] < 2e-5, drift  # (measured: 1.5e-6 twice)
    # The env runners hold the merged policy the learners hold.
    assert runners[1].keys() == runners[0].keys()
    merged_drift = max(float((torch.as_tensor(runners[1][k]) - torch.as_tensor(v)).abs().max())
                       for k, v in runners[0].items())
    assert merged_drift < 1e-6, merged_drift
    # `rllib-llm export` merges the checkpoint's adapters into the base: the runners' weights.
    assert exported.keys() == {k.split(".", 1)[1] for k in runners[1]}
    for k, v in exported.items():
        assert torch.equal(v, torch.as_tensor(runners[1][f"model.{k}"])), k


@pytest.mark.slow  # two learner processes: outside test-fast
@pytest.mark.usefixtures("ray_session")  # tests/conftest.py
def test_two_fsdp2_learners_train_a_value_head_on_the_policys_trunk_as_one_torch_learner():
    """One update with the value head on the policy's own trunk (critic_shares_trunk), sharded
    as one unit beside the policy's layers and called on the trunk's states inside the policy's
    second forward: the fsdp2 learners' policy and value head are the torch learner's."""
    shared = dict(adv_estimator="gae", critic_shares_trunk=True)
    one = build("torch", 0, **shared)
    two = build("fsdp2", 2, **shared)
    try:
        before = weights(one)
        (drift,), w1, w2 = update_both(one, two, 1)
    finally:
        one.stop()
        two.stop()
    assert w2.keys() == w1.keys()
    heads = [k for k in w1 if k.startswith("value_head.")]
    assert heads and max(float((w1[k] - before[k]).abs().max()) for k in heads) > 1e-4, heads
    print("largest weight difference after one update:", drift)
    assert drift < 1e-6, drift  # (measured: 2.3e-7 twice)
