"""The advantage pipeline of docs/ALGORITHMS.md, "Rewards and advantages", steps 1–6, as one
pure function the learner connector calls once per iteration, on the whole rollout batch:

    scores [B] ─ 1 clip ─ 2 normalise ─ on the last mask token ─ 3 − β·KL per token
        (+ turn rewards) ─ 4 estimator (``adv_estimator``) ─ 5 whiten ─ 6 clip ─> advantages [B, T]

Multi-turn episodes may also pay rewards before their end (a per-turn reward on the agent's last
token of a turn): ``turn_rewards`` [B, T]. They are dense rewards like −β·KL, not the score: steps
1–2 leave them as they are, the token-level estimators (``reinforce``, ``gae``) see them where
they were paid, and the group estimators add their discounted return after the group value, as
they do for KL, so a token is credited only with the rewards that follow it.

``compute_advantages`` takes a batch's tensors (``AdvantageInputs``) and the steps' settings
(``AdvantageSettings``, frozen, built once from the config outside core). Estimators are
registered by name (``register_adv_estimator``) and receive an ``EstimatorInputs`` bundle of
tensors, so each one picks what it needs without a config object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from rllib_llm.core.advantages import (
    discounted_returns,
    episode_last_rows,
    gae,
    group_advantages,
    length_adaptive_lambda,
)
from rllib_llm.core.masked import bool_mask, check_same_shape, compute_dtype, zero_masked
from rllib_llm.core.normalisation import NormType, RunningMeanStd, reward_norm, whiten
from rllib_llm.core.registry import Registry

AdvEstimator = Literal["gae", "reinforce", "grpo", "rloo", "reinforce_baseline"]
ADV_ESTIMATORS: tuple[str, ...] = get_args(AdvEstimator)


@dataclass(frozen=True)
class EstimatorInputs:
    """What an advantage estimator may use; all [B, T] tensors are 0 outside ``mask``.

    Attributes:
        scores: [B] scores after clipping and normalisation (steps 1–2).
        token_rewards: [B, T] the score on each row's last mask token, minus β·KL per token,
            plus the turn rewards.
        kl_rewards: [B, T] the −β·KL part of ``token_rewards`` alone (0 when KL is off).
        turn_rewards: [B, T] the per-turn part of ``token_rewards`` alone (0 when none).
        mask: [B, T] bool.
        values: [B, T] critic values, or None without a critic.
        group_size: responses per prompt.
        gamma: discount γ.
        lambd: GAE λ, a float or [B] (length-adaptive).
        critic_lambd: λ of the critic's returns (decoupled GAE), or None to use ``lambd``.
        episode_index: [B] the episode of each row when an episode spans several rows
            (``compute_advantages``), else None; a group baseline reads ``scores`` at
            ``episode_last_rows(episode_index)``, one per episode.
    """

    scores: Tensor
    token_rewards: Tensor
    kl_rewards: Tensor
    turn_rewards: Tensor
    mask: Tensor
    values: Tensor | None
    group_size: int
    gamma: float
    lambd: float | Tensor
    critic_lambd: float | None
    episode_index: Tensor | None = None


# fn(inputs) -> (advantages [B, T], returns [B, T]) before whitening and clipping.
AdvEstimatorFn = Callable[[EstimatorInputs], tuple[Tensor, Tensor]]
ADV_ESTIMATOR_REGISTRY: Registry[AdvEstimatorFn] = Registry(
    "adv_estimator", "register_adv_estimator"
)


@dataclass(frozen=True)
class AdvEstimatorInfo:
    """What an advantage estimator needs, declared when it is registered; config validation
    reads it (a group baseline rejects num_return_sequences_in_group=1).

    Attributes:
        needs_groups: it compares the responses of one prompt, so needs >= 2 per prompt.
        needs_critic: it reads ``EstimatorInputs.values`` from a critic (value model).
    """

    needs_groups: bool
    needs_critic: bool = False


def register_adv_estimator(
    name: str, *, needs_groups: bool, needs_critic: bool = False, override: bool = False
) -> Callable[[AdvEstimatorFn], AdvEstimatorFn]:
    """Decorator adding an advantage estimator ``fn(EstimatorInputs) -> (advantages, returns)``.

    ``needs_groups`` (required: a wrong guess would let a group baseline train on groups of one)
    and ``needs_critic`` declare what it needs; see ``AdvEstimatorInfo``.
    """
    if not isinstance(needs_groups, bool) or not isinstance(needs_critic, bool):
        raise ValueError(
            f"register_adv_estimator({name!r}) got needs_groups={needs_groups!r}, "
            f"needs_critic={needs_critic!r}; pass True or False for each."
        )
    return ADV_ESTIMATOR_REGISTRY.register(
        name, override=override, info=AdvEstimatorInfo(needs_groups, needs_critic)
    )


def adv_estimator_info(name: str) -> AdvEstimatorInfo:
    """What the estimator registered as ``name`` declared (``ValueError`` if unknown)."""
    return ADV_ESTIMATOR_REGISTRY.info(name)


@register_adv_estimator("reinforce", needs_groups=False)
def reinforce_estimator(inputs: EstimatorInputs) -> tuple[Tensor, Tensor]:
    """A_t = discounted return Σ_{k≥t} γ^{k−t} r_k. REINFORCE++ (arXiv:2501.03262) is this plus
    KL in the reward plus batch whitening."""
    returns = discounted_returns(inputs.token_rewards, inputs.mask, gamma=inputs.gamma)
    return returns, returns


@register_adv_estimator("gae", needs_groups=False, needs_critic=True)
def gae_estimator(inputs: EstimatorInputs) -> tuple[Tensor, Tensor]:
    """GAE with the critic's ``values``; decoupled GAE (VC-PPO, arXiv:2503.01491) computes the
    critic's returns with ``critic_lambd`` (1.0 there: unbiased targets for a long horizon) and
    the actor's advantages with ``lambd``."""
    if inputs.values is None:
        raise ValueError(
            "adv_estimator='gae' needs values [B, T] from a critic; pass values=... or choose a "
            "critic-free adv_estimator ('reinforce', 'grpo', 'rloo', 'reinforce_baseline')."
        )
    rewards, values, mask = inputs.token_rewards, inputs.values, inputs.mask
    advantages, returns = gae(rewards, values, mask, gamma=inputs.gamma, lambd=inputs.lambd)
    if inputs.critic_lambd is not None:
        _, returns = gae(rewards, values, mask, gamma=inputs.gamma, lambd=inputs.critic_lambd)
    return advantages, returns


