"""`RLVRLearner`: the actor loss of docs/ALGORITHMS.md ("The total loss") on RLlib's
TorchLearner, and the critic's.

    L = rl_loss_coef * (agg(L_pg) + [use_kl_loss] * kl_loss_coef * agg(kl(logp, ref_logp)))
        - entropy_coef * agg(entropy) + positive_nll_coef * positive_nll_loss
        + positive_loss_coef * agg_pos(-logp * A) + use_topr_neg_loss_coef * agg_neg(...)
        + value_loss_coef * agg(value_loss(V, V_old, R))          (adv_estimator='gae')

With a critic the module's parameters split between two Adam optimizers, "actor" (lr) and
"critic" (critic_lr), each clipped to grad_clip on its own (RLlib clips per optimizer). During
value pretraining (the first value_pretrain_steps iterations) the loss is the value loss alone,
on Monte-Carlo returns, and only the critic's optimizer steps.

One call of `_update` is one training iteration: `ppo_epochs` passes over the rollout batch in
mini-batches of whole prompt groups (`optimizer_steps.py`), one optimizer step each, accumulated
over micro-batches of at most `max_tokens_per_micro_batch` tokens (sized for the learner's GPU
when "auto": `RLVRModule.size_for_device`) and `micro_batch_size` rows (`micro_batches.py`).
Every term is normalised by the counts of the whole mini-batch, computed before it is split, so
the budget changes memory use and nothing else — the logged metrics
included: they are the mini-batch's values, averaged over the iteration's optimizer steps.

With `num_learners >= 2` (DDP) every learner takes the same steps, each on its share of every
mini-batch's prompt groups, and the update is the one-learner update (`data_parallel.py`).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.learner import DEFAULT_OPTIMIZER
from ray.rllib.core.learner.torch.torch_learner import TorchLearner

from rllib_llm import core
from rllib_llm.exchange.columns import (
    ACTION_MASK,
    ADVANTAGES,
    ATTENTION_MASK,
    LOGP,
    MC_RETURNS,
    OLD_LOGP,
    REF_LOGP,
    RETURNS,
    ROLLOUT_LOGP,
    SCORES,
    VALUE_TARGETS,
    VALUES,
)
from rllib_llm.exchange.columns import ENTROPY as ENTROPY_OUT
from rllib_llm.exchange.devices import IS_GPU, announce, is_gpu, module_device, require_visible_gpu
from rllib_llm.exchange.host_memory import release_freed_memory
from rllib_llm.exchange.threads import set_torch_threads
from rllib_llm.learner import data_parallel, micro_batches, shards
from rllib_llm.learner.adam_kernel import use_configured_kernel
from rllib_llm.learner.learner_group import SHARDS_DIR
from rllib_llm.learner.module import TEACHER
from rllib_llm.learner.optimizer_steps import minibatch_rows, row_groups
from rllib_llm.learner.pass_labels import BACKWARD, FORWARD, OPTIMIZER_STEP, label
from rllib_llm.learner.step_context import StepContext, positive_rows, step_context, with_context
from rllib_llm.learner.step_metrics import MicroBatchMetrics, over_micro_batches, over_steps

# Metric names the learner logs per module (besides the pg variant's own metrics).
PG_LOSS = "pg_loss"
KL_LOSS = "kl_loss"
ENTROPY = "entropy"  # the aggregate of the forward output ENTROPY_OUT
POSITIVE_NLL = "positive_nll_loss"
POSITIVE_LOSS = "positive_loss"  # ROLL's postive_loss (positive_loss_coef)
TOPR_NEG_LOSS = "topr_neg_loss"  # ROLL's topr_neg_loss (use_topr_neg_loss_coef)
TOTAL_LOSS = "loss"
TOKENS_PER_S = "learner_tokens_per_s"
NUM_OPTIMIZER_STEPS = "num_optimizer_steps"  # optimizer steps taken this iteration
NUM_NONFINITE_SKIPPED = "num_nonfinite_steps_skipped"  # steps skipped so far (lifetime)
GRAD_NORM = "grad_norm"  # the actor's global gradient norm before clipping, mean over steps
# The critic's (adv_estimator='gae').
VALUE_LOSS = "value_loss"
VALUE_CLIPFRAC = "value_clipfrac"
CRITIC_GRAD_NORM = "critic_grad_norm"
VALUE_PRETRAINING = "value_pretraining"  # 1.0 in an iteration that trains the critic alone
# Over the iteration's whole batch, with the values of rollout time (before this update).
EXPLAINED_VARIANCE = "explained_variance"
VALUE_MEAN = "value_mean"
RETURN_MEAN = "return_mean"  # of the critic's targets
VALUE_MAE = "value_abs_error"  # mean |V - R|

_STATE_KEY = "rlvr_learner"  # our part of the learner's checkpoint


class RLVRLearner(TorchLearner):
    def build(self) -> None:
        core.restore_registrations(self.config.user_registrations)  # the driver's, if remote
        set_torch_threads(self.config.num_torch_threads)
        require_visible_gpu(self.config.num_gpus_per_learner, setting="num_gpus_per_learner",
                            role="learner")
        super().build()
        cfg = self.config
        params = core.pg_variant_params(cfg.pg_variant)
        # The variant's parameters come from config fields of the same name, else from
        # pg_variant_kwargs (for variants users registered themselves).
        self._pg_params = {
            name: getattr(cfg, name) for name in params if hasattr(cfg, name)
        } | dict(cfg.pg_variant_kwargs)
        # Shuffles the order of the prompt groups per epoch when RLlib's
        # shuffle_batch_per_epoch asks for it; seeded, and saved with the checkpoint.
        self._shuffle = torch.Generator().manual_seed(cfg.seed or 0)
        self._nonfinite_in_a_row = 0
        self._nonfinite_total = 0
        module = self.module[DEFAULT_MODULE_ID].unwrapped()
        self._has_critic = module.has_critic
        self._critic_refs = {self.get_param_ref(p) for p in module.critic_parameters()}
        self._value_pretrain_done = 0  # value-pretraining iterations done (checkpointed)
        device = module_device(module)
        self._device_is_gpu = is_gpu(device)
        # "auto" budgets and checkpointing, for the device the module now computes on.
        budgets = module.size_for_device(cfg.device_memory_share)
        module.use_budgets(budgets)
        rank, world = data_parallel.rank_and_world()
        announce("the learner" if world == 1 else f"learner {rank} of {world}", device,
                 ", ".join(filter(None, (budgets.note, self._strategy_note()))))

    def _strategy_note(self) -> str:
        """What the learner strategy settled for this learner's device, for its build line
        ('' where nothing)."""
        return ""

    # torch Adam's `foreach` (None: torch's choice, which on a CPU is one tensor at a time);
    # FSDP2 learners take the foreach kernel, on a CPU bitwise the same update.
    ADAM_FOREACH: bool | None = None

    def _adam_kernel(self) -> dict[str, bool | None]:
        """torch Adam's kernel settings: fused where config.fused_optimizer, else ADAM_FOREACH."""
        fused = bool(self.config.fused_optimizer)
        return {"fused": fused, "foreach": None if fused else self.ADAM_FOREACH}

    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        """One Adam optimizer (RLlib's default, under RLlib's default name), or with a critic
        two: "actor" at lr and "critic" at critic_lr; fused where config.fused_optimizer."""
        module = self._module[module_id].unwrapped()
        if module.has_critic:
            critic_lr = config.lr if config.critic_lr is None else config.critic_lr
            groups = (("actor", module.policy_parameters(), config.lr),
                      ("critic", module.critic_parameters(), critic_lr))
        else:
            groups = ((DEFAULT_OPTIMIZER, self.get_parameters(self._module[module_id]),
                       config.lr),)
        for name, params, lr in groups:
            self.register_optimizer(
                module_id=module_id, optimizer_name=name, params=params, lr_or_lr_schedule=lr,
                optimizer=torch.optim.Adam(params, **self._adam_kernel()))

    def get_parameters(self, module) -> list[torch.nn.Parameter]:
        # The frozen reference model is part of the module but never optimised.
        return [p for p in module.parameters() if p.requires_grad]

    def _log_steps_trained_metrics(self, batch) -> None:
        """RLlib sums the rows and env steps each learner trained on: with several learners
        each holds the whole batch and trains its share (`data_parallel.py`), so log that."""
        rank, world = data_parallel.rank_and_world()
        super()._log_steps_trained_metrics(
            batch if world == 1 else data_parallel.BatchShare(batch, rank, world))

    def _set_optimizer_state(self, state: dict[str, Any]) -> None:
        """A checkpoint's param groups carry the kernel they were saved with: keep this run's
        fused_optimizer instead."""
        super()._set_optimizer_state(state)
        for optim in self._named_optimizers.values():
            use_configured_kernel(optim, **self._adam_kernel())

    def _get_optimizer_state(self) -> dict[str, Any]:
        # RLlib converts optimizer state to numpy, which has no bfloat16 (Adam's moments of a
        # bf16 model are bf16): keep torch tensors, as RLVRModule.get_state does.
        return {
            name: {"module_id": self._optimizer_name_to_module[name],
                   "state": _detached(optim.state_dict())}
            for name, optim in self._named_optimizers.items()
        }

    # --- one iteration: epochs x mini-batches, one optimizer step each ---------------------------
    def _update(self, batch: dict[str, Any], **kwargs):
        """Every optimizer step of one iteration (RLlib hands us the whole batch once)."""
        start = time.perf_counter()
        cfg = self.config
        data = batch[DEFAULT_MODULE_ID]
        pretraining = self._has_critic and self._value_pretrain_done < cfg.value_pretrain_steps
        if self._has_critic:
            # Value pretraining fits Monte-Carlo returns (VC-PPO); then GAE's returns.
            data = {**data, VALUE_TARGETS: data[MC_RETURNS if pretraining else RETURNS]}
            self._log_critic_batch_metrics(data)
        steps = minibatch_rows(
            data[ACTION_MASK].shape[0], group_size=cfg.num_return_sequences_in_group,
            mini_batch_size=cfg.mini_batch_size, num_epochs=cfg.ppo_epochs,
            generator=self._shuffle if cfg.shuffle_batch_per_epoch else None,
            groups=row_groups(data, cfg.num_return_sequences_in_group),
        )
        results = [self._optimizer_step({k: v[rows] for k, v in data.items()},
                                        pretraining=pretraining) for rows in steps]
        merged = over_steps(results)
        for name, value in merged.items():
            self.metrics.log_value((DEFAULT_MODULE_ID, name), value, window=1)
        self.metrics.log_value((DEFAULT_MODULE_ID, NUM_OPTIMIZER_STEPS), len(steps), window=1)
        self.metrics.log_value((DEFAULT_MODULE_ID, IS_GPU), self._device_is_gpu, window=1)
        self.metrics.log_value((DEFAULT_MODULE_ID, NUM_NONFINITE_SKIPPED),
                               self._nonfinite_total, window=1)
        if self._has_critic:
            self.metrics.log_value((DEFAULT_MODULE_ID, VALUE_PRETRAINING),
                                   float(pretraining), window=1)
            self._value_pretrain_done += int(pretraining)
        seconds = time.perf_counter() - start
        tokens = float(data[ATTENTION_MASK].sum()) * cfg.ppo_epochs
        self.metrics.log_value((DEFAULT_MODULE_ID, TOKENS_PER_S), tokens / seconds, window=1)
        loss = torch.tensor(merged.get(TOTAL_LOSS, float("nan")))
        release_freed_memory()  # the micro-batches' freed activations (exchange/host_memory.py)
        return {}, {DEFAULT_MODULE_ID: loss}, {}

    def _optimizer_step(self, mini: dict[str, torch.Tensor], *,
                        pretraining: bool) -> dict[str, float]:
        """One optimizer step on a mini-batch, accumulated over its micro-batches (the critic
        alone where `pretraining`).

        A non-finite loss or gradient skips the step (the weights and Adam's moments stay as
        they were); `max_consecutive_nonfinite_steps` skipped in a row stop training.
        """
        cfg = self.config
        # The normalisers are the whole mini-batch's, on every data-parallel rank; they travel
        # to each micro-batch's loss in the micro-batch itself.
        context = StepContext.of(mini, value_pretraining=pretraining)
        mask = mini[ACTION_MASK]
        rank, world = data_parallel.rank_and_world()
        mine = mini
        if world > 1:  # this rank's share of the prompt groups
            k = cfg.num_return_sequences_in_group
            rows = data_parallel.rank_rows(torch.arange(mask.shape[0]), group_size=k,
                                           rank=rank, world=world, groups=row_groups(mini, k))
            mine = {k: v[rows.to(v.device)] for k, v in mini.items()}
        for optim in self._optimizer_parameters:
            optim.zero_grad(set_to_none=True)
        total = torch.zeros((), dtype=torch.float64)
        module = self.module[DEFAULT_MODULE_ID].unwrapped()
        micros = micro_batches.split(mine, max_tokens=module.micro_batch_tokens,
                                     max_rows=cfg.micro_batch_size,
                                     unpadded=module.remove_padding)
        parts = []
        for i, micro in enumerate(micros):
            # DDP all-reduces the gradients once per step, in the last micro-batch's backward.
            with self._gradient_sync(last=i == len(micros) - 1):
                with label(FORWARD):  # (pass_labels: a profiler's names, free without one)
                    fwd_out = self._forward_train(micro)[DEFAULT_MODULE_ID]
                    loss = self.micro_batch_loss(config=cfg, batch=with_context(micro, context),
                                                 fwd_out=fwd_out)
                # DDP averages over ranks; each rank's piece is normalised by the whole
                # mini-batch's counts, so world * mean = the sum of the pieces.
                with label(BACKWARD):
                    self._backward(loss.total * world)
            total = total + loss.total.detach().double()
            parts.append(loss.metrics)
        step = data_parallel.all_reduce_step_metrics(
            {**over_micro_batches(parts), TOTAL_LOSS: float(total)})
        with label(OPTIMIZER_STEP):
            return self._apply_step(step, torch.tensor(step[TOTAL_LOSS], dtype=torch.float64),
                                    pretraining=pretraining)

    def _forward_train(self, micro: dict[str, torch.Tensor]) -> dict[str, Any]:
        return self.module.forward_train({DEFAULT_MODULE_ID: micro})

    def _backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def _apply_step(self, step: dict[str, float], total: torch.Tensor, *,
                    pretraining: bool) -> dict[str, float]:
        """Clip and apply the accumulated gradients (or skip a non-finite step); returns the
        step's metrics with the gradient norms."""
        if pretraining:
            # The actor stays frozen: a shared trunk's value-loss gradient is dropped too.
            for pid, p in self._params.items():
                if pid not in self._critic_refs:
                    p.grad = None
        grads = {pid: p.grad for pid, p in self._params.items() if p.grad is not None}
        actor_norm = _global_norm(g for pid, g in grads.items() if pid not in self._critic_refs)
        critic_norm = _global_norm(g for pid, g in grads.items() if pid in self._critic_refs)
        if not (torch.isfinite(total) and torch.isfinite(actor_norm)
                and torch.isfinite(critic_norm)):
            self._skip_nonfinite_step(float(total), float(actor_norm + critic_norm))
        else:
            self._nonfinite_in_a_row = 0
            self.apply_gradients(self.postprocess_gradients(grads))
        # Gradients are the same on every rank after DDP's all-reduce: so are their norms.
        if not pretraining:
            step[GRAD_NORM] = float(actor_norm)
        if self._has_critic:
            step[CRITIC_GRAD_NORM] = float(critic_norm)
        return step

    def _gradient_sync(self, *, last: bool):
        """DDP's `no_sync()` for every micro-batch of a step but the last; nothing without DDP."""
        module = self.module[DEFAULT_MODULE_ID]
        if last or not hasattr(module, "no_sync"):
            return contextlib.nullcontext()
        return module.no_sync()

    def _skip_nonfinite_step(self, loss: float, grad_norm: float) -> None:
        for optim in self._optimizer_parameters:
            optim.zero_grad(set_to_none=True)
        self._count_nonfinite_step(loss, grad_norm)

    def _count_nonfinite_step(self, loss: float, grad_norm: float) -> None:
        """Count a skipped step; raise after max_consecutive_nonfinite_steps in a row."""
        cfg = self.config
        self._nonfinite_in_a_row += 1
        self._nonfinite_total += 1
        if self._nonfinite_in_a_row >= cfg.max_consecutive_nonfinite_steps:
            raise FloatingPointError(
                f"RLVR: {self._nonfinite_in_a_row} optimizer steps in a row had a non-finite "
                f"loss or gradient (last: loss={loss}, grad norm={grad_norm}); they were skipped, "
                f"and training stops here before the weights are corrupted. "
                f"{nonfinite_causes(cfg)}. max_consecutive_nonfinite_steps="
                f"{cfg.max_consecutive_nonfinite_steps} sets how many are tolerated."
            )

    # --- the loss of one micro-batch ------------------------------------------------------------
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        """RLlib's loss hook: the micro-batch's total loss (`micro_batch_loss`'s `total`). The
        step calls `micro_batch_loss` itself (it needs the metrics too): a subclass changes the
        loss there, not here."""
        return self.micro_batch_loss(config=config, batch=batch, fwd_out=fwd_out).total

    def micro_batch_loss(self, *, config, batch, fwd_out) -> MicroBatchLoss:
        """The micro-batch's total loss, one sum over named terms, each times its coefficient
        (the module docstring's formula), and its metrics: each term's value and the pg
        variant's and the critic's token statistics. The step combines the metrics of its
        micro-batches and logs them once; the loss writes nowhere."""
        context = step_context(batch)
        terms, token_stats = self._loss_terms(config, fwd_out, batch, context)
        sums = {name: float(value.detach()) for name, (_, value) in terms.items()}
        share = _token_share(batch[ACTION_MASK], context.counts)
        return MicroBatchLoss(total=total_loss(terms, like=fwd_out[LOGP]),
                              metrics=MicroBatchMetrics(sums, token_stats, share))

    def _loss_terms(self, cfg, fwd_out, batch,
                    context: StepContext) -> tuple[dict[str, LossTerm], dict[str, float]]:
        """({name: (coefficient, aggregated term)} in the order they are summed (kept fixed, so
        the sum rounds the same way in every run), the micro-batch's token statistics). Terms
        whose coefficient is 0 are there for their metric and left out of the sum."""
        mask, counts = batch[ACTION_MASK], context.counts
        norm_length = cfg.loss_agg_norm_length or cfg.response_length

        def agg(per_token: torch.Tensor, term_mask: torch.Tensor = mask,
                num_tokens: torch.Tensor | None = None) -> torch.Tensor:
            return core.agg_loss(per_token, term_mask, cfg.loss_agg_mode, norm_length=norm_length,
                                 num_tokens=counts.num_tokens if num_tokens is None else num_tokens,
                                 num_seqs=counts.num_seqs)

        terms: dict[str, LossTerm] = {}
        token_stats: dict[str, float] = {}
        if not context.value_pretraining:
            actor_terms, token_stats = self._actor_terms(cfg, fwd_out, batch, agg, context)
            terms |= actor_terms
        if VALUES in fwd_out:
            value, value_stats = self._value_loss(fwd_out[VALUES], batch, agg)
            terms[VALUE_LOSS] = (1.0 if context.value_pretraining else cfg.value_loss_coef, value)
            token_stats = {**token_stats, **value_stats}
        return terms, token_stats

    def _value_loss(self, values, batch, agg) -> tuple[torch.Tensor, dict[str, float]]:
        """The critic's loss on this micro-batch, agg(½·max((V − R)², (V_clip − R)²)), and its
        clip fraction where values are clipped."""
        cfg, mask = self.config, batch[ACTION_MASK]
        old, targets = batch[VALUES], batch[VALUE_TARGETS]
        loss = agg(core.value_loss_per_token(values, old, targets, mask,
                                             value_clip=cfg.value_clip))
        if cfg.value_clip is None:
            return loss, {}
        clipfrac = core.value_clipfrac(values, old, targets, mask, value_clip=cfg.value_clip)
        return loss, {VALUE_CLIPFRAC: float(clipfrac)}

    def _actor_terms(self, cfg, fwd_out, batch, agg,
                     context: StepContext) -> tuple[dict[str, LossTerm], dict[str, float]]:
        """The actor's terms on this micro-batch (the formula in the module docstring) and the
        pg variant's own statistics (with the rollout correction's)."""
        logp, mask = fwd_out[LOGP], batch[ACTION_MASK]  # (B, T) each
        positive = positive_rows(batch)  # (B,)
        # A variant that splits by correctness gets the correct flag as its scores
        # (core.PgVariantInfo); the others get the scores themselves.
        splits = core.pg_variant_info(cfg.pg_variant).splits_by_correct
        scores = positive if splits else batch[SCORES]
        pg_tok, pg_metrics = core.policy_loss(
            cfg.pg_variant, logp, batch[OLD_LOGP], batch[ADVANTAGES], mask,
            scores=scores, **self._pg_params,
        )
        if cfg.rollout_is_level is not None:
            # Train/inference mismatch correction (core/rollout_correction.py).
            is_weights, is_metrics = core.rollout_is_weights(
                batch[OLD_LOGP], batch[ROLLOUT_LOGP], mask,
                level=cfg.rollout_is_level, threshold=cfg.rollout_is_threshold,
            )
            pg_tok = pg_tok * is_weights
            pg_metrics = {**pg_metrics, **is_metrics}
        token_stats = {name: float(value) for name, value in pg_metrics.items()}
        terms = {PG_LOSS: (cfg.rl_loss_coef, agg(pg_tok))}
        if cfg.use_kl_loss:
            kl = core.kl_estimate(logp, batch[REF_LOGP], cfg.kl_loss_kind)
            terms[KL_LOSS] = (cfg.rl_loss_coef * cfg.kl_loss_coef, agg(kl))
        terms[ENTROPY] = (-cfg.entropy_coef, agg(fwd_out[ENTROPY_OUT]))
        if cfg.positive_nll_coef:
            terms[POSITIVE_NLL] = (cfg.positive_nll_coef, core.positive_nll_loss(
                logp, mask, positive, num_tokens=context.positive_tokens))
        if cfg.positive_loss_coef or cfg.use_topr_neg_loss_coef:
            pos_tok, pos_mask, neg_tok, neg_mask = core.roll_topr_terms(
                logp, batch[OLD_LOGP], batch[ADVANTAGES], mask, positive)
            terms[POSITIVE_LOSS] = (cfg.positive_loss_coef,
                                    agg(pos_tok, pos_mask, context.positive_tokens))
            terms[TOPR_NEG_LOSS] = (cfg.use_topr_neg_loss_coef,
                                    agg(neg_tok, neg_mask, context.negative_tokens))
        return terms, token_stats

    def _log_critic_batch_metrics(self, data: dict[str, torch.Tensor]) -> None:
        """How well the rollout-time values V_old predict this iteration's targets."""
        mask = data[ACTION_MASK]
        values, targets = data[VALUES], data[VALUE_TARGETS]
        n = mask.sum().clamp(min=1)
        for name, value in (
            (EXPLAINED_VARIANCE, core.explained_variance(values, targets, mask)),
            (VALUE_MEAN, (values * mask).sum() / n),
            (RETURN_MEAN, (targets * mask).sum() / n),
            (VALUE_MAE, ((values - targets).abs() * mask).sum() / n),
        ):
            self.metrics.log_value((DEFAULT_MODULE_ID, name), float(value), window=1)

    def optimizer_state_bytes(self) -> int:
        """Bytes of the optimizers' state this learner holds (Adam's moments; not scalars such
        as the step count), for memory accounting."""
        return tensor_state_bytes(optim.state for _, optim in
                            self.get_optimizers_for_module(DEFAULT_MODULE_ID))

    # --- checkpoints: what RLlib's Learner state leaves out -------------------------------------
    def weight_version(self) -> int:
        """The version of this learner's weights (RLlib's weights sequence number: +1 per
        update; weight syncs hand it to the env runners, whose episodes carry it)."""
        return self._weights_seq_no

    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        connector = self._learner_connector
        state[_STATE_KEY] = {
            # Adaptive KL coefficient and running reward statistics (learner/connector.py).
            "connector": connector.get_state() if connector is not None else {},
            "shuffle_rng": self._shuffle.get_state(),
            "nonfinite": (self._nonfinite_in_a_row, self._nonfinite_total),
            "value_pretrain_done": self._value_pretrain_done,
        }
        return state

    def restore_from_path(self, path, *args, **kwargs) -> None:
        """RLlib's restore, then the module's weights and Adam's state from the shards FSDP2
        learners write in their place (`shards.py`) when the checkpoint holds them: read whole
        by a torch learner, resharded by FSDP2 learners of any count."""
        super().restore_from_path(path, *args, **kwargs)
        directory = Path(path) / SHARDS_DIR
        if kwargs.get("component") is None and directory.is_dir():
            optims = list(self._named_optimizers.values())
            shards.load(self.module[DEFAULT_MODULE_ID], optims, str(directory), skip=(TEACHER,))
            for optim in optims:
                use_configured_kernel(optim, **self._adam_kernel())

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        ours = state.get(_STATE_KEY)
        if ours is None:
            return
        if self._learner_connector is not None and ours["connector"]:
            self._learner_connector.set_state(ours["connector"])
        self._shuffle.set_state(ours["shuffle_rng"])
        self._nonfinite_in_a_row, self._nonfinite_total = ours["nonfinite"]
        self._value_pretrain_done = ours.get("value_pretrain_done", 0)

    # --- weight sync by broadcast (rank 0 of the group; see exchange/weight_broadcast.py) -------
    def open_weight_broadcast(self, *, backend: str, world_size: int, timeout_s: float,
                              bucket_bytes: int) -> dict[str, Any]:
        """Host a new broadcast group (replacing any old one); returns what receivers join with."""
        from rllib_llm.exchange.weight_broadcast import Sender

        self._weight_sender = Sender(backend, self._policy_weights(), world_size=world_size,
                                     timeout_s=timeout_s, bucket_bytes=bucket_bytes)
        return self._weight_sender.address()

    def join_weight_broadcast(self) -> None:
        """Blocks until every receiver has joined the group opened by `open_weight_broadcast`."""
        self._weight_sender.join()

    def broadcast_weights(self) -> int:
        """Send the policy's current weights to every receiver; returns their version."""
        self._weight_sender.send(self._policy_weights(), version=self._weights_seq_no)
        return self._weights_seq_no

    # --- weight sync by CUDA IPC (an engine on the learner's GPU; see exchange/weight_ipc.py) ---
    def share_weights(self):
        """CUDA IPC handles to the policy's current weights and their version, for engines on
        this learner's GPU to copy from before the next update (full fine-tuning without ZeRO-3:
        the handles are the parameters themselves; the config rules refuse the rest)."""
        from rllib_llm.exchange.weight_ipc import share

        return share(self._policy_weights(), version=self._weights_seq_no)

    def _policy_weights(self) -> dict[str, torch.Tensor]:
        """The causal LM's state dict under its Hugging Face names (what engines load)."""
        return self.module[DEFAULT_MODULE_ID].unwrapped().policy_weights()


