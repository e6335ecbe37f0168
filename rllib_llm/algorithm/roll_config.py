"""Load a ROLL config (alibaba/ROLL's `roll.pipeline.rlvr.rlvr_config.RLVRConfig` YAML) as
RLVRConfig settings, reporting every field it cannot map and why.

    roll = load_roll_config("examples/roll_ppo.yaml")   # a path, a YAML string or a dict
    print(roll.report())                                # what was mapped, what was not
    config = roll.to_rlvr_config(response_length=6)     # overrides on top, any training field

The mapping follows ROLL's code (alibaba/ROLL at ROLL_COMMIT; `reward_norm` / `reward_shift` /
`reward_scale` as ROLL applied them before commit 7b97eef replaced them), not only its names:

- A field the file leaves out takes ROLL's default (ROLL_DEFAULTS), not ours: ROLL neither
  whitens nor clips advantages nor adds a KL loss unless told to, and samples one response per
  prompt for its default estimator, GAE.
- `reward_norm` / `reward_shift` / `reward_scale` become `norm_mean_type` / `norm_std_type`
  (`roll_reward_norm`); `adv_estimator: grpo` normalises by group whatever they say, in ROLL
  and in our `grpo` estimator alike, so they are dropped there (and reported).
- `dual_clip_loss` bounds the loss of A < 0 by (1 + 2 pg_clip)·|A| in ROLL: `dual_clip_c` is set
  to that (ours defaults to the paper's 3).
- `pg_clip_low` / `pg_clip_high` count only with `use_pg_clip_range: true`, as in ROLL.
- ROLL's KL loss is always the k3 estimator: our `kl_loss_kind` default.
- `positive_loss_coef` (ROLL's dataclass: `postive_loss_coef`) and `use_topr_neg_loss_coef` are
  the TOPR terms of ROLL's rlvr actor_worker from commit 46b75d6 to v0.2.0 (3077bef), which
  dropped them; ROLL_COMMIT still declares both fields but reads neither.
- `reward_clip` clamps ROLL's rewards after normalisation and again after the KL-in-reward; ours
  clamps the raw scores, so the loader refuses it together with either.

A value our field's rule rejects (a documentation placeholder such as `x_1`, a string for a
number) fails with a ValueError naming the ROLL field and the value; `strict=True` makes any
unmapped field an error too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rllib_llm.algorithm.fields import ALIASES, FIELDS_BY_NAME, boolean, positive, rule_broken
from rllib_llm.algorithm.yaml_loader import parse_yaml

# The ROLL source this mapping was read from (its defaults, its loss and reward code).
ROLL_COMMIT = "8eb27cc2dc34c4d1310b169d9b86d339004d811a"

# ROLL's defaults (PPOConfig / RLVRConfig at ROLL_COMMIT) of the settings this loader maps, under
# our names. ROLL's default response_length is None (derived from sequence_length): ours stays.
ROLL_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "rollout_batch_size": 128, "prompt_length": 1024, "num_return_sequences_in_group": 1,
    "adv_estimator": "gae", "pg_variant": "ppo", "ppo_epochs": 1, "lambd": 0.95, "gamma": 1.0,
    "pg_clip": 0.2, "dual_clip_loss": False, "value_clip": None, "loss_agg_mode":
    "seq-mean-token-mean", "use_kl_loss": False, "kl_loss_coef": 0.0, "kl_penalty": "kl",
    "add_token_level_kl": False, "init_kl_coef": 0.2, "target_kl": None, "kl_horizon": 10000,
    "reward_clip": None, "norm_mean_type": None, "norm_std_type": None,
    "whiten_advantages": False, "advantage_clip": None, "entropy_coef": 0.0,
    "rl_loss_coef": 1.0, "positive_loss_coef": 0.0, "use_topr_neg_loss_coef": 0.0,
    "grad_clip": 1.0,
})

# ROLL names of ours under another name (ALIASES hold the rest: max_new_tokens, postive_loss_coef).
RENAMED: Mapping[str, str] = MappingProxyType({
    "pretrain": "model_name_or_path",
    "entropy_loss_coef": "entropy_coef",  # ROLL subtracts it times the entropy: a bonus, as ours
    "max_grad_norm": "grad_clip",  # RLlib's global-norm clip, RLVRConfig's default 1.0 as ROLL's
    # actor_train.training_args' learning rate, where a file gives it at the top level (ROLL's
    # off-policy guide, flattened); nested in actor_train it is reported with the role
    "learning_rate": "lr",
})
# RLlib settings a ROLL field maps onto (not in fields.py), with their rule.
RLLIB_RULES = MappingProxyType({"grad_clip": positive, "lr": positive})

# ROLL fields read together by the helpers below, not one by one.
REWARD_NORM_KEYS = ("reward_norm", "reward_shift", "reward_scale")
CLIP_RANGE_KEYS = ("use_pg_clip_range", "pg_clip_low", "pg_clip_high")
COMBINED_KEYS = REWARD_NORM_KEYS + CLIP_RANGE_KEYS

# ROLL fields rllib_llm does not model, by why.
_ROLES = ("actor_train", "actor_infer", "critic", "reference", "reward", "rewards",
          "reward_model", "validation", "teacher", "student_train", "student_infer")
_PLACEMENT = ("num_gpus_per_node", "num_nodes", "device_mapping", "strategy_args", "local_rank",
              "rpc_timeout", "max_running_requests",
              "is_offload_states", "is_offload_optimizer_states_in_train_step",
              "model_update_buffer_size_mb", "transfer_backend", "router_args",
              "generate_opt_level", "is_num_return_sequences_expand", "model_download_type")
_RUN = ("hydra", "defaults", "exp_name", "seed", "logging_dir", "output_dir", "base_dir",
        "system_envs", "checkpoint_config", "track_with", "tracker_kwargs", "max_steps",
        "save_steps", "logging_steps", "eval_steps", "resume_from_checkpoint",
        "max_ckpt_to_keep", "save_logging_board_dir", "val_batch_size", "val_prompt_length",
        "val_sequence_length", "sequence_length", "profiler_timeline", "profiler_memory",
        "report_length_and_rewards", "rollout_dump_dir", "rollout_mock")
_NOT_IMPLEMENTED = ("critic_warmup", "importance_sampling", "use_policy_loss_type",
                    "use_topr_loss", "difficulty_loss_weight", "length_loss_weight",
                    "whiten_rewards", "use_reward_scaling", "use_reward_norm", "add_len_reward",
                    "l2", "max_len_mask", "mask_type", "difficulty_mask", "balance_length",
                    "minibatch_data_iter_num", "difficulty_low_threshold",
                    "difficulty_high_threshold", "error_max_len_clip", "error_max_len_threshold",
                    "dataset_filter", "global_template", "tag_to_template", "val_greedy",
                    "val_n_sample", "train_infer_correction", "enable_reference",
                    "enable_old_logprobs_recompute", "force_disable_old_logprobs_recompute")
UNMODELLED_REASONS: Mapping[str, str] = MappingProxyType({
    **dict.fromkeys(_ROLES, "a ROLL worker role (model_args, training_args with its learning "
                            "rate, strategy_args, device_mapping, generating_args): "
                            "infrastructure rllib_llm does not model; set model_name_or_path, "
                            "lr, temperature and top_p on RLVRConfig, placement with .learners() "
                            "and .env_runners()"),
    **dict.fromkeys(_PLACEMENT, "GPU and cluster placement rllib_llm does not model (Ray and "
                                "RLlib place the learner and env runners)"),
    **dict.fromkeys(_RUN, "run management (names, logging, checkpoints, step counts, seed, "
                          "validation sizes): the caller's training loop and "
                          ".debugging(seed=...) do this"),
    **dict.fromkeys(_NOT_IMPLEMENTED, "a ROLL training option rllib_llm does not implement"),
    "critic_warmup": "ROLL trains the critic alone on its GAE targets for this many steps; "
                     "rllib_llm's value_pretrain_steps trains it on Monte-Carlo returns instead, "
                     "so set that yourself if you want it",
})
UNKNOWN_REASON = ("unknown to rllib_llm: neither one of its settings nor a ROLL field this "
                  "loader knows")
_PLACEHOLDER = re.compile(r"x_?\d+")  # ROLL's documentation writes x_1, x_2 for "choose one"


@dataclass(frozen=True)
class Mapped:
    """ROLL field(s) and the settings they became; `note` says where ROLL's meaning bends them."""

    roll: dict[str, Any]
    ours: dict[str, Any]
    note: str = ""


