"""LoRA adapters on a Hugging Face causal LM (the peft library), and their merge.

The learner's policy is the base model with low-rank adapters injected into its linear layers
(W x + s · B A x, s = lora_alpha / lora_rank); only A and B train. Everything else sees plain
weights under the model's own names: env runners and exports get W + s · B A (`merged_weights`,
`merge_adapters`), and the reference policy is the same model with the adapters switched off
(`adapters_disabled`), so LoRA never holds a second copy of the base.

peft's names: an adapted layer `q_proj` holds `q_proj.base_layer.weight` (W, frozen) and
`q_proj.lora_A.default.weight` (A, rank x in), `q_proj.lora_B.default.weight` (B, out x rank).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

ADAPTER = "default"  # peft's adapter name
_A, _B, _BASE = f".lora_A.{ADAPTER}.weight", f".lora_B.{ADAPTER}.weight", ".base_layer."
INSTALL_HINT = "pip install 'rllib_llm[lora]' (the peft library)"


def add_adapters(model: torch.nn.Module, spec: dict[str, Any]) -> torch.nn.Module:
    """Inject LoRA adapters (spec: rank, alpha, target_modules) into `model` in place; only
    the adapters require grad afterwards. B starts at zero, so the policy is unchanged."""
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError as e:
        raise ImportError(f"lora_rank > 0 needs peft: {INSTALL_HINT}") from e
    config = LoraConfig(r=spec["rank"], lora_alpha=spec["alpha"],
                        target_modules=spec["target_modules"], lora_dropout=0.0)
    inject_adapter_in_model(config, model)
    for name, param in model.named_parameters():
        param.requires_grad_(".lora_" in name)
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"lora_target_modules={spec['target_modules']!r} matched no linear "
                         "layer of the model: nothing would train.")
    return model


def _lora_layers(model: torch.nn.Module) -> Iterator[tuple[str, Any]]:
    from peft.tuners.lora import LoraLayer

    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            yield name, module


def has_adapters(model: torch.nn.Module) -> bool:
    return any(True for _ in _lora_layers(model))


@contextlib.contextmanager
def adapters_disabled(model: torch.nn.Module):
    """The base model inside the block: every adapter is switched off, then back on."""
    layers = [layer for _, layer in _lora_layers(model)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield model
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def plain_name(name: str) -> str:
    """peft's name of a base weight -> the model's own (`q_proj.base_layer.weight` ->
    `q_proj.weight`)."""
    return name.replace(_BASE, ".")


def merged_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict under its own names, each adapted weight W + s · B A (new
    tensors; the others alias the parameters, as `state_dict` does)."""
    state = {plain_name(k): v for k, v in model.state_dict().items() if ".lora_" not in k}
    with torch.no_grad():
        for name, layer in _lora_layers(model):
            key = f"{name}.weight"
            state[key] = state[key] + layer.get_delta_weight(ADAPTER).to(state[key].dtype)
    return state


def adapter_weights(state: dict[str, Any]) -> dict[str, Any]:
    """The adapters' entries of a state dict."""
    return {k: v for k, v in state.items() if ".lora_" in k}


def merge_adapters(base: dict[str, torch.Tensor], adapters: dict[str, Any], *,
                   scaling: float) -> dict[str, torch.Tensor]:
    """W + scaling · B A for every adapted layer of `adapters` (peft names), keyed by the
    plain weight name of `base` it replaces. Pure: `base` is not changed."""
    merged = {}
    for key_a in (k for k in adapters if k.endswith(_A)):
        prefix = key_a[: -len(_A)]
        weight = base[f"{prefix}.weight"]
        a = torch.as_tensor(adapters[key_a]).to(torch.float32)
        b = torch.as_tensor(adapters[prefix + _B]).to(torch.float32)
        merged[f"{prefix}.weight"] = (weight.to(torch.float32) + scaling * (b @ a)).to(
            weight.dtype)
    return merged


def merged_state(state: dict[str, Any], *, scaling: float) -> dict[str, torch.Tensor]:
    """A state dict under peft's names (base weights and adapters, as a sharded learner gathers
    them) under the model's own names, each adapted weight W + scaling · B A. Pure."""
    adapters = adapter_weights(state)
    base = {plain_name(k): v for k, v in state.items() if k not in adapters}
    return base | merge_adapters(base, adapters, scaling=scaling)
