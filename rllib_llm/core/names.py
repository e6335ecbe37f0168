"""One lookup of the valid names of every name-valued option, for config validation.

Reads the registries at call time, so names users registered count; the built-in names are the
``Literal`` tuples (``PG_VARIANTS``, ``AGG_MODES``, ...).
"""

from __future__ import annotations

from typing import Literal

from rllib_llm.core.advantages import GROUP_ESTIMATOR_REGISTRY
from rllib_llm.core.aggregation import AGG_MODES
from rllib_llm.core.kl import KL_ESTIMATOR_REGISTRY
from rllib_llm.core.normalisation import NORM_TYPES
from rllib_llm.core.pipeline import ADV_ESTIMATOR_REGISTRY
from rllib_llm.core.policy_losses import PG_VARIANT_REGISTRY

NameKind = Literal[
    "pg_variant", "loss_agg_mode", "kl_kind", "adv_estimator", "group_estimator", "norm_type"
]

_LOOKUPS = {
    "pg_variant": PG_VARIANT_REGISTRY.names,
    "loss_agg_mode": lambda: AGG_MODES,
    # kl_loss_kind and kl_penalty: the per-token estimators (kl_estimate). "full" is not listed:
    # it needs logits, see kl_full.
    "kl_kind": KL_ESTIMATOR_REGISTRY.names,
    "adv_estimator": ADV_ESTIMATOR_REGISTRY.names,
    "group_estimator": GROUP_ESTIMATOR_REGISTRY.names,
    "norm_type": lambda: tuple(t for t in NORM_TYPES if t is not None),
}


def registered_names(kind: NameKind) -> tuple[str, ...]:
    """The names currently valid for option ``kind`` (e.g. ``registered_names("pg_variant")``)."""
    if kind not in _LOOKUPS:
        raise ValueError(
            f"kind={kind!r} is not a name-valued option; valid kinds: "
            f"{', '.join(map(repr, _LOOKUPS))}."
        )
    return tuple(_LOOKUPS[kind]())
