"""Budgets sized by the device (exchange/memory_budgets.py): the arithmetic by hand on the 403M
shape of benchmarks/gpu/gpu_check.py, its properties (more free memory, more tokens; a larger
model, fewer; what it returns fits the share), and the "auto" settings where they are settled:
explicit values win, a CPU keeps the fixed defaults bit for bit, and a GPU (faked: torch's free
memory of N GiB, or the free bytes injected) gets sized budgets, gradient checkpointing and CUDA
graphs."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest
import torch
from transformers import LlamaForCausalLM

from rllib_llm import RLVRConfig
from rllib_llm.exchange import memory_budgets as mb
from rllib_llm.exchange.devices import device_default
from rllib_llm.learner.module import RLVRModule
from rllib_llm.models.tiny_llama import tiny_llama_config
from rllib_llm.recipes.embedded import embedded_config

GIB = 2**30
CUDA = torch.device("cuda:0")  # never touched: only its type is read, and torch's free memory faked
SPACES = dict(observation_space=gym.spaces.Discrete(2), action_space=gym.spaces.Discrete(2))
SMALL = dict(rollout_batch_size=4, num_return_sequences_in_group=2, response_length=4)


def shape_403m(**overrides) -> mb.ModelShape:
    """benchmarks/gpu/gpu_check.py's FULL shape in bfloat16: 24 layers, hidden 1,024, 16 heads of 64
    (no grouped-query attention), MLP 4,096, the char vocabulary of 98; 402,803,712 parameters."""
    params = 402_803_712
    fields = dict(layers=24, kv_heads=16, head_dim=64, hidden=1024, intermediate=4096, vocab=98,
                  dtype_bytes=2, weight_bytes=2 * params)
    return mb.ModelShape(**(fields | overrides))


def test_per_token_bytes_by_hand_on_the_403m_shape():
    shape = shape_403m()
    assert shape.kv_bytes_per_token == 2 * 24 * 16 * 64 * 2 == 98_304  # 96 KiB
    layer = 2 * (8 * 1024 + 2 * 16 * 64 + 4 * 4096)  # 53,248
    assert shape.layer_bytes_per_token == layer
    logits = 3 * 98 * 4
    assert shape.activation_bytes_per_token(gradient_checkpointing=False) == logits + 24 * layer
    assert shape.activation_bytes_per_token(gradient_checkpointing=True) == \
        logits + 24 * 1024 * 2 + layer
    assert shape.generate_bytes_per_token == 98_304 + layer


def test_budgets_by_hand_at_80_gib_free():
    shape = shape_403m(trained_bytes=2 * 402_803_712)
    room = 0.45 * 80 * GIB - shape.weight_bytes
    generate, fits = mb.budgets_for_device(80 * GIB, 0.45, shape, gradient_checkpointing=True,
                                           most_micro_batch_tokens=None)
    assert generate == int(room // shape.generate_bytes_per_token) // 1024 * 1024 == 248_832
    per_token = shape.activation_bytes_per_token(gradient_checkpointing=True)
    assert fits == int((room - 3 * shape.trained_bytes) // per_token) // 1024 * 1024 == 342_016
    # By default a pass takes at most GPU_MICRO_BATCH_TOKENS, where far more would fit.
    assert mb.budgets_for_device(80 * GIB, 0.45, shape, gradient_checkpointing=True) == \
        (248_832, mb.GPU_MICRO_BATCH_TOKENS) == (248_832, 32_768)
    # Where less fits, what fits (8 GiB: 6,144 tokens).
    small = mb.budgets_for_device(8 * GIB, 0.45, shape, gradient_checkpointing=True)[1]
    assert small == mb.budgets_for_device(8 * GIB, 0.45, shape, gradient_checkpointing=True,
                                          most_micro_batch_tokens=None)[1] == 6_144


def test_model_shape_reads_a_hugging_face_llama():
    config = tiny_llama_config(98, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                               intermediate_size=4096, max_position_embeddings=320)
    with torch.device("meta"):  # the shape and dtype, no memory
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    assert mb.model_shape(model) == shape_403m()
    assert mb.model_shape(model, trained=True) == shape_403m(trained_bytes=2 * 402_803_712)
    model.requires_grad_(False)  # frozen (a LoRA base): nothing trained
    assert mb.model_shape(model, trained=True).trained_bytes == 0


@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_budgets_grow_with_free_memory(checkpointing):
    shape = shape_403m(trained_bytes=shape_403m().weight_bytes)
    budgets = [mb.budgets_for_device(gib * GIB, 0.45, shape, gradient_checkpointing=checkpointing,
                                     most_micro_batch_tokens=None)
               for gib in (16, 40, 80, 140)]
    for smaller, larger in zip(budgets, budgets[1:]):
        assert larger[0] > smaller[0] and larger[1] > smaller[1]


def test_the_budgets_shrink_with_the_model():
    def budgets(layers: int, hidden: int) -> tuple[int, int]:
        params = layers * 12 * hidden**2
        shape = shape_403m(layers=layers, hidden=hidden, head_dim=hidden // 16,
                           intermediate=4 * hidden, weight_bytes=2 * params,
                           trained_bytes=2 * params)
        return mb.budgets_for_device(80 * GIB, 0.45, shape, gradient_checkpointing=True,
                                     most_micro_batch_tokens=None)

    small, deeper, wider = budgets(24, 1024), budgets(48, 1024), budgets(24, 2048)
    for larger in (deeper, wider):
        assert larger[0] < small[0] and larger[1] < small[1]


@pytest.mark.parametrize("gib", [24, 80, 140])
@pytest.mark.parametrize("share", [0.2, 0.45, 0.9])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_what_the_budgets_hold_fits_the_share(gib, share, checkpointing):
    shape = shape_403m(trained_bytes=shape_403m().weight_bytes)
    generate, learn = mb.budgets_for_device(gib * GIB, share, shape,
                                            gradient_checkpointing=checkpointing)
    limit = share * gib * GIB
    # The engine: weights + KV cache (and a layer's activations) of `generate` tokens.
    assert shape.weight_bytes + generate * shape.generate_bytes_per_token <= limit
    # The learner: weights, gradients, Adam's moments and the activations of `learn` tokens.
    assert shape.weight_bytes + 3 * shape.trained_bytes + learn * \
        shape.activation_bytes_per_token(gradient_checkpointing=checkpointing) <= limit
    # ... and no more than one rounding step short of filling it.
    assert shape.weight_bytes + (generate + 1024) * shape.generate_bytes_per_token > limit


def test_a_model_that_leaves_no_room_gets_the_smallest_budget():
    shape = shape_403m(trained_bytes=shape_403m().weight_bytes)
    assert mb.budgets_for_device(1 * GIB, 0.45, shape, gradient_checkpointing=True) == \
        (1024, 1024)


# --- where the "auto" settings are settled ---------------------------------------------------
def fake_gpu(monkeypatch, gib: float) -> None:
    """torch reports a CUDA device with `gib` GiB free (the only call the sizing makes)."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (int(gib * GIB),
                                                                         int(80 * GIB)))