def group_adv_estimator(name: str) -> AdvEstimatorFn:
    """The pipeline estimator for the group baseline ``name`` of ``group_advantages``.

    The group value is spread to every mask token of its response (as the spec says, γ does not
    discount it); KL in the reward, when on, adds the discounted return of the −β·KL token
    rewards, so a token still pays for the divergence that follows it, and turn rewards add theirs
    the same way.
    """

    def estimator(inputs: EstimatorInputs) -> tuple[Tensor, Tensor]:
        if inputs.episode_index is None:
            group_value = group_advantages(inputs.scores, inputs.group_size, name)  # (B,)
        else:  # each episode once in its group, its value broadcast to all its rows
            last = episode_last_rows(inputs.episode_index)  # (E,)
            group_value = group_advantages(inputs.scores[last], inputs.group_size, name)
            group_value = group_value[inputs.episode_index]  # (E,) -> (B,)
        spread = group_value[:, None] * inputs.mask  # (B, T)
        dense = inputs.kl_rewards + inputs.turn_rewards  # (B, T)
        dense_returns = discounted_returns(dense, inputs.mask, gamma=inputs.gamma)
        returns = discounted_returns(inputs.token_rewards, inputs.mask, gamma=inputs.gamma)
        return spread + dense_returns, returns

    estimator.__qualname__ = f"group_adv_estimator({name!r})"
    return estimator


for _name in ("grpo", "rloo", "reinforce_baseline"):
    register_adv_estimator(_name, needs_groups=True)(group_adv_estimator(_name))


def last_token_rewards(scores: Tensor, mask: Tensor) -> Tensor:
    """[B] scores placed on each row's last mask token -> [B, T]; rows without tokens drop."""
    m = bool_mask(mask)  # (B, T)
    count = m.long().cumsum(dim=-1)  # (B, T)
    is_last = m & (count == count[:, -1:])  # the mask token after which no other follows
    return torch.where(is_last, scores[:, None], scores.new_zeros(()))


