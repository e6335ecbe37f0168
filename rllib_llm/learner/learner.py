"""`RLVRLearner`: the actor loss of ALGORITHMS.md on RLlib's TorchLearner.

    L = rl_loss_coef * (agg(L_pg) + [use_kl_loss] * kl_loss_coef * agg(kl(logp, ref_logp)))
        - entropy_coef * agg(entropy) + positive_nll_coef * positive_nll_loss

Every term is normalised by the counts of the whole mini-batch, computed before it is split into
micro-batches, so `micro_batch_size` changes memory use and nothing else.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner

from rllib_llm import core
from rllib_llm.rollout.threads import set_torch_threads

# Metric names the learner logs per module (besides the pg variant's own metrics).
PG_LOSS = "pg_loss"
KL_LOSS = "kl_loss"
ENTROPY = "entropy"
POSITIVE_NLL = "positive_nll_loss"
TOTAL_LOSS = "loss"
TOKENS_PER_S = "learner_tokens_per_s"


class RLVRLearner(TorchLearner):
    def build(self) -> None:
        core.restore_registrations(self.config.user_registrations)  # the driver's, if remote
        set_torch_threads(self.config.num_torch_threads)
        super().build()
        cfg = self.config
        params = core.pg_variant_params(cfg.pg_variant)
        # The variant's parameters come from config fields of the same name, else from
        # pg_variant_kwargs (for variants users registered themselves).
        self._pg_params = {
            name: getattr(cfg, name) for name in params if hasattr(cfg, name)
        } | dict(cfg.pg_variant_kwargs)
        self._counts: core.AggCounts | None = None
        self._positive_tokens: torch.Tensor | None = None

    def get_parameters(self, module) -> list[torch.nn.Parameter]:
        # The frozen reference model is part of the module but never optimised.
        return [p for p in module.parameters() if p.requires_grad]

    def _get_optimizer_state(self) -> dict[str, Any]:
        # RLlib converts optimizer state to numpy, which has no bfloat16 (Adam's moments of a
        # bf16 model are bf16): keep torch tensors, as RLVRModule.get_state does.
        return {
            name: {"module_id": self._optimizer_name_to_module[name],
                   "state": _detached(optim.state_dict())}
            for name, optim in self._named_optimizers.items()
        }

    def _uncompiled_update(self, batch: dict[str, Any], **kwargs):
        """One optimizer step over a mini-batch, accumulated over micro-batches."""
        start = time.perf_counter()
        data = batch[DEFAULT_MODULE_ID]
        mask = data["action_mask"]
        self._counts = core.agg_counts(mask)
        positive = (data["scores"] > 0).to(mask.dtype).unsqueeze(-1)  # (B, 1)
        self._positive_tokens = (mask * positive).sum()
        for optim in self._optimizer_parameters:
            optim.zero_grad(set_to_none=True)
        total = torch.zeros(())
        fwd_out = {}
        for micro in _split(data, self.config.micro_batch_size):
            fwd_out = self.module.forward_train({DEFAULT_MODULE_ID: micro})
            losses = self.compute_losses(fwd_out=fwd_out, batch={DEFAULT_MODULE_ID: micro})
            loss = losses[DEFAULT_MODULE_ID]
            loss.backward()
            total = total + loss.detach()
        grads = {pid: p.grad for pid, p in self._params.items() if p.grad is not None}
        self.apply_gradients(self.postprocess_gradients(grads))
        seconds = time.perf_counter() - start
        self.metrics.log_value((DEFAULT_MODULE_ID, TOKENS_PER_S),
                               float(data["attention_mask"].sum()) / seconds, window=1)
        return fwd_out, {DEFAULT_MODULE_ID: total}, {}

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        cfg = config
        logp, mask = fwd_out["logp"], batch["action_mask"]  # (B, T) each
        counts = self._counts or core.agg_counts(mask)
        norm_length = cfg.loss_agg_norm_length or cfg.response_length

        def agg(per_token: torch.Tensor) -> torch.Tensor:
            return core.agg_loss(per_token, mask, cfg.loss_agg_mode, norm_length=norm_length,
                                 num_tokens=counts.num_tokens, num_seqs=counts.num_seqs)

        pg_tok, pg_metrics = core.policy_loss(
            cfg.pg_variant, logp, batch["old_logp"], batch["advantages"], mask,
            scores=batch["scores"], **self._pg_params,
        )
        if cfg.rollout_is_level is not None:
            # Train/inference mismatch correction (core/rollout_correction.py).
            is_weights, is_metrics = core.rollout_is_weights(
                batch["old_logp"], batch["rollout_logp"], mask,
                level=cfg.rollout_is_level, threshold=cfg.rollout_is_threshold,
            )
            pg_tok = pg_tok * is_weights
            pg_metrics = {**pg_metrics, **is_metrics}
        pg_loss = agg(pg_tok)
        loss = pg_loss
        if cfg.use_kl_loss:
            kl = agg(core.kl_estimate(logp, batch["ref_logp"], cfg.kl_loss_kind))
            loss = loss + cfg.kl_loss_coef * kl
            self._log(module_id, KL_LOSS, kl)
        loss = cfg.rl_loss_coef * loss
        entropy = agg(fwd_out["entropy"].detach() if cfg.entropy_coef == 0 else fwd_out["entropy"])
        if cfg.entropy_coef:
            loss = loss - cfg.entropy_coef * entropy
        if cfg.positive_nll_coef:
            nll = core.positive_nll_loss(logp, mask, batch["scores"],
                                         num_tokens=self._positive_tokens)
            loss = loss + cfg.positive_nll_coef * nll
            self._log(module_id, POSITIVE_NLL, nll)
        self._log(module_id, PG_LOSS, pg_loss)
        self._log(module_id, ENTROPY, entropy)
        self._log(module_id, TOTAL_LOSS, loss)
        for name, value in pg_metrics.items():
            self._log(module_id, name, value)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"RLVR loss is {loss.item()} (pg_loss={pg_loss.item()}): stopping before the "
                "update corrupts the weights. Lower lr, set grad_clip, or check the rewards."
            )
        return loss

    # --- weight sync by broadcast (rank 0 of the group; see rollout/weight_broadcast.py) -------
    def open_weight_broadcast(self, *, backend: str, world_size: int, timeout_s: float,
                              bucket_bytes: int) -> dict[str, Any]:
        """Host a new broadcast group (replacing any old one); returns what receivers join with."""
        from rllib_llm.rollout.weight_broadcast import Sender

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

    def _policy_weights(self) -> dict[str, torch.Tensor]:
        """The causal LM's state dict under its Hugging Face names (what engines load)."""
        return self.module[DEFAULT_MODULE_ID].model.state_dict()

    def _log(self, module_id: str, name: str, value: torch.Tensor) -> None:
        self.metrics.log_value((module_id, name), float(value.detach()), window=1)


def _detached(tree: Any) -> Any:
    """A copy of a (nested) optimizer state with CPU tensors."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().clone()
    if isinstance(tree, dict):
        return {k: _detached(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_detached(v) for v in tree)
    return tree


def _split(data: dict[str, torch.Tensor], size: int | None):
    """Micro-batches of `size` rows (all rows when size is None)."""
    n = data["action_mask"].shape[0]
    size = size or n
    for start in range(0, n, size):
        yield {k: v[start : start + size] for k, v in data.items()}
