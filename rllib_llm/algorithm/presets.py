"""Named algorithm presets: the settings a paper or ROLL's documentation gives, by name.

    config = RLVRConfig.preset("vapo").training(lr=1e-6, critic_lr=2e-6)
    config = RLVRConfig.preset("grpo", num_return_sequences_in_group=16)   # any field overridden

A preset sets the *algorithm* (estimator, loss, clipping, KL, critic) and nothing that depends on
the model or the hardware: learning rates, batch sizes and lengths stay the user's (their paper
values are quoted in each preset's doc). What a paper describes and rllib_llm does not implement
is said in its doc, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class Preset:
    name: str
    source: str  # the paper or document the values come from
    doc: str  # what it is, paper values it leaves to the user, what it leaves out
    settings: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))


def _preset(name: str, source: str, doc: str, **settings: Any) -> Preset:
    return Preset(name, source, doc, MappingProxyType(settings))


# ROLL's documented PPO config (roll.pipeline.rlvr.rlvr_config.RLVRConfig, "PPO" page), the
# algorithm part of it: rollout_batch_size 512, prompt_length 2048 and response_length 4096 are
# sizes. ROLL's reward_norm null / reward_shift false / reward_scale false = no normalisation.
_PPO = dict(
    adv_estimator="gae", num_return_sequences_in_group=1, ppo_epochs=1, pg_variant="ppo",
    use_kl_loss=True, kl_loss_coef=0.001, loss_agg_mode="seq-mean-token-sum",
    whiten_advantages=True, advantage_clip=2.0, reward_clip=None, dual_clip_loss=True,
    dual_clip_c=1.4,  # ROLL's constant, 1 + 2 * pg_clip (our default follows the paper's 3)
    lambd=0.95, gamma=1.0, pg_clip=0.2, value_clip=None, kl_penalty="kl", target_kl=None,
    init_kl_coef=0.2, kl_horizon=10000, add_token_level_kl=False, norm_mean_type=None,
    norm_std_type=None,
)

PRESETS: dict[str, Preset] = {p.name: p for p in (
    _preset(
        "ppo", "ROLL documentation, PPO (RLVRConfig 'ppo related' block)",
        "PPO with a critic: GAE (lambda 0.95, gamma 1), clip 0.2 with dual clip, KL loss 0.001, "
        "whitened advantages clipped to 2, one response per prompt, seq-mean-token-sum. ROLL's "
        "sizes (512 prompts, 2048 + 4096 tokens) are left to you.",
        **_PPO,
    ),
    _preset(
        "vc_ppo", "VC-PPO, Yuan et al. 2025, arXiv:2503.01491",
        "Value-calibrated PPO: ROLL's PPO plus value pretraining (the critic alone on "
        "Monte-Carlo returns of the initial policy; 50 iterations, VAPO's count) and decoupled "
        "GAE (critic lambda 1.0, actor 0.95).",
        **_PPO, value_pretrain_steps=50, critic_lambd=1.0,
    ),
    _preset(
        "vapo", "VAPO, Yue et al. 2025, arXiv:2504.05118",
        "VC-PPO's value pretraining and decoupled GAE, plus length-adaptive GAE (alpha 0.05), "
        "clip-higher (0.2 / 0.28), token-level loss (token-mean), the positive-example NLL "
        "(weight 0.1) and group sampling (16 responses per prompt); no KL. The paper trains the "
        "critic at 2e-6 and the actor at 1e-6 (Qwen2.5-32B; set lr and critic_lr), starts the "
        "critic from a reward model (critic_model_name_or_path) and uses 512 prompts per batch.",
        adv_estimator="gae", num_return_sequences_in_group=16, pg_variant="ppo", lambd=0.95,
        gamma=1.0, critic_lambd=1.0, length_adaptive_alpha=0.05, value_pretrain_steps=50,
        pg_clip=0.2, pg_clip_low=0.2, pg_clip_high=0.28, loss_agg_mode="token-mean",
        positive_nll_coef=0.1, use_kl_loss=False, whiten_advantages=True, advantage_clip=None,
    ),
    _preset(
        "grpo", "GRPO, Shao et al. 2024 (DeepSeekMath), arXiv:2402.03300",
        "Group-normalised advantages (score - group mean) / group std, PPO's clip 0.2, a k3 KL "
        "loss (0.001 as ROLL's GRPO recipes; the paper used 0.04), seq-mean-token-mean, 8 "
        "responses per prompt (the paper: 64).",
        adv_estimator="grpo", num_return_sequences_in_group=8, pg_variant="ppo", pg_clip=0.2,
        use_kl_loss=True, kl_loss_coef=0.001, kl_loss_kind="k3",
        loss_agg_mode="seq-mean-token-mean", whiten_advantages=False, advantage_clip=None,
    ),
    _preset(
        "dr_grpo", "Dr. GRPO, Liu et al. 2025, arXiv:2503.20783",
        "GRPO done right: score - group mean without the std division, and a sum over tokens "
        "divided by a constant (seq-mean-token-sum-norm) instead of by each response's length; "
        "no KL.",
        adv_estimator="reinforce_baseline", num_return_sequences_in_group=8, pg_variant="ppo",
        pg_clip=0.2, use_kl_loss=False, loss_agg_mode="seq-mean-token-sum-norm",
        whiten_advantages=False, advantage_clip=None,
    ),
    _preset(
        "dapo", "DAPO, Yu et al. 2025, arXiv:2503.14476",
        "GRPO advantages with clip-higher (0.2 / 0.28), token-level loss and no KL, 16 responses "
        "per prompt, dynamic sampling (batches refilled with groups whose answers differ, up to "
        "4 rounds), and the soft overlong punishment over the last fifth of response_length "
        "(overlong_buffer_len='auto': the paper's 4,096 of 20,480 tokens, factor 1). Its "
        "overlong filtering, the alternative it ablates, is mask_truncated_completions.",
        adv_estimator="grpo", num_return_sequences_in_group=16, pg_variant="ppo",
        pg_clip_low=0.2, pg_clip_high=0.28, use_kl_loss=False, loss_agg_mode="token-mean",
        whiten_advantages=False, advantage_clip=None, dynamic_sampling=True,
        overlong_buffer_len="auto",
    ),
    _preset(
        "rloo", "RLOO, Ahmadian et al. 2024, arXiv:2402.14740",
        "REINFORCE Leave-One-Out: score minus the mean of the other responses to the prompt, 4 "
        "per prompt, the KL to the reference charged in the reward (beta 0.05, TRL's RLOO "
        "default) instead of a KL loss.",
        adv_estimator="rloo", num_return_sequences_in_group=4, pg_variant="ppo",
        use_kl_loss=False, add_token_level_kl=True, init_kl_coef=0.05, kl_penalty="kl",
        whiten_advantages=False, advantage_clip=None,
    ),
    _preset(
        "reinforce_pp", "REINFORCE++, Hu 2025, arXiv:2501.03262",
        "REINFORCE with the KL to the reference in each token's reward (beta 0.01), advantages "
        "whitened over the whole batch (the global baseline), PPO's clip 0.2; one response per "
        "prompt works.",
        adv_estimator="reinforce", pg_variant="ppo", pg_clip=0.2, use_kl_loss=False,
        add_token_level_kl=True, init_kl_coef=0.01, kl_penalty="kl", whiten_advantages=True,
        advantage_clip=None,
    ),
    _preset(
        "topr", "TOPR, Le Roux et al. 2025, arXiv:2503.14286",
        "Tapered Off-Policy REINFORCE: correct responses get the plain REINFORCE gradient, the "
        "others a ratio truncated to [0, 1]; on group-normalised advantages, no KL (TOPR needs "
        "no anchor). ROLL's own TOPR recipe (rl_loss_coef 0 with positive_loss_coef and "
        "use_topr_neg_loss_coef) is examples/roll_topr.yaml.",
        adv_estimator="grpo", num_return_sequences_in_group=8, pg_variant="topr",
        use_kl_loss=False, whiten_advantages=False, advantage_clip=None,
    ),
)}


def preset_settings(name: str) -> dict[str, Any]:
    """The settings of preset `name` (ValueError naming the presets for an unknown one)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(sorted(PRESETS))}.")
    return dict(PRESETS[name].settings)


def presets_markdown() -> str:
    """The presets as a Markdown table (docs/TRAINING.md)."""
    rows = ["| preset | source | what it sets |", "|---|---|---|"]
    rows += [f"| `{p.name}` | {p.source} | {p.doc} |" for p in PRESETS.values()]
    return "\n".join(rows)