@dataclass(frozen=True)
class AdvantageSettings:
    """How scores become advantages: the settings of steps 1–6, built once (the learner builds
    them from its config, ``learner/connector.py``) and the same for every batch.

    Attributes:
        adv_estimator: a name in ``ADV_ESTIMATOR_REGISTRY`` (built-ins: ``ADV_ESTIMATORS``).
        group_size: responses per prompt, consecutive in the batch (≥ 2 for the group
            estimators and for ``group`` normalisation).
        gamma, lambd: discount γ and GAE λ.
        critic_lambd: λ of the critic's returns for decoupled GAE (None: ``lambd``).
        length_adaptive_alpha: VAPO's α; when set, λ_b = length_adaptive_lambda(l_b, α)
            replaces ``lambd``.
        reward_clip: step 1, clamp scores to ±reward_clip (None: off).
        norm_mean_type, norm_std_type: step 2, see ``reward_norm``.
        whiten_advantages: step 5, batch whitening over mask tokens.
        advantage_clip: step 6, clamp advantages to ±advantage_clip (None: off).
    """

    adv_estimator: AdvEstimator | str
    group_size: int = 1
    gamma: float = 1.0
    lambd: float = 0.95
    critic_lambd: float | None = None
    length_adaptive_alpha: float | None = None
    reward_clip: float | None = None
    norm_mean_type: NormType | None = None
    norm_std_type: NormType | None = None
    whiten_advantages: bool = True
    advantage_clip: float | None = 2.0

    def __post_init__(self):
        for field, value in (("reward_clip", self.reward_clip),
                             ("advantage_clip", self.advantage_clip)):
            if value is not None and not value > 0:
                raise ValueError(f"{field}={value!r} must be > 0, or None to turn clipping off.")


@dataclass(frozen=True)
class AdvantageInputs:
    """One batch's tensors for ``compute_advantages``; all but ``scores`` and ``mask`` optional.

    Attributes:
        scores: [B] verifier scores, one per response.
        mask: [B, T] binary mask of the agent's tokens; the score sits on each row's last one.
        values: [B, T] critic values, required by ``gae``.
        token_kl: [B, T] kl_estimate(old_logp, ref_logp, kl_penalty), for step 3.
        kl_coef: β this batch (``AdaptiveKLController.value``); step 3 subtracts β·token_kl on
            mask tokens.
        turn_rewards: [B, T] rewards paid before the end of a multi-turn episode, on the mask
            token where each was paid (None: none); added after step 2, not normalised.
        episode_index: [B] int, the episode of each row (0, 1, ... in row order, an episode's
            rows consecutive), when an episode spans several rows: an agent that rewrote its
            history trains each of its sequences as a row with the episode's reward. Steps 1–2
            and the group baselines then count each episode once, at its last row (a split
            episode would otherwise weigh as many times as it has rows in its group's mean and
            std), and every row gets its episode's value; ``group_size`` counts episodes. As
            SkyRL's step-wise training computes the advantage of a trajectory's last step and
            broadcasts it (NovaSky-AI/SkyRL#436). None: each row is an episode.
    """

    scores: Tensor
    mask: Tensor
    values: Tensor | None = None
    token_kl: Tensor | None = None
    kl_coef: float = 0.0
    turn_rewards: Tensor | None = None
    episode_index: Tensor | None = None


