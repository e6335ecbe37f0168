"""One lookup of the valid names of every name-valued option, for config validation, and the
user registrations that must travel to the other processes of a run.

Reads the registries at call time, so names users registered count; the built-in names are the
``Literal`` tuples (``PG_VARIANTS``, ``AGG_MODES``, ...).

Ray's learners and env runners are separate processes that import rllib_llm afresh: they know
the built-ins but not what a user registered in the driver. ``user_registrations()`` gathers those
entries (the config captures them when it is validated and travels with them), and
``restore_registrations`` files them in the process that receives the config.
"""

from __future__ import annotations

from typing import Any, Literal

from rllib_llm.core.advantages import GROUP_ESTIMATOR_REGISTRY
from rllib_llm.core.aggregation import AGG_MODES
from rllib_llm.core.kl import KL_ESTIMATOR_REGISTRY
from rllib_llm.core.normalisation import NORM_TYPES
from rllib_llm.core.pipeline import ADV_ESTIMATOR_REGISTRY
from rllib_llm.core.policy_losses import PG_VARIANT_REGISTRY
from rllib_llm.core.registry import Registry

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

# The registries users add to, by kind. Importing this module has run every module above, and
# with them every built-in registration, so what is registered now is built-in.
REGISTRIES: dict[str, Registry] = {
    "pg_variant": PG_VARIANT_REGISTRY,
    "kl_kind": KL_ESTIMATOR_REGISTRY,
    "adv_estimator": ADV_ESTIMATOR_REGISTRY,
    "group_estimator": GROUP_ESTIMATOR_REGISTRY,
}
for _registry in REGISTRIES.values():
    _registry.mark_builtins()

# {kind: {name: (function, info)}}: what users registered, in a form Ray pickles with a config.
Registrations = dict[str, dict[str, tuple[Any, Any]]]


def registered_names(kind: NameKind) -> tuple[str, ...]:
    """The names currently valid for option ``kind`` (e.g. ``registered_names("pg_variant")``)."""
    if kind not in _LOOKUPS:
        raise ValueError(
            f"kind={kind!r} is not a name-valued option; valid kinds: "
            f"{', '.join(map(repr, _LOOKUPS))}."
        )
    return tuple(_LOOKUPS[kind]())


def user_registrations() -> Registrations:
    """Every entry users registered (or overrode) in this process, by kind; kinds without any
    are left out."""
    found = {kind: registry.user_entries() for kind, registry in REGISTRIES.items()}
    return {kind: entries for kind, entries in found.items() if entries}


def restore_registrations(registrations: Registrations) -> None:
    """File ``registrations`` (``user_registrations()`` of another process) in this one; what
    users registered in this process stays (``Registry.restore``).

    The functions arrive as Ray pickled them: one defined in a script (``__main__``) or inside a
    function by value, one from a module by reference, so that module must be importable in
    every process (install it, or ship it with Ray's ``runtime_env``).
    """
    for kind, entries in registrations.items():
        if kind not in REGISTRIES:
            raise ValueError(
                f"registrations of kind={kind!r} cannot be restored; valid kinds: "
                f"{', '.join(map(repr, REGISTRIES))}."
            )
        REGISTRIES[kind].restore(entries)