@dataclass(frozen=True)
class Unmapped:
    name: str
    value: Any
    reason: str


@dataclass(frozen=True)
class RollConfig:
    """A ROLL config read as RLVRConfig training settings.

    settings: every setting, under our names (the file's mapped fields and ROLL's defaults).
    mapped: what the file set and what it became; defaults: ROLL's defaults the file left out;
    unmapped: the file's fields that set nothing here, each with the reason.
    """

    settings: dict[str, Any]
    mapped: tuple[Mapped, ...]
    defaults: dict[str, Any]
    unmapped: tuple[Unmapped, ...]
    derived: tuple[str, ...] = ()  # settings derived from others (dual_clip_c from pg_clip)

    def to_rlvr_config(self, **overrides: Any):
        """An RLVRConfig with these settings, then `overrides` (any training field, or alias) on
        top; a derived setting the overrides leave alone is derived again from the final values
        (dual_clip_c = 1 + 2 pg_clip with an overridden pg_clip)."""
        from rllib_llm.algorithm.config import RLVRConfig

        overrides = {ALIASES.get(k, k): v for k, v in overrides.items()}
        settings = {**self.settings, **overrides}
        for name in self.derived:
            if name not in overrides:
                del settings[name]
        derived = _dual_clip_c(settings, overrides) if "dual_clip_c" in self.derived else None
        if derived:
            settings.update(derived.ours)
        return RLVRConfig().training(**settings)

    def source_of(self, name: str) -> str | None:
        """The field(s) of the file (or its overrides) that set our setting `name` (None: ROLL's
        default, or nothing)."""
        for m in self.mapped:
            if name in m.ours:
                return ", ".join(m.roll)
        return None

    def report(self) -> str:
        """What was mapped onto what, ROLL's defaults used, and every field not mapped, why."""
        lines = ["ROLL config: mapped"]
        for m in self.mapped:
            note = f"  ({m.note})" if m.note else ""
            arrow = "" if m.roll == m.ours else f" -> {_pairs(m.ours) or 'nothing'}"
            lines.append(f"  {_pairs(m.roll)}{arrow}{note}")
        if self.defaults:
            lines.append("ROLL's defaults for what the file leaves out")
            lines.append(f"  {_pairs(self.defaults)}")
        lines.append(f"not mapped ({len(self.unmapped)})" if self.unmapped else "not mapped: none")
        lines += [f"  {u.name}: {u.reason}" for u in self.unmapped]
        return "\n".join(lines)


