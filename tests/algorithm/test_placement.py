"""Placement honoured or refused (exchange/devices.py, algorithm/config_rules/placement_rules.py): in
one process the sampler samples on the learner's device and the shared model never moves; a
process given a GPU it cannot see fails clearly; every process reports its device.

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
        learner = algo.learner_group.local_learner
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


def test_cuda_graphs_without_a_sampler_gpu_or_with_vllm_are_refused():
    config = RLVRConfig().environment("math_verify").env_runners(
        num_env_runners=1, torch_engine_cuda_graphs=True)
    with pytest.raises(ValueError, match="torch_engine_cuda_graphs=True needs a sampler on a GPU"):
        config.validate()
    config = RLVRConfig().environment("math_verify").env_runners(
        rollout_engine="vllm", torch_engine_cuda_graphs=False)
    with pytest.raises(ValueError, match="vLLM captures its own CUDA graphs"):
        config.validate()


def test_cuda_graphs_auto_is_off_on_a_cpu_and_true_names_what_is_missing():
    """'auto' takes CUDA graphs where the engine computes on a GPU and the model supports a
    fixed-shape step; True where one is missing is refused with the reason."""
    from transformers import LlamaForCausalLM

    from rllib_llm.models.tiny_llama import tiny_llama_config
    from rllib_llm.rollout.decode_graphs import cuda_graph_decode

    model = LlamaForCausalLM(tiny_llama_config(40, hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=4, intermediate_size=64))
    assert cuda_graph_decode("auto", torch.device("cpu"), model) == (False, "")
    assert cuda_graph_decode(False, torch.device("cpu"), model) == (False, "")
    with pytest.raises(ValueError, match="CUDA graphs need a GPU, and this engine computes on cpu"):
        cuda_graph_decode(True, torch.device("cpu"), model)
    # On a GPU (the device is only named: nothing is allocated there).
    assert cuda_graph_decode("auto", torch.device("cuda"), model) == \
        (True, "torch_engine_cuda_graphs=True (auto)")
    model.config._attn_implementation = "flash_attention_2"
    on, note = cuda_graph_decode("auto", torch.device("cuda"), model)
    assert not on and "flash_attention_2" in note
    with pytest.raises(ValueError, match="the model has attention implementation"):
        cuda_graph_decode(True, torch.device("cuda"), model)


@pytest.mark.usefixtures("ray_session")
def test_the_generate_budget_reaches_the_torch_engine_and_splits_its_batches(monkeypatch):
    """max_tokens_per_generate_batch is the engine's max_tokens_per_batch: a budget under one
    row's tokens decodes the iteration's 8 rows one at a time (a row is never split)."""
    from rllib_llm.rollout.torch_engine import TorchRolloutEngine

    rows_per_batch = []
    real = TorchRolloutEngine.generate_batch

    def record(self, prompts, counts, sampling, generator):
        rows_per_batch.append(sum(counts))
        return real(self, prompts, counts, sampling, generator)

    monkeypatch.setattr(TorchRolloutEngine, "generate_batch", record)
    budget = SHAPE["response_length"]  # less than any prompt + response
    algo = embedded_config("ppo", **SHAPE, max_tokens_per_generate_batch=budget).build_algo()
    try:
        algo.train()
        assert algo.env_runner_group.local_env_runner.engine.max_tokens_per_batch == budget
        assert rows_per_batch == [1] * 8
    finally:
        algo.stop()


# --- actors the cluster cannot hold (algorithm/cluster_fit.py) ---------------------------------
# RLlib's defaults: 1 CPU per learner and per env runner. On this module's 2-CPU Ray (started by
# ray.init() here: no node can join it) two learners and a runner ask for 3, and build_algo()
# waited for them forever, silently.


def _actors_config(**resources) -> RLVRConfig:
    learners = {k: v for k, v in resources.items() if "learner" in k}
    runners = {k: v for k, v in resources.items() if "env_runner" in k}
    main = {k: v for k, v in resources.items() if "main_process" in k}
    return (RLVRConfig().environment("math_verify").training(**SHAPE)
            .learners(num_learners=2, **learners).env_runners(num_env_runners=1, **runners)
            .resources(**main))


@pytest.mark.timeout(120)  # before the fix: no answer at all
@pytest.mark.usefixtures("ray_session")
def test_actors_a_local_cluster_cannot_hold_are_refused_at_build():
    with pytest.raises(ValueError) as refused:
        _actors_config().build_algo()
    assert str(refused.value) == (
        "RLVR: the config's actors ask Ray for 3 CPU (1 env runner x 1 CPU: num_env_runners=1, "
        "num_cpus_per_env_runner=1; 2 learners x 1 CPU: num_learners=2, "
        "num_cpus_per_learner='auto'), but the cluster has 2 CPU, and no node can join it (Ray "
        "was started by ray.init() in this process), so the actors would wait forever; lower "
        "num_cpus_per_env_runner, num_env_runners, num_cpus_per_learner, num_learners "
        "(fractions such as 0.5 work), or start Ray with more (ray.init(num_cpus=..., "
        "num_gpus=...)).")


def test_what_the_actors_ask_for_is_rllibs_request_without_the_driver():
    from rllib_llm.algorithm.cluster_fit import shortfall

    two = {"CPU": 2.0}
    assert shortfall(_actors_config(), two)[0].startswith(
        "the config's actors ask Ray for 3 CPU")
    halves = dict(num_cpus_per_learner=0.5, num_cpus_per_env_runner=0.5)
    assert shortfall(_actors_config(**halves), two) is None  # the 27-s run of the report
    # The main process is the driver, which holds no Ray CPU: its setting does not count.
    assert shortfall(_actors_config(**halves, num_cpus_for_main_process=1), two) is None
    # GPUs are named with their own settings.
    gpu = shortfall(_actors_config(num_gpus_per_learner=1), {"CPU": 8.0})
    assert gpu == ("the config's actors ask Ray for 2 GPU (2 learners x 1 GPU: num_learners=2, "
                   "num_gpus_per_learner=1), but the cluster has 0 GPU",
                   "lower num_gpus_per_learner, num_learners (fractions such as 0.5 work)")


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("ray_session")
def test_where_nodes_can_join_the_shortfall_is_a_warning_repeated_while_waiting(caplog):
    import time

    from rllib_llm.algorithm.cluster_fit import fit_check

    with caplog.at_level("WARNING", logger="rllib_llm.algorithm.cluster_fit"):
        with fit_check(_actors_config(), can_grow=True, every_s=0.05):
            deadline = time.monotonic() + 60
            while len(caplog.records) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        seen = len(caplog.records)
        time.sleep(0.2)
    assert seen >= 3 and len(caplog.records) == seen  # repeated while waiting, then no more
    assert {r.getMessage() for r in caplog.records} == {
        "RLVR: the config's actors ask Ray for 3 CPU (1 env runner x 1 CPU: num_env_runners=1, "
        "num_cpus_per_env_runner=1; 2 learners x 1 CPU: num_learners=2, "
        "num_cpus_per_learner='auto'), but the cluster has 2 CPU; building waits until nodes "
        "join the cluster (an autoscaler), else forever: lower num_cpus_per_env_runner, "
        "num_env_runners, num_cpus_per_learner, num_learners (fractions such as 0.5 work)."}


@pytest.mark.usefixtures("ray_session")
def test_a_tune_trial_the_local_cluster_cannot_hold_is_refused_before_tune_waits_for_it():
    """`rllib-llm train` runs one Tune trial, whose placement group holds its main process too:
    Tune kept it pending forever. The halves of the report fit outside Tune, not in a trial."""
    from rllib_llm.algorithm.cluster_fit import check_trial_fits

    halves = dict(num_cpus_per_learner=0.5, num_cpus_per_env_runner=0.5)
    with pytest.raises(ValueError) as refused:
        check_trial_fits(_actors_config(**halves))
    assert str(refused.value) == (
        "RLVR: a trial asks Ray for 2.5 CPU (the main process, 1 CPU: "
        "num_cpus_for_main_process=1; 1 env runner x 0.5 CPU: num_env_runners=1, "
        "num_cpus_per_env_runner=0.5; 2 learners x 0.5 CPU: num_learners=2, "
        "num_cpus_per_learner=0.5), but the cluster has 2 CPU, and no node can join it (Ray was "
        "started by this process), so the trial would wait forever; lower "
        "num_cpus_for_main_process, num_cpus_per_env_runner, num_env_runners, "
        "num_cpus_per_learner, num_learners (fractions such as 0.5 work).")
    check_trial_fits(_actors_config(**halves, num_cpus_for_main_process=0.5))  # 2 CPU: fits
