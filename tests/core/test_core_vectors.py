"""Every case of the reference vectors (tests/data/vectors, a copy of the project's shared
vectors) against rllib_llm.core, in float64 with atol 1e-6."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rllib_llm import core

VECTOR_DIR = Path(__file__).parents[1] / "data" / "vectors"
EXPECTED_CASES = 193
ATOL = 1e-6


def _load_cases() -> list:
    cases = []
    for path in sorted(VECTOR_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        for i, case in enumerate(data["cases"]):
            cases.append(pytest.param(data["function"], case, id=f"{data['function']}-{i}"))
    return cases


CASES = _load_cases()


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def close(actual: torch.Tensor | float, expected) -> None:
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float64), t(expected), atol=ATOL, rtol=0
    )


def test_every_vector_file_is_loaded():
    assert len(CASES) == EXPECTED_CASES


def check_policy_loss(case):
    logp = t(case["logp"]).requires_grad_(True)
    scores = None if case.get("scores") is None else t(case["scores"])
    mask = t(case["mask"])
    per_token, _ = core.policy_loss(
        case["pg_variant"], logp, t(case["old_logp"]), t(case["advantages"]), mask,
        scores=scores, **case["params"],
    )
    loss = core.agg_loss(per_token, mask, case["agg_mode"], norm_length=case.get("norm_length"))
    (grad,) = torch.autograd.grad(loss, logp)
    close(per_token * mask, case["expected"]["per_token_loss_masked"])
    close(loss, case["expected"]["loss"])
    close(grad, case["expected"]["grad_logp"])


def check_agg_loss(case):
    value = core.agg_loss(
        t(case["loss"]), t(case["mask"]), case["mode"], norm_length=case.get("norm_length")
    )
    close(value, case["expected"]["value"])


def check_kl_estimate(case):
    close(core.kl_estimate(t(case["logp"]), t(case["ref_logp"]), case["kind"]),
          case["expected"]["kl"])


def check_kl_full(case):
    close(core.kl_full(t(case["logits"]), t(case["ref_logits"])), case["expected"]["kl"])


def check_discounted_returns(case):
    returns = core.discounted_returns(t(case["rewards"]), t(case["mask"]), gamma=case["gamma"])
    close(returns, case["expected"]["returns"])


def check_gae(case):
    lambd = case["lambd"]
    lambd = t(lambd) if isinstance(lambd, list) else lambd
    advantages, returns = core.gae(
        t(case["rewards"]), t(case["values"]), t(case["mask"]), gamma=case["gamma"], lambd=lambd
    )
    close(advantages, case["expected"]["advantages"])
    close(returns, case["expected"]["returns"])


def check_length_adaptive_lambda(case):
    lambd = core.length_adaptive_lambda(torch.tensor(case["lengths"]), case["alpha"])
    close(lambd, case["expected"]["lambd"])


def check_group_advantages(case):
    adv = core.group_advantages(t(case["scores"]), case["group_size"], case["estimator"])
    close(adv, case["expected"]["advantages"])


def check_reward_norm(case):
    normalised = core.reward_norm(
        t(case["scores"]), case["group_size"], mean_type=case["mean_type"],
        std_type=case["std_type"],
    )
    close(normalised, case["expected"]["normalized"])


def check_whiten(case):
    whitened = core.whiten(t(case["values"]), t(case["mask"]), shift_mean=case["shift_mean"])
    close(whitened, case["expected"]["whitened"])


def check_value_loss(case):
    loss = core.value_loss(
        t(case["values"]), t(case["old_values"]), t(case["returns"]), t(case["mask"]),
        value_clip=case["value_clip"], agg_mode=case["agg_mode"],
        norm_length=case.get("norm_length"),
    )
    close(loss, case["expected"]["loss"])


def check_positive_nll_loss(case):
    loss = core.positive_nll_loss(t(case["logp"]), t(case["mask"]), t(case["scores"]))
    close(loss, case["expected"]["loss"])


def check_adaptive_kl_controller(case):
    controller = core.AdaptiveKLController(
        case["init_kl_coef"], case["target_kl"], case["kl_horizon"]
    )
    values = []
    for current_kl, n_steps in case["updates"]:
        controller.update(current_kl, n_steps)
        values.append(controller.value)
    close(t(values), case["expected"]["values"])


CHECKS = {
    "policy_loss": check_policy_loss,
    "agg_loss": check_agg_loss,
    "kl_estimate": check_kl_estimate,
    "kl_full": check_kl_full,
    "discounted_returns": check_discounted_returns,
    "gae": check_gae,
    "length_adaptive_lambda": check_length_adaptive_lambda,
    "group_advantages": check_group_advantages,
    "reward_norm": check_reward_norm,
    "whiten": check_whiten,
    "value_loss": check_value_loss,
    "positive_nll_loss": check_positive_nll_loss,
    "AdaptiveKLController": check_adaptive_kl_controller,
}


@pytest.mark.parametrize(("function", "case"), CASES)
def test_vector(function, case):
    CHECKS[function](case)