def _pairs(d: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in d.items())


def load_roll_config(source: str | Path | Mapping[str, Any], *, strict: bool = False,
                     overrides: Mapping[str, Any] | None = None) -> RollConfig:
    """Read a ROLL RLVR config (a YAML path, a YAML string or a dict) as our settings.

    overrides: ROLL fields (or our names) that replace the file's before anything is checked or
    derived (the CLI's --set): a placeholder such as `x_1` can be filled this way, and
    dual_clip_c follows an overridden pg_clip. One replaces the file's field of the same setting
    under another name too (max_new_tokens replaces response_length). Reported as overrides.

    Raises ValueError naming the field and the value for a value our rule rejects (a placeholder
    such as `x_1`), for two fields that set one setting, for a combination ROLL means otherwise
    than we could run it, and, with strict=True, for any field it cannot map.
    """
    data = read_roll_source(source)
    overrides = dict(overrides or {})
    if overrides:
        replaced = {roll_setting(k) for k in overrides}
        data = {k: v for k, v in data.items() if roll_setting(k) not in replaced}
        data.update(overrides)
    single = {k: v for k, v in data.items() if k not in COMBINED_KEYS}
    mapped = [_map_field(key, value) for key, value in single.items() if _our_name(key)]
    mapped += _combined_fields(data, _file_estimator(data))
    mapped = [replace(m, note="; ".join(filter(None, ["an override of the file", m.note])))
              if overrides.keys() & m.roll.keys() else m for m in mapped]
    unmapped = tuple(Unmapped(k, v, unmapped_reason(k)) for k, v in single.items()
                     if not _our_name(k))
    if strict and unmapped:
        raise ValueError("load_roll_config(strict=True): fields not mapped: " + "; ".join(
            f"{u.name} ({u.reason})" for u in unmapped) + ". Remove them or use strict=False.")
    from_file = _merge([m.ours for m in mapped])
    defaults = {k: v for k, v in ROLL_DEFAULTS.items() if k not in from_file}
    settings = {**defaults, **from_file}
    derived = _dual_clip_c(settings, from_file)
    if derived:
        settings.update(derived.ours)
        mapped.append(derived)
    _check_reward_clip(settings)
    return RollConfig(settings, tuple(mapped), defaults, unmapped,
                      tuple(derived.ours) if derived else ())


