"""What `RLVRModule` is built from: one frozen, typed value instead of a dict of string keys.

`RLVRConfig.get_default_rl_module_spec` builds it once from the config's settings. RLlib carries
an RLModule's `model_config` as a dict (it turns a dataclass into one and merges keys of its own
in), so the module reads it back with `ModuleSettings.of`, once, in `setup`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CriticSpec:
    """The critic of adv_estimator='gae'.

    Attributes:
        model_name_or_path: the value model's trunk (`critic_model_name_or_path`, else the
            policy's).
        shares_trunk: a value head on the policy's own trunk instead of a separate model.
    """

    model_name_or_path: str
    shares_trunk: bool = False


@dataclass(frozen=True)
class ModuleSettings:
    """The module's settings (each named after, and documented at, its config field).

    Attributes:
        model_name_or_path: the causal LM (`model_name_or_path`).
        model_dtype: its parameters' dtype (`model_dtype`).
        temperature: logits are divided by it before log-probs (`temperature`).
        use_reference: learners hold a frozen reference model (a KL term needs it).
        entropy_grad: the entropy needs a gradient (entropy_coef > 0).
        micro_batch_tokens: the learner's micro-batch token budget, which every scoring pass
            keeps (`max_tokens_per_micro_batch`; None: no bound; "auto": sized for the device).
        micro_batch_rows: the most rows per micro-batch (`micro_batch_size`; None: no bound).
        gradient_checkpointing: True, False or "auto" (`gradient_checkpointing`).
        fused_kernels: log-probs from the last hidden states and the LM head, chunk by chunk
            (`use_fused_kernels`).
        remove_padding: forward passes over real tokens only (`use_remove_padding`).
        attn_implementation: transformers' attention for the models learners load.
        autocast_dtype: None, "auto" or the dtype learners' passes autocast to.
        critic: the critic, or None for a critic-free estimator.
        lora: LoRA's adapters ({"rank", "alpha", "target_modules"}: models/lora.py), or None.
        teacher: the distillation teacher's model (`teacher_model_name_or_path`), or None.
    """

    model_name_or_path: str
    model_dtype: str
    temperature: float
    use_reference: bool = False
    entropy_grad: bool = True
    micro_batch_tokens: int | str | None = None
    micro_batch_rows: int | None = None
    gradient_checkpointing: bool | str = False
    fused_kernels: bool = False
    remove_padding: bool = False
    attn_implementation: str | None = None
    autocast_dtype: str | None = None
    critic: CriticSpec | None = None
    lora: Mapping[str, Any] | None = None
    teacher: str | None = None

    @classmethod
    def of(cls, model_config: ModuleSettings | Mapping[str, Any]) -> ModuleSettings:
        """The settings an RLModule was given: these, or the dict RLlib made of them (its own
        keys left out; a missing one takes its default)."""
        if isinstance(model_config, ModuleSettings):
            return model_config
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in model_config.items() if k in names}
        if isinstance(values.get("critic"), Mapping):
            values["critic"] = CriticSpec(**values["critic"])
        return cls(**values)
