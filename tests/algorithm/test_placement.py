"""Placement honoured or refused (exchange/devices.py, algorithm/placement_checks.py): in one
process the sampler samples on the learner's device and the shared model never moves; a process
given a GPU it cannot see fails clearly; every process reports its device.

No GPU here: a device the runner's config would give it that differs from the learner's is
played by the "meta" device (RLlib's get_device, as the env runner calls it, returns it), which
holds no data. Before the fix, the torch engine moved the shared model to the runner's device, so
the learner's parameters ended up there: on a GPU machine, the learner trained on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from rllib_llm.algorithm.config import RLVRConfig
from rllib_llm.recipes.embedded import embedded_config
from rllib_llm.rollout import env_runner as env_runner_module

SHAPE = dict(rollout_batch_size=4, num_return_sequences_in_group=2, response_length=4)


@pytest.mark.usefixtures("ray_session")
def test_one_process_samples_on_the_learners_device_and_never_moves_its_model(monkeypatch):
    monkeypatch.setattr(env_runner_module, "get_device",
                        lambda config, num_gpus: torch.device("meta"))
    algo = embedded_config("ppo", **SHAPE).build_algo()
    try:
        learner = algo.learner_group._learner
        model = learner.module["default_policy"].model
        runner = algo.env_runner_group.local_env_runner
        before = {k: v.clone() for k, v in model.state_dict().items()}
        result = algo.train()
        assert runner.engine.model is model
        assert runner.engine.device == runner.device == torch.device("cpu")
        assert {p.device for p in model.parameters()} == {torch.device("cpu")}
        # It trained there: the update moved the weights the sampler samples with.
        assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())
        assert result["learners"]["default_policy"]["device_is_gpu"] == 0.0
        assert result["env_runners"]["device_is_gpu"] == 0.0
    finally:
        algo.stop()


@pytest.mark.usefixtures("ray_session")
def test_every_process_reports_its_device_once_at_build_on_stderr(capsys):
    algo = embedded_config("ppo", **SHAPE).build_algo()
    algo.stop()
    captured = capsys.readouterr()
    assert "computes on" not in captured.out  # stdout stays a command's own (eval's JSON)
    lines = [line for line in captured.err.splitlines()
             if line.startswith("rllib_llm:") and "computes on" in line]
    assert lines == ["rllib_llm: the learner computes on cpu",
                     "rllib_llm: the driver's env runner computes on cpu (sampling with the "
                     "learner's model)"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("setting", ["num_gpus_per_learner", "num_gpus_per_env_runner"])
def test_a_gpu_the_process_cannot_see_is_a_clear_error(setting):
    config = embedded_config("ppo", **SHAPE)
    if setting == "num_gpus_per_learner":
        config = config.learners(num_learners=0, num_gpus_per_learner=1)
    else:  # a sampler of its own: LoRA keeps the driver's runner apart from the learner
        config = config.env_runners(num_gpus_per_env_runner=1).training(lora_rank=2)
    with pytest.raises(ValueError, match=f"{setting}=1 gives the .* a GPU, but its process "
                                         "sees none"):
        config.build_algo()


def test_a_sampler_gpu_that_one_process_cannot_honour_is_refused():
    config = RLVRConfig().environment("math_verify").env_runners(
        num_env_runners=0, num_gpus_per_env_runner=1).learners(num_gpus_per_learner=0)
    with pytest.raises(ValueError, match="samples with the learner's own model"):
        config.validate()


def test_a_generate_budget_with_vllm_is_refused():
    config = RLVRConfig().environment("math_verify").env_runners(
        rollout_engine="vllm", max_tokens_per_generate_batch=1024)
    with pytest.raises(ValueError, match="vLLM bounds its own"):
        config.validate()


@pytest.mark.usefixtures("ray_session")
def test_the_generate_budget_reaches_the_torch_engine_and_splits_its_batches(monkeypatch):
    """max_tokens_per_generate_batch is the engine's max_tokens_per_batch: a budget under one
    row's tokens decodes the iteration's 8 rows one at a time (a row is never split)."""
    from rllib_llm.rollout.torch_engine import TorchRolloutEngine

    rows_per_batch = []
    real = TorchRolloutEngine._generate_batch

    def record(self, prompts, counts, sampling, generator):
        rows_per_batch.append(sum(counts))
        return real(self, prompts, counts, sampling, generator)

    monkeypatch.setattr(TorchRolloutEngine, "_generate_batch", record)
    budget = SHAPE["response_length"]  # less than any prompt + response
    algo = embedded_config("ppo", **SHAPE, max_tokens_per_generate_batch=budget).build_algo()
    try:
        algo.train()
        assert algo.env_runner_group.local_env_runner.engine.max_tokens_per_batch == budget
        assert rows_per_batch == [1] * 8
    finally:
        algo.stop()