def tiny_model() -> LlamaForCausalLM:
    return LlamaForCausalLM(tiny_llama_config(98, hidden_size=64, num_hidden_layers=2,
                                              num_attention_heads=4, intermediate_size=128))


def test_the_cpu_keeps_the_fixed_generate_budget():
    assert mb.free_device_bytes(torch.device("cpu")) is None
    assert mb.generate_budget("auto", torch.device("cpu"), tiny_model(), 0.45) == (32768, "")


def test_a_gpu_sizes_the_generate_budget_from_its_free_memory(monkeypatch):
    model = tiny_model()
    fake_gpu(monkeypatch, 10)
    budget, note = mb.generate_budget("auto", CUDA, model, 0.45)
    weights = mb.model_shape(model).weight_bytes  # already on the device: counted back in
    expected, _ = mb.budgets_for_device(10 * GIB + weights, 0.45, mb.model_shape(model),
                                        gradient_checkpointing=False)
    assert budget == expected > 32768
    assert note == f"max_tokens_per_generate_batch={budget} (auto: 45% of " \
        f"{(10 * GIB + weights) / GIB:.1f} GiB free)"
    fake_gpu(monkeypatch, 40)
    assert mb.generate_budget("auto", CUDA, model, 0.45)[0] > budget


@pytest.mark.parametrize("explicit", [1024, None])
def test_an_explicit_generate_budget_wins_on_a_gpu(monkeypatch, explicit):
    fake_gpu(monkeypatch, 80)
    assert mb.generate_budget(explicit, CUDA, tiny_model(), 0.45) == (explicit, "")


@pytest.mark.parametrize("value, device, expected", [
    ("auto", CUDA, False), ("auto", torch.device("cpu"), True),
    (True, CUDA, True), (False, torch.device("cpu"), False)])
def test_vllm_cuda_graphs_by_the_engines_device_unless_set(value, device, expected):
    assert device_default(value, device, gpu=False, cpu=True) is expected


