"""Micro-batches under a token budget (learner/micro_batches.py): how rows are planned and cut,
and that the budget changes memory and nothing else — the loss, every gradient and the logged
metrics of an optimizer step are those of the whole mini-batch, for each loss_agg_mode, with a
KL term and entropy bonus (reference and old log-probs scored in micro-batches too), with a
critic, and with gradient checkpointing."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rllib_llm.exchange.columns import (
    ADVANTAGES,
    ATTENTION_MASK,
    INPUT_IDS,
    LAYOUTS,
    MC_RETURNS,
    REF_LOGP,
    RESPONSE_IDS,
    RETURNS,
    ROLLOUT_LOGP,
    SCORES,
    VALUE_TARGETS,
    VALUES,
)
from rllib_llm.learner import micro_batches
from rllib_llm.learner.module import RLVRModule
from rllib_llm.learner.packing import EpisodeTokens, pack
from rllib_llm.recipes.embedded import embedded_config

# 8 prompts x 4 responses of the embedded task: ~13 tokens a row, prompts of 4-7 tokens and
# responses of 2-6, so budgets of 40 and 97 tokens cut the 32 rows into 3-row and 7-row pieces.
SHAPE = dict(rollout_batch_size=8, num_return_sequences_in_group=4, response_length=6)
# Besides the learner's own (timers and throughput differ run to run).
NOT_COMPARED = ("learner_tokens_per_s",)


# --- planning and cutting ------------------------------------------------------------------------
def _lengths(seed: int, n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 30, (n,), generator=g), torch.randint(1, 50, (n,), generator=g)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("budget,max_rows", [(64, None), (200, None), (200, 3), (None, 5)])
def test_a_plan_takes_every_row_once_and_keeps_the_budget(seed, budget, max_rows):
    prompts, responses = _lengths(seed)
    batches = micro_batches.plan(prompts, responses, max_tokens=budget, max_rows=max_rows)
    assert sorted(torch.cat(batches).tolist()) == list(range(len(prompts)))
    for rows in batches:
        padded = len(rows) * int(prompts[rows].max() + responses[rows].max())
        if len(rows) > 1:  # (one row longer than the budget goes alone)
            assert budget is None or padded <= budget
        assert max_rows is None or len(rows) <= max_rows
        assert rows.tolist() == sorted(rows.tolist())  # the batch's own order inside


def test_a_row_over_the_budget_is_a_micro_batch_alone():
    batches = micro_batches.plan(torch.tensor([5, 100, 5]), torch.tensor([5, 100, 5]),
                                 max_tokens=40)
    assert [b.tolist() for b in batches] == [[1], [0, 2]]


def test_sorting_by_length_packs_fewer_padded_tokens_than_the_batch_order():
    # Alternating short and long rows: in order, every pair pads to the long one.
    prompts = torch.tensor([2, 40] * 8)
    responses = torch.tensor([2, 40] * 8)
    batches = micro_batches.plan(prompts, responses, max_tokens=160)
    padded = sum(len(r) * int(prompts[r].max() + responses[r].max()) for r in batches)
    assert padded == 8 * 80 + 8 * 4  # two long rows, or many short ones, per micro-batch
    assert len(batches) == 5


@pytest.mark.parametrize("min_count", [1, 4, 9, 40])
def test_min_count_halves_the_largest_until_enough(min_count):
    prompts, responses = _lengths(0)
    batches = micro_batches.plan(prompts, responses, max_tokens=1000, min_count=min_count)
    assert len(batches) >= min_count
    assert sorted(torch.cat(batches).tolist()) == list(range(40))


def test_a_cut_micro_batch_scores_as_the_padded_batch():
    """Log-probs of rows cut to their micro-batch's lengths equal those in the whole padded
    batch: the dropped columns are padding in every row (left of the prompts, right of the
    responses)."""
    module = RLVRModule(model_config={"model_name_or_path": "embedded", "model_dtype": "float32",
                                      "temperature": 1.0, "micro_batch_tokens": None})
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [15, 16], [17, 18, 19, 20]]
    responses = [[21, 22], [23, 24, 25, 26, 27, 28], [29], [30, 31, 32]]
    p, t = max(map(len, prompts)), max(map(len, responses))
    input_ids = torch.zeros(4, p + t, dtype=torch.long)
    attention = torch.zeros(4, p + t, dtype=torch.long)
    for i, (a, b) in enumerate(zip(prompts, responses, strict=True)):
        input_ids[i, p - len(a) : p + len(b)] = torch.tensor(a + b)
        attention[i, p - len(a) : p + len(b)] = 1
    batch = {"input_ids": input_ids, "attention_mask": attention,
             "response_ids": input_ids[:, p:].clone()}
    whole = module.score_tokens(batch, reference=False)  # (4, T)
    # Rows 0, 2 and 3 fit together; row 1 (13 tokens) alone.
    module.use_budgets(dataclasses.replace(module.budgets, micro_batch_tokens=12))
    cut = module.score_tokens(batch, reference=False)
    mask = attention[:, p:].bool()
    torch.testing.assert_close(cut[mask], whole[mask], rtol=1e-5, atol=1e-6)


def _hand_batch() -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """Three rows with P = T = 3 (so a (B, P + T) column is no wider than two (B, T) ones):
    prompts of 1, 3, 2 tokens and responses of 2, 3, 1; every entry its own value."""
    prompt_lens, response_lens = torch.tensor([1, 3, 2]), torch.tensor([2, 3, 1])
    attention = torch.zeros(3, 6, dtype=torch.long)
    for i, (a, b) in enumerate(zip(prompt_lens.tolist(), response_lens.tolist(), strict=True)):
        attention[i, 3 - a : 3 + b] = 1
    batch = {INPUT_IDS: torch.arange(18).reshape(3, 6), ATTENTION_MASK: attention,
             RESPONSE_IDS: torch.arange(100, 109).reshape(3, 3),
             ADVANTAGES: torch.arange(9.0).reshape(3, 3), SCORES: torch.tensor([0.5, 1.5, 2.5])}
    return batch, prompt_lens, response_lens


def test_take_cuts_each_column_by_its_declared_layout():
    batch, prompt_lens, response_lens = _hand_batch()
    # Rows 0 and 2: longest prompt 2, longest response 2.
    micro = micro_batches.take(batch, torch.tensor([0, 2]), prompt_lens, response_lens, p=3)
    assert micro[INPUT_IDS].tolist() == [[1, 2, 3, 4], [13, 14, 15, 16]]  # columns 1 .. 5
    assert micro[ATTENTION_MASK].tolist() == [[0, 1, 1, 1], [1, 1, 1, 0]]
    assert micro[RESPONSE_IDS].tolist() == [[100, 101], [106, 107]]  # the first 2
    assert micro[ADVANTAGES].tolist() == [[0.0, 1.0], [6.0, 7.0]]
    assert micro[SCORES].tolist() == [0.5, 2.5]  # per row: rows only


def test_take_refuses_a_column_with_no_declared_layout():
    batch, prompt_lens, response_lens = _hand_batch()
    batch["my_column"] = torch.zeros(3, 3)  # shaped like a response column: no guessing
    with pytest.raises(ValueError, match="'my_column' has no declared layout.*LAYOUTS"):
        micro_batches.take(batch, torch.tensor([0, 1]), prompt_lens, response_lens, p=3)


@pytest.mark.parametrize("key,shape", [(ADVANTAGES, (3, 6)), (INPUT_IDS, (3, 3)),
                                       (ADVANTAGES, (3,))])
def test_take_refuses_a_shape_its_layout_does_not_allow(key, shape):
    batch, prompt_lens, response_lens = _hand_batch()
    batch[key] = torch.zeros(shape)
    with pytest.raises(ValueError, match=f"{key!r} is declared .* but has shape"):
        micro_batches.take(batch, torch.tensor([0, 1]), prompt_lens, response_lens, p=3)


def test_every_column_of_a_packed_batch_has_a_layout():
    """What packing.pack builds, the connector adds and the learner adds (VALUE_TARGETS)."""
    added = {REF_LOGP, ROLLOUT_LOGP, ADVANTAGES, VALUES, RETURNS, MC_RETURNS, VALUE_TARGETS}
    items = [EpisodeTokens(prompt_ids=[1, 2], response_ids=[3], action_mask=[True],
                           behaviour_logp=[-0.5], score=1.0, correct=True, truncated=False,
                           group_id="g", turn_rewards=[0.5])]
    assert set(pack(items, pad_token_id=0)) | added <= set(LAYOUTS)


# --- one optimizer step with and without micro-batches -------------------------------------------
def _one_step(watch_learner, prepare=None, **settings):
    """(gradients by parameter name, the step's metrics, the iteration's learner results) of
    one iteration (one optimizer step) of the embedded task."""
    captured = {}

    def capture(self, step, *args, **kwargs):
        module = self.module["default_policy"].unwrapped()
        captured["grads"] = {n: p.grad.detach().clone() for n, p in module.named_parameters()
                             if p.grad is not None}
        captured["step"] = dict(step)

    watch_learner("apply_step", capture)
    algo = embedded_config("ppo", seed=3, **SHAPE, **settings).build_algo()
    if prepare is not None:
        prepare(algo)
    results = algo.train()["learners"]["default_policy"]
    algo.stop()
    return captured["grads"], captured["step"], results


def _same_step(whole, cut):
    (grads_w, step_w, results_w), (grads_c, step_c, results_c) = whole, cut
    assert grads_w.keys() == grads_c.keys() and grads_w
    for name, grad in grads_w.items():
        # float32 sums in another order: within 1e-5 of the tensor's largest entry.
        atol = 1e-5 * float(grad.abs().max()) + 1e-12
        torch.testing.assert_close(grads_c[name], grad, rtol=1e-4, atol=atol,
                                   msg=lambda m, name=name: f"{name}: {m}")
    assert step_c.keys() == step_w.keys()
    for name, value in step_w.items():
        assert step_c[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    for name, value in results_w.items():
        if isinstance(value, float) and name not in NOT_COMPARED:
            assert results_c[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_a_token_budget_changes_neither_loss_nor_gradients_nor_metrics(watch_learner, mode):
    settings = dict(loss_agg_mode=mode, use_kl_loss=True, kl_loss_coef=0.1, entropy_coef=0.01,
                    recompute_old_logp=True)
    whole = _one_step(watch_learner, max_tokens_per_micro_batch=None, **settings)
    assert whole[1]["loss"] != 0 and "kl_loss" in whole[1]
    for budget, rows in ((40, None), (97, None), (200, 3)):
        _same_step(whole, _one_step(watch_learner, max_tokens_per_micro_batch=budget,
                                    micro_batch_size=rows, **settings))


def _critic_head(algo):
    """A value head that is not all zeros (a zero head's value loss has a zero gradient)."""
    critic = algo.learner_group.local_learner.module["default_policy"].critic
    torch.manual_seed(0)
    torch.nn.init.normal_(critic.head.weight, std=0.5)


@pytest.mark.usefixtures("ray_session")
def test_a_token_budget_changes_nothing_with_a_critic(watch_learner):
    settings = dict(adv_estimator="gae", value_clip=0.1, loss_agg_mode="token-mean")
    whole = _one_step(watch_learner, _critic_head, max_tokens_per_micro_batch=None, **settings)
    assert whole[1]["value_loss"] > 0
    assert any("critic" in name and grad.abs().max() > 0 for name, grad in whole[0].items())
    _same_step(whole, _one_step(watch_learner, _critic_head, max_tokens_per_micro_batch=40,
                                **settings))


@pytest.mark.usefixtures("ray_session")
def test_gradient_checkpointing_gives_the_same_gradients(watch_learner):
    plain = _one_step(watch_learner, gradient_checkpointing=False)
    checkpointed = _one_step(watch_learner, gradient_checkpointing=True)
    _same_step(plain, checkpointed)


@pytest.mark.usefixtures("ray_session")
def test_gradient_checkpointing_is_on_in_the_learners_model():
    algo = embedded_config("ppo", gradient_checkpointing=True, **SHAPE).build_algo()
    try:
        model = algo.learner_group.local_learner.module["default_policy"].model
        assert model.is_gradient_checkpointing
        runner_model = algo.env_runner_group.local_env_runner.module.model
        assert runner_model is model  # one process: the sampler shares it (no grad there)
    finally:
        algo.stop()


@pytest.mark.usefixtures("ray_session")
def test_no_forward_exceeds_the_token_budget_however_large_the_batch():
    """Training forwards and every scoring pass (old, reference) stay within the budget: at 32
    and at 128 responses the learner's largest forward of the policy or the reference is under
    64 tokens; the larger batch takes more forwards, not larger ones. (Hooked after sampling:
    the sampler shares the policy in this one process.)"""
    sizes: list[int] = []

    def record(model, args, kwargs):
        sizes.append(kwargs[INPUT_IDS].numel())

    counts = []
    for prompts in (8, 32):
        sizes.clear()
        algo = embedded_config("ppo", **{**SHAPE, "rollout_batch_size": prompts},
                               max_tokens_per_micro_batch=64, use_kl_loss=True,
                               recompute_old_logp=True).build_algo()
        try:
            episodes = algo.env_runner_group.local_env_runner.sample()
            module = algo.learner_group.local_learner.module["default_policy"]
            for model in (module.model, module.reference_model):
                model.register_forward_pre_hook(record, with_kwargs=True)
            algo.update_learners(episodes)
        finally:
            algo.stop()
        assert 32 < max(sizes) <= 64
        counts.append(len(sizes))
    assert counts[1] > 3 * counts[0]