def read_roll_source(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """The config as a dict: `source` itself, a YAML file's contents, or a YAML string parsed
    (`yaml_loader`: `1e-6` is a number, a key given twice an error)."""
    if isinstance(source, Mapping):
        return dict(source)
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and (
            source.endswith((".yaml", ".yml")) or Path(source).is_file())):
        source = Path(source).read_text()
    data = parse_yaml(source)
    if not isinstance(data, dict):
        raise ValueError(f"a ROLL config must be a YAML mapping of field: value, got "
                         f"{type(data).__name__}: {data!r:.80}")
    return data


def is_roll_field(key: str) -> bool:
    """Whether the loader reads ROLL field `key` (on its own or with the fields it goes with)."""
    return _our_name(key) is not None or key in COMBINED_KEYS


def roll_setting(key: str) -> str:
    """What ROLL field `key` sets: our setting's name, or the field itself for the ones read
    together (reward_norm, ...) and the ones not mapped."""
    return _our_name(key) or key


def _our_name(key: str) -> str | None:
    """Our setting for ROLL field `key`, if it maps one to one."""
    if key in RENAMED:
        return RENAMED[key]
    if key in ALIASES:
        return ALIASES[key]
    return key if key in FIELDS_BY_NAME else None


def unmapped_reason(key: str) -> str:
    """Why ROLL field `key` sets nothing here."""
    return UNMODELLED_REASONS.get(key, UNKNOWN_REASON)


def _map_field(key: str, value: Any) -> Mapped:
    ours = _our_name(key)
    check_roll_value(key, ours, value)
    return Mapped({key: value}, {ours: value})