LossTerm = tuple[float, torch.Tensor]  # (coefficient, aggregated term)


@dataclass(frozen=True)
class MicroBatchLoss:
    """What one micro-batch's loss returns: the tensor backward runs on, and its metrics."""

    total: torch.Tensor  # () sum(coefficient * term), on the graph
    metrics: MicroBatchMetrics


def total_loss(terms: dict[str, LossTerm], *, like: torch.Tensor) -> torch.Tensor:
    """sum(coefficient * term) in the table's order, leaving out the terms whose coefficient is
    0 (a 0 * inf in a term nobody asked for would make the loss NaN); a zero tied to `like`'s
    graph when every coefficient is 0."""
    total = None
    for coefficient, term in terms.values():
        if coefficient:
            part = term if coefficient == 1 else coefficient * term
            total = part if total is None else total + part
    return like.sum() * 0.0 if total is None else total


def tensor_state_bytes(states) -> int:
    """Bytes of the non-scalar tensors in optimizer `states` (each {param: {name: value}})."""
    return sum(t.numel() * t.element_size() for state in states for per_param in state.values()
               for t in per_param.values() if isinstance(t, torch.Tensor) and t.dim() > 0)


def _token_share(mask: torch.Tensor, counts: core.AggCounts) -> float:
    """This micro-batch's mask tokens over the whole mini-batch's (weights its masked means)."""
    total = float(counts.num_tokens)
    return float(mask.sum()) / total if total > 0 else 0.0


