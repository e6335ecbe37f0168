"""autocast_dtype="auto" and emulated bf16: the device a process computes on decides whether bf16
pays there (exchange/precision.py), and an explicit bf16 that a CPU emulates warns once."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
import torch

from rllib_llm.exchange import precision
from rllib_llm.exchange.precision import autocast_for_device, native_bf16, warn_if_emulated
from rllib_llm.learner.module import RLVRModule
from rllib_llm.recipes.embedded import embedded_config

CPU = torch.device("cpu")
SPACES = dict(observation_space=gym.spaces.Discrete(2), action_space=gym.spaces.Discrete(2))


@pytest.fixture
def cpu_bf16(monkeypatch):
    """Sets whether the CPU counts as computing bf16 natively, and forgets earlier warnings."""
    precision.forget_emulation_warnings()

    def set_native(native: bool) -> None:
        monkeypatch.setattr(precision, "native_bf16", lambda device: native)

    yield set_native
    precision.forget_emulation_warnings()


def test_native_means_the_instructions_and_onednn_using_them():
    has = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert native_bf16(CPU) == (has and torch.ops.mkldnn._is_mkldnn_bf16_supported())


@pytest.mark.parametrize("native, chosen", [(True, "bfloat16"), (False, None)])
def test_auto_is_bfloat16_only_where_the_cpu_computes_it(cpu_bf16, native, chosen):
    cpu_bf16(native)
    assert autocast_for_device("auto", CPU) == chosen
    # Explicit values are the user's, whatever the CPU.
    assert autocast_for_device("bfloat16", CPU) == "bfloat16"
    assert autocast_for_device(None, CPU) is None


def test_explicit_bf16_on_an_emulating_cpu_warns_once_with_the_measured_slowdown(cpu_bf16,
                                                                                 monkeypatch):
    cpu_bf16(False)
    monkeypatch.setattr(precision, "emulated_slowdown", lambda dtype: 71.6)
    with pytest.warns(RuntimeWarning, match=r"autocast_dtype='bfloat16' on a CPU without native "
                                            r"bfloat16 .* emulated, 72x slower than float32"):
        warn_if_emulated("bfloat16", CPU, setting="autocast_dtype")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_emulated("bfloat16", CPU, setting="autocast_dtype")  # once
        warn_if_emulated("float32", CPU, setting="model_dtype")
        warn_if_emulated(None, CPU, setting="autocast_dtype")
        warn_if_emulated("auto", CPU, setting="autocast_dtype")
    with pytest.warns(RuntimeWarning, match="model_dtype='bfloat16'"):
        warn_if_emulated("bfloat16", CPU, setting="model_dtype")  # another setting: its own


def test_where_native_nothing_warns(cpu_bf16):
    cpu_bf16(True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_emulated("bfloat16", CPU, setting="model_dtype")
        warn_if_emulated("bfloat16", CPU, setting="autocast_dtype")
    assert [str(w.message) for w in caught] == []


def test_the_slowdown_is_a_ratio_of_two_timed_matmuls():
    """Where bf16 is native the ratio is near or under 1, where it is emulated tens; either way a
    positive number from real timings, and the thread count is left as it was."""
    threads = torch.get_num_threads()
    ratio = precision.emulated_slowdown(torch.bfloat16, size=64)
    assert ratio > 0 and torch.get_num_threads() == threads
    if not native_bf16(CPU):
        assert ratio > 3


@pytest.mark.parametrize("native", [True, False])
def test_the_learner_module_settles_auto_for_its_device(cpu_bf16, native):
    cpu_bf16(native)
    spec = embedded_config("ppo", autocast_dtype="auto").get_default_rl_module_spec()
    module = RLVRModule(**SPACES, model_config=spec.model_config)
    before = module.budgets
    budgets = module.size_for_device(0.5)
    assert module.budgets is before  # sizing changes nothing: the learner takes the budgets
    module.use_budgets(budgets)
    assert module.autocast_dtype == budgets.autocast_dtype == (
        torch.bfloat16 if native else None)
    assert ("autocast_dtype=bfloat16 (auto: native bf16)" if native else
            "autocast_dtype=None (auto: no native bf16: float32)") in budgets.note
    # Env runners' modules (inference_only) never autocast: the engine decides for sampling.
    runner = RLVRModule(**SPACES, model_config=spec.model_config, inference_only=True)
    assert runner.autocast_dtype is None


def test_a_learner_module_with_explicit_bf16_on_an_emulating_cpu_warns(cpu_bf16, monkeypatch):
    cpu_bf16(False)
    monkeypatch.setattr(precision, "emulated_slowdown", lambda dtype: 70.0)
    spec = embedded_config("ppo", autocast_dtype="bfloat16").get_default_rl_module_spec()
    module = RLVRModule(**SPACES, model_config=spec.model_config)
    with pytest.warns(RuntimeWarning, match="autocast_dtype='bfloat16'.*70x slower"):
        budgets = module.size_for_device(0.5)
    assert budgets.autocast_dtype == torch.bfloat16  # warned, not overruled


def test_auto_passes_the_config_rules_as_bfloat16_does():
    from rllib_llm import RLVRConfig

    RLVRConfig().training(autocast_dtype="auto", sampler_autocast=True).validate()
    with pytest.raises(ValueError, match="over float32 weights, but model_dtype='bfloat16'"):
        RLVRConfig().training(autocast_dtype="auto", model_dtype="bfloat16").validate()