def check_roll_value(key: str, ours: str, value: Any) -> None:
    """Raise ValueError naming ROLL's field and the value when our setting's rule rejects it."""
    why = RLLIB_RULES[ours](value) if ours in RLLIB_RULES else rule_broken(ours, value)
    if why is None:
        return
    where = "" if key == ours else f" (RLVRConfig.{ours})"
    hint = (f" It is a placeholder of ROLL's documentation: replace it with a value (in the "
            f"file, or with rllib-llm train's --set {key}=VALUE)."
            if isinstance(value, str) and _PLACEHOLDER.fullmatch(value) else "")
    raise ValueError(f"ROLL config field {key}={value!r}{where} is invalid: it {why}.{hint}")


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One dict of settings; two ROLL fields setting one of ours (an alias and its name) fail."""
    merged: dict[str, Any] = {}
    for part in parts:
        for name, value in part.items():
            if name in merged:
                raise ValueError(f"ROLL config: two fields set RLVRConfig.{name} ({merged[name]!r}"
                                 f" and {value!r}); keep one.")
            merged[name] = value
    return merged


def _file_estimator(data: Mapping[str, Any]) -> str:
    return data.get("adv_estimator", ROLL_DEFAULTS["adv_estimator"])


def _combined_fields(data: Mapping[str, Any], estimator: str) -> list[Mapped]:
    """The fields ROLL reads together: reward normalisation and the clip range."""
    out = []
    norm = {k: data[k] for k in REWARD_NORM_KEYS if k in data}
    if norm:
        if "norm_mean_type" in data or "norm_std_type" in data:
            raise ValueError(f"ROLL config: {_pairs(norm)} and norm_mean_type/norm_std_type both "
                             "set reward normalisation (ROLL replaced the first by the second); "
                             "keep one.")
        out.append(_map_reward_norm(norm, estimator))
    elif estimator == "grpo" and any(data.get(k) for k in ("norm_mean_type", "norm_std_type")):
        raise ValueError(
            f"ROLL config: adv_estimator='grpo' with norm_mean_type="
            f"{data.get('norm_mean_type')!r}, norm_std_type={data.get('norm_std_type')!r}: ROLL's "
            "grpo overrides them with group normalisation, which rllib_llm's grpo estimator does "
            "itself. Remove them (or set them to ~).")
    clip_range = {k: data[k] for k in CLIP_RANGE_KEYS if k in data}
    if clip_range:
        out.append(_map_clip_range(clip_range))
    return out


def roll_reward_norm(reward_norm: str | None, reward_shift: bool = False,
                     reward_scale: bool = False) -> tuple[str | None, str | None]:
    """(norm_mean_type, norm_std_type) of ROLL's reward_norm / reward_shift / reward_scale, as
    ROLL's reward_postprocess applied them: 'group' and 'batch' subtract the mean and divide by
    the std, the mean only with reward_shift (reward_scale is ignored there); 'running' does
    both, the mean only with reward_shift, else the std only with reward_scale; None neither."""
    if reward_norm is None:
        return None, None
    if reward_norm in ("group", "batch"):
        return reward_norm, None if reward_shift else reward_norm
    if reward_norm == "running":
        if reward_shift:
            return "running", None
        return (None, "running") if reward_scale else ("running", "running")
    raise ValueError(f"ROLL config field reward_norm={reward_norm!r} is invalid: it must be one "
                     "of 'group', 'batch', 'running' or null.")


def _map_reward_norm(norm: dict[str, Any], estimator: str) -> Mapped:
    for flag in ("reward_shift", "reward_scale"):
        if flag in norm and boolean(norm[flag]) is not None:
            raise ValueError(f"ROLL config field {flag}={norm[flag]!r} is invalid: it must be "
                             "true or false.")
    kind, shift, scale = (norm.get(k) for k in REWARD_NORM_KEYS)
    mean_type, std_type = roll_reward_norm(kind, bool(shift), bool(scale))
    note = _ignored_flags(kind, bool(shift), bool(scale))
    if estimator != "grpo":
        return Mapped(norm, {"norm_mean_type": mean_type, "norm_std_type": std_type}, note)
    if shift:
        raise ValueError(
            f"ROLL config: adv_estimator='grpo' with reward_shift={shift!r} subtracts the group "
            "mean only, which rllib_llm's grpo estimator (mean and std) does not do; drop "
            "reward_shift and load with adv_estimator='reinforce_baseline' (score minus the "
            "group mean) instead, or drop reward_shift for GRPO's normalisation.")
    return Mapped(norm, {}, "ROLL's grpo normalises by group itself, as rllib_llm's grpo "
                            "estimator does: nothing to set")


def _ignored_flags(kind: str | None, shift: bool, scale: bool) -> str:
    """Which of reward_shift / reward_scale ROLL ignores with this reward_norm, said."""
    if kind is None and (shift or scale):
        return "ROLL ignores reward_shift and reward_scale without reward_norm"
    if scale and (kind != "running" or shift):
        return f"ROLL ignores reward_scale with reward_norm={kind!r}" + (
            " and reward_shift" if kind == "running" else "")
    return ""


def _map_clip_range(clip_range: dict[str, Any]) -> Mapped:
    use = clip_range.get("use_pg_clip_range", False)
    if boolean(use) is not None:
        raise ValueError(f"ROLL config field use_pg_clip_range={use!r} is invalid: it must be "
                         "true or false.")
    bounds = {k: clip_range[k] for k in ("pg_clip_low", "pg_clip_high") if k in clip_range}
    if not use:
        return Mapped(clip_range, {}, "ROLL uses pg_clip_low/high only with use_pg_clip_range: "
                                      "true" if bounds else "")
    bounds = {"pg_clip_low": 0.2, "pg_clip_high": 0.2, **bounds}  # ROLL's defaults
    for key, value in bounds.items():
        check_roll_value(key, key, value)
    return Mapped(clip_range, bounds)


def _dual_clip_c(settings: Mapping[str, Any], from_file: Mapping[str, Any]) -> Mapped | None:
    """ROLL's dual clip bounds A < 0 by (1 + 2 pg_clip)·|A|: dual_clip_c says so here."""
    if not settings["dual_clip_loss"] or "dual_clip_c" in from_file:
        return None
    return Mapped({"dual_clip_loss": True, "pg_clip": settings["pg_clip"]},
                  {"dual_clip_c": 1 + 2 * settings["pg_clip"]},
                  "ROLL's dual-clip constant is 1 + 2 * pg_clip")


def _check_reward_clip(settings: Mapping[str, Any]) -> None:
    """ROLL clamps rewards after normalising them and after the KL-in-reward; we clamp the raw
    scores. The same only when neither is on."""
    if settings["reward_clip"] is None:
        return
    others = {k: settings[k] for k in ("norm_mean_type", "norm_std_type", "add_token_level_kl")
              if settings[k]}
    if settings["adv_estimator"] == "grpo":
        others["adv_estimator"] = "grpo"
    if others:
        raise ValueError(
            f"ROLL config: reward_clip={settings['reward_clip']!r} with {_pairs(others)}: ROLL "
            "clamps the rewards after normalisation and after the KL-in-reward, rllib_llm clamps "
            "the raw scores before them, so they would differ. Set reward_clip: ~ (or drop the "
            "normalisation / add_token_level_kl).")