def learner_module(**training) -> RLVRModule:
    spec = embedded_config("ppo", **SMALL, **training).get_default_rl_module_spec()
    return RLVRModule(**SPACES, model_config=spec.model_config)


def sized(module: RLVRModule, share: float, free_bytes: int | None = None) -> str:
    """Size `module` for its device as the learner does; what was sized."""
    budgets = module.size_for_device(share, free_bytes=free_bytes)
    module.use_budgets(budgets)
    return budgets.note


def test_the_learner_module_on_a_cpu_keeps_the_fixed_defaults():
    module = learner_module()
    assert sized(module, 0.45) == ""  # its parameters are on the CPU: nothing sized
    assert module.micro_batch_tokens == 4096
    assert module.gradient_checkpointing is False and not module.model.is_gradient_checkpointing


def test_the_learner_module_on_a_gpu_sizes_its_budget_and_checkpoints():
    module = learner_module(use_kl_loss=True)  # a reference model beside the policy
    note = sized(module, 0.45, free_bytes=20 * GIB)
    assert module.gradient_checkpointing and module.model.is_gradient_checkpointing
    shape = mb.model_shape(module.model, others=[module.reference_model], trained=True)
    assert shape.weight_bytes == 2 * shape.trained_bytes  # the reference: weights, not trained
    _, expected = mb.budgets_for_device(20 * GIB + shape.weight_bytes, 0.45, shape,
                                        gradient_checkpointing=True)
    assert module.micro_batch_tokens == expected > 4096
    assert note.startswith(f"gradient_checkpointing=True (auto), max_tokens_per_micro_batch="
                           f"{expected} (auto: 45% of ")


def test_a_separate_critic_is_trained_memory_and_checkpointed_too():
    gae = dict(adv_estimator="gae", num_return_sequences_in_group=1)
    module = RLVRModule(**SPACES, model_config=embedded_config(
        "ppo", **(SMALL | gae)).get_default_rl_module_spec().model_config)
    sized(module, 0.45, free_bytes=20 * GIB)
    assert module.critic.trunk.is_gradient_checkpointing and module.model.is_gradient_checkpointing
    shape = mb.model_shape(module.model, others=[module.critic], trained=True)
    assert shape.trained_bytes == shape.weight_bytes > mb.model_shape(module.model).weight_bytes
    assert module.micro_batch_tokens == mb.budgets_for_device(
        20 * GIB + shape.weight_bytes, 0.45, shape, gradient_checkpointing=True)[1]


def test_explicit_learner_settings_win_on_a_gpu():
    module = learner_module(max_tokens_per_micro_batch=512, gradient_checkpointing=False)
    assert sized(module, 0.45, free_bytes=80 * GIB) == ""
    assert module.micro_batch_tokens == 512 and not module.model.is_gradient_checkpointing
    unbounded = learner_module(max_tokens_per_micro_batch=None)
    sized(unbounded, 0.45, free_bytes=80 * GIB)
    assert unbounded.micro_batch_tokens is None


@pytest.mark.usefixtures("ray_session")
def test_a_cpu_run_keeps_the_fixed_defaults_bit_for_bit():
    algo = embedded_config("ppo", **SMALL).build_algo()
    try:
        module = algo.learner_group.local_learner.module["default_policy"]
        runner = algo.env_runner_group.local_env_runner
        assert (module.micro_batch_tokens, module.gradient_checkpointing) == (4096, False)
        assert runner.engine.max_tokens_per_batch == 32768
    finally:
        algo.stop()


@pytest.mark.parametrize("field, value, rule", [
    ("max_tokens_per_generate_batch", "big", r"must be an integer >= 1 \(or 'auto', or None\)"),
    ("max_tokens_per_micro_batch", 0, r"must be an integer >= 1 \(or 'auto', or None\)"),
    ("gradient_checkpointing", "yes", "must be True, False or 'auto'"),
    ("vllm_enforce_eager", None, "must be True, False or 'auto'"),
    ("torch_engine_cuda_graphs", "on", "must be True, False or 'auto'"),
    ("device_memory_share", 0.0, r"must be a number in \(0, 1\]"),
    ("device_memory_share", 1.5, r"must be a number in \(0, 1\]"),
])
def test_bad_values_name_field_value_and_rule(field, value, rule):
    config = RLVRConfig().environment("math_verify").training(**{field: value})
    with pytest.raises(ValueError, match=re.escape(f"RLVRConfig.{field}={value!r}")) as err:
        config.validate()
    assert err.match(rule)