def _global_norm(grads) -> torch.Tensor:
    norms = [g.detach().double().norm() for g in grads]
    return torch.stack(norms).norm() if norms else torch.zeros((), dtype=torch.float64)


def _detached(tree: Any) -> Any:
    """A copy of a (nested) optimizer state with CPU tensors."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().clone()
    if isinstance(tree, dict):
        return {k: _detached(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_detached(v) for v in tree)
    return tree


# A learning rate above this is large for fine-tuning a pretrained LM (recipes use 1e-6 to 1e-5;
# the tiny embedded model's demo schedule peaks at 4e-4).
LARGE_LR = 1e-3


def nonfinite_causes(cfg) -> str:
    """The likely causes of non-finite steps that `cfg` shows, each with its fix: a large
    learning rate, a 16-bit dtype, no gradient clipping; non-finite rewards are always
    possible."""
    lr = cfg.lr
    peak = max(value for _, value in lr) if isinstance(lr, (list, tuple)) else lr
    causes = []
    if peak > LARGE_LR:
        peaks = "" if peak == lr else f", peaking at {peak:g}"
        causes.append(f"a learning rate too high (lr={lr!r}{peaks}: above {LARGE_LR:g} is large "
                      "for fine-tuning a pretrained model; try 1e-5 or lower)")
    if cfg.model_dtype == "float16":
        causes.append("too little precision (model_dtype='float16': try 'bfloat16' or "
                      "'float32')")
    elif cfg.model_dtype == "bfloat16":
        causes.append("too little precision (model_dtype='bfloat16': try 'float32')")
    if cfg.grad_clip is None:
        causes.append("no gradient clipping (grad_clip=None: set e.g. grad_clip=1.0)")
    rewards = "non-finite rewards or advantages (a verifier's or a custom estimator's)"
    if not causes:
        return (f"lr={lr!r}, model_dtype={cfg.model_dtype!r} and grad_clip={cfg.grad_clip!r} are "
                f"not the usual suspects; likely cause: {rewards}, else lower lr")
    return f"Likely causes: {', '.join(causes)}, or {rewards}"
