"""`TensorState`: module states travel as raw bytes (out of band under pickle protocol 5, as Ray
sends numpy arrays) and come back exact, every dtype included."""

from __future__ import annotations

import pickle

import ray
import torch

from rllib_llm.learner.tensor_state import TensorState


def sample_state() -> TensorState:
    g = torch.Generator().manual_seed(0)
    return TensorState({
        "w": torch.randn(4, 3, generator=g),
        "bf16": torch.randn(5, generator=g).to(torch.bfloat16),
        "half": torch.randn(2, 2, generator=g).half(),
        "ids": torch.arange(6).reshape(2, 3),
        "flag": torch.tensor([True, False]),
        "scalar": torch.tensor(3.5),
        "strided": torch.randn(4, 4, generator=g).t(),  # not contiguous
        "note": "kept as is",
    })


def assert_same(got: dict, want: dict) -> None:
    assert type(got) is dict and list(got) == list(want)
    for name, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
            assert torch.equal(got[name], value), name
            if value.dtype != torch.bool:
                got[name].add_(1)  # writable: not a view of Ray's read-only buffer
        else:
            assert got[name] == value


def test_round_trip_is_exact_for_every_dtype():
    state = sample_state()
    assert_same(pickle.loads(pickle.dumps(state)), sample_state())


def test_tensor_bytes_travel_out_of_band():
    state = TensorState({"w": torch.zeros(1 << 20)})  # 4 MiB
    buffers = []
    stream = pickle.dumps(state, protocol=5, buffer_callback=buffers.append)
    assert len(stream) < 4096  # the bytes are not in the pickle stream...
    assert sum(memoryview(b).nbytes for b in buffers) == 4 << 20  # ...but in one buffer
    assert_same(pickle.loads(stream, buffers=buffers), {"w": torch.zeros(1 << 20)})


def test_through_rays_object_store():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        assert_same(ray.get(ray.put(sample_state())), sample_state())
    finally:
        ray.shutdown()