def compute_advantages(
    inputs: AdvantageInputs,
    settings: AdvantageSettings,
    running_stats: RunningMeanStd | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Scores → per-token advantages, steps 1–6 of docs/ALGORITHMS.md, "Rewards and advantages".

    Args:
        inputs: the batch's scores, mask and optional dense tensors (``AdvantageInputs``).
        settings: the steps' settings (``AdvantageSettings``).
        running_stats: the state of ``running`` normalisation (step 2, see ``reward_norm``),
            updated with this batch's scores; None when neither norm type is ``running``.

    Returns:
        advantages [B, T], returns [B, T] (critic targets for ``gae``; the Monte-Carlo return of
        the shaped rewards otherwise) and token_rewards [B, T] (normalised score on the last
        mask token minus β·KL plus turn rewards); all 0 outside the mask, in the compute dtype.
    """
    fn = ADV_ESTIMATOR_REGISTRY.get(settings.adv_estimator)
    _check_inputs(inputs)
    dtype = compute_dtype(inputs.scores, inputs.token_kl, inputs.values, inputs.turn_rewards)
    m = bool_mask(inputs.mask)  # (B, T)
    episode_index = inputs.episode_index
    last = None if episode_index is None else episode_last_rows(episode_index)  # (E,)
    scores = inputs.scores.to(dtype)  # (B,)
    scores = process_scores(
        scores if last is None else scores[last], settings.group_size,
        reward_clip=settings.reward_clip, norm_mean_type=settings.norm_mean_type,
        norm_std_type=settings.norm_std_type, running_stats=running_stats,
    )  # (B,), or (E,) per episode
    if episode_index is not None:
        scores = scores[episode_index]  # (E,) -> (B,): each row its episode's score
    token_rewards, kl_rewards = token_level_rewards(scores, m, token_kl=inputs.token_kl,
                                                    kl_coef=inputs.kl_coef)
    turns = token_rewards.new_zeros(m.shape) if inputs.turn_rewards is None else \
        zero_masked(inputs.turn_rewards.detach(), m, dtype)  # (B, T)
    token_rewards = token_rewards + turns
    lambd: float | Tensor = settings.lambd
    if settings.length_adaptive_alpha is not None:  # (B,)
        lambd = length_adaptive_lambda(m.sum(dim=-1).to(dtype), settings.length_adaptive_alpha)
    values = None if inputs.values is None else zero_masked(inputs.values.detach(), m, dtype)
    advantages, returns = fn(EstimatorInputs(
        scores=scores, token_rewards=token_rewards, kl_rewards=kl_rewards, turn_rewards=turns,
        mask=m, values=values, group_size=settings.group_size, gamma=settings.gamma,
        lambd=lambd, critic_lambd=settings.critic_lambd, episode_index=episode_index,
    ))
    if settings.whiten_advantages:
        advantages = whiten(advantages, m)
    if settings.advantage_clip is not None:
        advantages = advantages.clamp(-settings.advantage_clip, settings.advantage_clip)
    return zero_masked(advantages, m, dtype), zero_masked(returns, m, dtype), token_rewards


def process_scores(
    scores: Tensor,
    group_size: int,
    *,
    reward_clip: float | None = None,
    norm_mean_type: NormType | None = None,
    norm_std_type: NormType | None = None,
    running_stats: RunningMeanStd | None = None,
) -> Tensor:
    """Steps 1–2: clamp [B] scores to ±``reward_clip``, then ``reward_norm`` them."""
    scores = scores.detach().to(compute_dtype(scores))  # (B,)
    if reward_clip is not None:
        scores = scores.clamp(-reward_clip, reward_clip)
    return reward_norm(
        scores, group_size, mean_type=norm_mean_type, std_type=norm_std_type,
        running_stats=running_stats,
    )


def token_level_rewards(
    scores: Tensor, mask: Tensor, *, token_kl: Tensor | None = None, kl_coef: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Step 3: each row's score on its last mask token, minus β·KL on every mask token.

    Args:
        scores: [B] processed scores.
        mask: [B, T] binary mask.
        token_kl: [B, T] per-token KL(old ‖ ref) estimate, or None.
        kl_coef: β.

    Returns:
        (token_rewards [B, T], kl_rewards [B, T] = −β·token_kl alone), 0 outside the mask.
    """
    dtype = compute_dtype(scores, token_kl)
    m = bool_mask(mask)  # (B, T)
    kl_rewards = torch.zeros(m.shape, dtype=dtype, device=scores.device)  # (B, T)
    if token_kl is not None and kl_coef != 0:
        kl_rewards = -kl_coef * zero_masked(token_kl.detach(), m, dtype)
    return last_token_rewards(scores.to(dtype), m) + kl_rewards, kl_rewards


def _check_inputs(x: AdvantageInputs) -> None:
    if x.scores.dim() != 1 or x.scores.shape[0] != x.mask.shape[0]:
        raise ValueError(
            f"compute_advantages: scores has shape {tuple(x.scores.shape)} but mask is "
            f"{tuple(x.mask.shape)}; pass one score per response, shape [B]."
        )
    check_same_shape({"mask": x.mask, "token_kl": x.token_kl, "values": x.values,
                      "turn_rewards": x.turn_rewards}, "compute_advantages")
    if x.kl_coef != 0 and x.token_kl is None:
        raise ValueError(
            f"kl_coef={x.kl_coef!r} puts KL in the reward but token_kl is None; pass token_kl="
            f"kl_estimate(old_logp, ref_logp, kl_penalty), or set kl_coef=0."
        )
    if x.episode_index is not None and x.episode_index.shape != x.scores.shape:
        raise ValueError(f"compute_advantages: episode_index has shape "
                         f"{tuple(x.episode_index.shape)}, scores {tuple(x.scores.shape)}; pass "
                         "the episode of each row, shape [B].")
