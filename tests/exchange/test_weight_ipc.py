"""CUDA IPC weight sync (exchange/weight_ipc.py) on the CPU: which GPU a receiver opens, what it
delivers under which names, and the refusals. The IPC itself needs a GPU: benchmarks/gpu/gpu_check.py
syncs through it and compares the runner's weights with the learner's."""

import pytest
import torch

from rllib_llm.exchange import weight_ipc
from rllib_llm.exchange.weight_ipc import SharedTensor, SharedWeights, index_of, open_shared, share


def test_a_receiver_opens_the_learners_gpu_under_its_own_index():
    assert index_of("GPU-b", ["GPU-a", "GPU-b"]) == 1
    assert index_of("GPU-b", ["GPU-b"]) == 0


def test_a_receiver_without_the_learners_gpu_is_told_what_to_change():
    with pytest.raises(ValueError, match="learner's GPU \\(GPU-b\\).*sees \\['GPU-a'\\].*'nccl'"):
        index_of("GPU-b", ["GPU-a"])
    with pytest.raises(ValueError, match="sees no GPU"):
        index_of("GPU-b", [])


def test_weights_off_a_gpu_are_refused_before_anything_is_shared():
    weights = {"w": torch.zeros(2, 2), "b": torch.zeros(2)}
    with pytest.raises(ValueError, match="on one GPU.*\\['cpu'\\].*num_gpus_per_learner"):
        share(weights, version=3)


def test_each_storage_is_opened_once_on_the_local_index_and_delivered_under_every_name(
        monkeypatch):
    import torch.multiprocessing.reductions as reductions

    opened = []

    def rebuild(*args):  # what torch's rebuild_cuda_tensor receives, and a tensor to hand on
        opened.append(args)
        return torch.full((2,), float(args[0]))

    monkeypatch.setattr(reductions, "rebuild_cuda_tensor", rebuild)
    monkeypatch.setattr(weight_ipc, "visible_uuids", lambda: ["GPU-x", "GPU-learner"])
    # Handles as reduce_tensor makes them: the learner's device index (0) at position 6.
    handle = (7, "size", "stride", 0, "storage", torch.float32, 0, b"ipc", 8, 0, False)
    shared = SharedWeights(5, "GPU-learner", (
        SharedTensor(("embed.weight", "lm_head.weight"), handle),
        SharedTensor(("norm.weight",), (9, *handle[1:])),
    ))

    delivered = list(open_shared(shared))

    assert [name for name, _ in delivered] == ["embed.weight", "lm_head.weight", "norm.weight"]
    assert delivered[0][1] is delivered[1][1]  # a tied head: one storage, two names
    assert [args[6] for args in opened] == [1, 1]  # this process's index of the learner's GPU
    assert [args[0] for args in opened] == [7, 9]
    assert [a[:6] + a[7:] for a in opened] == [handle[:6] + handle[7:],
                                               (9, *handle[1:6], *handle[7:])]


def test_a_torch_engine_off_a_gpu_refuses_shared_weights():
    from transformers import LlamaForCausalLM

    from rllib_llm.models.tiny_llama import tiny_llama_config
    from rllib_llm.rollout.torch_engine import TorchRolloutEngine

    config = tiny_llama_config(16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32, pad_token_id=0, eos_token_id=1)
    engine = TorchRolloutEngine(LlamaForCausalLM(config), eos_token_id=1, pad_token_id=0)
    with pytest.raises(ValueError, match="cuda_ipc.*computes on cpu"):
        engine.load_shared_weights(SharedWeights(1, "GPU-learner", ()))
