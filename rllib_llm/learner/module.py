"""`RLVRModule`: an RLlib TorchRLModule around a Hugging Face causal LM (+ frozen reference,
+ a critic for adv_estimator='gae').

The learner's batch packs each response after its left-padded prompt:

    input_ids  (B, P + T)   [pad pad p0 p1 p2 | a0 a1 e0 a2 pad]
    action_mask (B, T)                        [ 1  1  0  1  0 ]   (0 = padding or env token)

so one causal-LM forward per packed response gives the log-prob of every response token, never
one forward per token. Token t of the response is predicted by the logits at position P + t - 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule

from rllib_llm.exchange.columns import (
    ATTENTION_MASK,
    ENTROPY,
    INPUT_IDS,
    LOGP,
    RESPONSE_IDS,
    VALUES,
)
from rllib_llm.exchange.devices import mixed_precision, module_device
from rllib_llm.exchange.memory_budgets import (
    AUTO,
    CPU_MICRO_BATCH_TOKENS,
    budgets_for_device,
    free_device_bytes,
    model_shape,
    sizing_note,
)
from rllib_llm.exchange.precision import autocast_for_device, precision_note, warn_if_emulated
from rllib_llm.learner import micro_batches, remove_padding
from rllib_llm.learner.module_settings import ModuleSettings
from rllib_llm.learner.sharded_hooks import in_own_forward, release_gathered
from rllib_llm.learner.tensor_state import TensorState
from rllib_llm.learner.token_logp import head_token_logp_and_entropy, token_logp_and_entropy
from rllib_llm.models import DTYPES, load_model, lora
from rllib_llm.models.value_model import (
    last_hidden_state,
    load_value_model,
    value_head,
)

MODEL = "model"  # the causal LM
REFERENCE = "reference_model"
# On-policy distillation's frozen teacher (teacher_model_name_or_path), on learners only.
TEACHER = "teacher_model"
# forward_train's keyword that runs a function inside the module's forward (see `forward_via`).
RUN_IN_FORWARD = "run_in_forward"
CRITIC = "critic"  # a separate value model (models/value_model.py)
VALUE_HEAD = "value_head"  # a value head on the policy's own trunk
# Hugging Face config attributes of a step between the LM head and the logits (Gemma's soft-capping,
# Cohere's and Granite's logit scales): fused kernels would skip it.
POST_HEAD_SETTINGS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
# What env runners (inference_only=True) never build, hold or receive.
NON_INFERENCE = (REFERENCE, CRITIC, VALUE_HEAD, TEACHER)


@dataclass(frozen=True)
class DeviceBudgets:
    """The learner settings whose "auto" depends on the device the module computes on.

    Attributes:
        micro_batch_tokens: the micro-batch token budget every learner pass keeps (None: none).
        gradient_checkpointing: the trunks recompute layer activations in backward.
        autocast_dtype: the dtype learner passes autocast to (None: off).
        note: what was sized for the device, for the learner's device line ("" if nothing).
    """

    micro_batch_tokens: int | None
    gradient_checkpointing: bool
    autocast_dtype: torch.dtype | None
    note: str = ""


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding, as Hugging Face `generate` assigns them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, L)


def response_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, t: int
) -> torch.Tensor:
    """Logits that predict the last `t` tokens of `input_ids`: (B, t, V)."""
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_for(attention_mask),
        # Only the response positions need logits: (B, T+1, V) instead of (B, P+T, V).
        logits_to_keep=t + 1,
        use_cache=False,
    )
    return out.logits[:, :-1]  # (B, T, V)


class RLVRModule(TorchRLModule, InferenceOnlyAPI, ValueFunctionAPI):
    """The policy LM, plus a frozen reference LM on learners that need a KL term, plus a critic
    on learners of adv_estimator='gae', plus a frozen teacher LM on learners that distil.

    Its model_config is a `ModuleSettings` (module_settings.py; RLlib hands it over as a dict,
    read back once in `setup` as `self.settings`). The "auto" budgets are the CPU's until the
    learner sizes them for its device (`size_for_device`, `use_budgets`).
    Env runners build the module with `inference_only=True`: the policy alone.
    """

    def setup(self) -> None:
        self.settings = cfg = ModuleSettings.of(self.model_config)
        self.temperature = float(cfg.temperature)
        # The learner's models may take another attention than env runners' (inference_only).
        attention = None if self.inference_only else cfg.attn_implementation
        loads = dict(dtype=cfg.model_dtype, attn_implementation=attention)
        self.model = load_model(cfg.model_name_or_path, **loads)
        self.entropy_grad = bool(cfg.entropy_grad)
        self.micro_batch_rows = cfg.micro_batch_rows
        # LoRA (models/lora.py): the learner trains adapters on the frozen base; env runners hold
        # plain weights and receive merged ones. The reference is the base, adapters off.
        self.lora = cfg.lora
        self._adapters = bool(self.lora) and not self.inference_only
        if self._adapters:
            lora.add_adapters(self.model, self.lora)
        self.fused_kernels = bool(cfg.fused_kernels) and not self.inference_only
        self.remove_padding = bool(cfg.remove_padding) and not self.inference_only
        self._check_hidden_paths(self.model)
        self._reference_is_base = self._adapters and bool(cfg.use_reference)
        if cfg.use_reference and not self.inference_only and not self._adapters:
            ref = load_model(cfg.model_name_or_path, **loads)
            ref.requires_grad_(False)
            self.reference_model = ref.eval()
        if cfg.teacher and not self.inference_only:
            # Scored at self.temperature like the student (`score_teacher_tokens`); never
            # trained, never checkpointed (get_state), never sent to env runners.
            teacher = load_model(cfg.teacher, **loads)
            teacher.requires_grad_(False)
            self._check_hidden_paths(teacher)
            self.teacher_model = teacher.eval()
        critic = cfg.critic
        if critic and not self.inference_only:
            if critic.shares_trunk:
                self.value_head = value_head(self.model.config.hidden_size,
                                             DTYPES[cfg.model_dtype])
            else:
                self.critic = load_value_model(critic.model_name_or_path, **loads)
                if self.remove_padding:
                    remove_padding.check_packed_rows(self.critic.trunk)
        # The budgets where the module is built, the CPU ("auto": the CPU's), until the learner
        # has placed it and takes the budgets sized for its device (`size_for_device`,
        # `use_budgets`).
        tokens = cfg.micro_batch_tokens
        self.budgets = DeviceBudgets(
            micro_batch_tokens=CPU_MICRO_BATCH_TOKENS if tokens == AUTO else tokens,
            gradient_checkpointing=cfg.gradient_checkpointing is True
            and not self.inference_only,
            autocast_dtype=self._autocast_on(torch.device("cpu")))
        if self.budgets.gradient_checkpointing:
            for trunk in self._trunks():
                enable_gradient_checkpointing(trunk)

    @property
    def micro_batch_tokens(self) -> int | None:
        """The learner's micro-batch token budget, which scoring passes keep too."""
        return self.budgets.micro_batch_tokens

    @property
    def gradient_checkpointing(self) -> bool:
        return self.budgets.gradient_checkpointing

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return self.budgets.autocast_dtype

    def _autocast_on(self, device: torch.device) -> torch.dtype | None:
        """The dtype this module's learner passes autocast to on `device` (None: off)."""
        autocast = autocast_for_device(self.settings.autocast_dtype, device)
        return None if autocast is None or self.inference_only else DTYPES[autocast]

    def _check_hidden_paths(self, model: torch.nn.Module) -> None:
        """Reject a causal LM that fused kernels or remove_padding would score wrongly: both
        run its LM head on its trunk's last hidden states (`check_fused_head`, once), and
        remove_padding packs rows its trunk must keep apart (`check_packed_rows`)."""
        if self.fused_kernels or self.remove_padding:
            check_fused_head(model, setting="use_fused_kernels" if self.fused_kernels
                             else "use_remove_padding")
        if self.remove_padding:
            remove_padding.check_packed_rows(model.base_model)

    def _trunks(self) -> list[torch.nn.Module]:
        """The models gradient checkpointing applies to: the policy's, and a critic's trunk."""
        critic_trunk = getattr(getattr(self, CRITIC, None), "trunk", None)
        return [t for t in (self.model, critic_trunk) if t is not None]

    def size_for_device(self, share: float, free_bytes: int | None = None) -> DeviceBudgets:
        """The "auto" learner settings for the device the module is on, once the learner has
        placed it there (`use_budgets` takes them; this changes nothing). On a GPU: gradient
        checkpointing on (where every trunk supports it), and the micro-batch budget what fits
        `share` of the GPU's free memory (exchange/memory_budgets.py). On a CPU the budgets of
        `setup` stay. On either, an "auto" autocast_dtype is bfloat16 where the device computes
        it natively (exchange/precision.py), and an explicit bf16 that the CPU emulates warns
        once.

        `free_bytes`: the device's free memory (default: asked of torch, now).
        """
        cfg = self.settings
        device = module_device(self.model)
        if self.remove_padding:
            remove_padding.check_attention_for_device(self.model, device)
        if self.inference_only:
            return self.budgets
        # bf16 only where the device computes it natively ("auto"); a warning where it is asked
        # for explicitly and emulated.
        autocast = self._autocast_on(device)
        notes = [note for note in (precision_note(cfg.autocast_dtype, device),) if note]
        warn_if_emulated(cfg.autocast_dtype, device, setting="autocast_dtype")
        warn_if_emulated(cfg.model_dtype, device, setting="model_dtype")
        if free_bytes is None:
            free_bytes = free_device_bytes(device)
        if free_bytes is None:
            return replace(self.budgets, autocast_dtype=autocast, note=", ".join(notes))
        checkpointing, tokens = self.budgets.gradient_checkpointing, self.budgets.micro_batch_tokens
        if cfg.gradient_checkpointing == AUTO:
            checkpointing = all(getattr(t, "supports_gradient_checkpointing", False)
                                for t in self._trunks())
            notes.append(f"gradient_checkpointing={checkpointing} (auto)")
        if cfg.micro_batch_tokens == AUTO:
            others = [getattr(self, name) for name in NON_INFERENCE if hasattr(self, name)]
            shape = model_shape(self.model, others=others, trained=True)
            free_before = free_bytes + shape.weight_bytes  # (its weights are there already)
            _, tokens = budgets_for_device(free_before, share, shape,
                                           gradient_checkpointing=checkpointing)
            notes.append(f"max_tokens_per_micro_batch={tokens} "
                         f"({sizing_note(free_before, share)})")
        return DeviceBudgets(tokens, checkpointing, autocast, ", ".join(notes))

    def use_budgets(self, budgets: DeviceBudgets) -> None:
        """Take `budgets` (`size_for_device`'s) as this module's: the one change to them after
        `setup`, made by the learner once it has placed the module on its device."""
        if budgets.gradient_checkpointing and not self.budgets.gradient_checkpointing:
            for trunk in self._trunks():
                enable_gradient_checkpointing(trunk)
        self.budgets = budgets

    def train(self, mode: bool = True):
        """The learner switches the module to training mode; the reference stays in eval mode
        (it scores, never trains: dropout there would make its log-probs random)."""
        super().train(mode)
        for frozen in (REFERENCE, TEACHER):
            if hasattr(self, frozen):
                getattr(self, frozen).eval()
        return self

    def get_non_inference_attributes(self) -> list[str]:
        return list(NON_INFERENCE)

    @property
    def has_reference(self) -> bool:
        return hasattr(self, REFERENCE) or self._reference_is_base

    @property
    def has_teacher(self) -> bool:
        return hasattr(self, TEACHER)

    @property
    def has_critic(self) -> bool:
        return hasattr(self, CRITIC) or hasattr(self, VALUE_HEAD)

    def policy_parameters(self) -> list[torch.nn.Parameter]:
        """What the actor's optimizer trains (a shared trunk included)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def critic_parameters(self) -> list[torch.nn.Parameter]:
        """What the critic's optimizer trains: the value model, or the head on a shared trunk."""
        critic = getattr(self, CRITIC, None) or getattr(self, VALUE_HEAD, None)
        return [] if critic is None else [p for p in critic.parameters() if p.requires_grad]

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        """Next-token logits after each sequence: {"action_dist_inputs": (B, V)}."""
        logits = response_logits(self.model, batch[INPUT_IDS], batch[ATTENTION_MASK], 1)
        return {"action_dist_inputs": logits[:, -1] / self.temperature}

    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        """log-probs and entropies (B, T) of the response tokens, and their values (B, T) when
        the module has a critic. (`RUN_IN_FORWARD=fn` runs fn instead: see `forward_via`.)"""
        run = kwargs.get(RUN_IN_FORWARD)
        with self._autocast():
            return run() if run is not None else self._policy_and_values(batch)

    def _autocast(self):
        """torch.autocast to `autocast_dtype` on the policy's device (a no-op without it): the
        float32 weights are cast per op, and backward follows the recorded casts."""
        return mixed_precision(self.autocast_dtype, module_device(self.model))

    def _policy_and_values(self, batch: dict[str, Any]) -> dict[str, Any]:
        out = {}
        hidden = None
        if hasattr(self, VALUE_HEAD):
            # One trunk pass serves both heads: the policy's (its LM head on the last hidden
            # states, as the causal LM computes its logits) and the values.
            hidden = in_own_forward(self.model, lambda: self._trunk_hidden(batch))  # (B, L, H)
            out[VALUES] = self._values(self.value_head, hidden, batch)
        elif self.has_critic:
            out[VALUES] = self.compute_values(batch)
        out[LOGP], out[ENTROPY] = self._token_logp(self.model, batch, hidden,
                                                   entropy_grad=self.entropy_grad)
        return out

    def _token_logp(self, model: torch.nn.Module, batch: dict[str, Any],
                    hidden: torch.Tensor | None = None, *, entropy_grad: bool):
        """log pi and the entropy (B, T) of the response tokens under `model`, from its trunk's
        last hidden states (`_trunk_hidden`'s layout) where given or fused kernels or
        remove_padding need them, else from its logits."""
        if hidden is None and not (self.fused_kernels or self.remove_padding):
            tokens = batch[RESPONSE_IDS]  # (B, T)
            logits = response_logits(model, batch[INPUT_IDS], batch[ATTENTION_MASK],
                                     tokens.shape[1])
            return token_logp_and_entropy(logits, tokens, self.temperature,
                                          entropy_grad=entropy_grad)
        return in_own_forward(model, lambda: self._head_token_logp(model, batch, hidden,
                                                                   entropy_grad=entropy_grad))

    def _head_token_logp(self, model: torch.nn.Module, batch: dict[str, Any],
                         hidden: torch.Tensor | None, *, entropy_grad: bool):
        """`_token_logp` from the LM head on the trunk's last hidden states."""
        if hidden is None:
            hidden = self._trunk_hidden(batch, model.base_model)
        states, tokens, place = self._response_states(hidden, batch)
        head = model.get_output_embeddings()
        if self.fused_kernels:  # the LM head chunk by chunk: no (R, C, V) logits held
            logp, entropy = head_token_logp_and_entropy(states, head, tokens, self.temperature,
                                                        entropy_grad=entropy_grad)
        else:
            logp, entropy = token_logp_and_entropy(head(states), tokens, self.temperature,
                                                   entropy_grad=entropy_grad)
        return place(logp), place(entropy)

    def _values(self, head: torch.nn.Module, hidden: torch.Tensor,
                batch: dict[str, Any]) -> torch.Tensor:
        """Values (B, T) of the response tokens' states from a trunk's last hidden states
        (`_trunk_hidden`'s layout) and a value head, in float32 (the GAE recursion sums them)."""
        states, _, place = self._response_states(hidden, batch)
        return place(head(states).squeeze(-1).float())

    def _response_states(self, hidden: torch.Tensor, batch: dict[str, Any]):
        """From a trunk's last hidden states (`_trunk_hidden`'s layout): the states (R, C, H)
        that predict the response tokens, those tokens (R, C), and the function that lays
        (R, C) values out as (B, T). Padded, the positions before each of the last T + 1 (R, C
        = B, T); unpadded, each real response token's predictor (1, n), 0 at padding after."""
        tokens = batch[RESPONSE_IDS]  # (B, T)
        if not self.remove_padding:
            return hidden[:, -(tokens.shape[1] + 1) : -1], tokens, lambda values: values
        rows = remove_padding.unpad(batch)
        return remove_padding.response_hidden(hidden, rows), rows.response_ids, rows.scatter

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        """RLlib's ValueFunctionAPI: V (B, T) of the state before each response token."""
        if not self.has_critic:
            raise ValueError(
                "RLVRModule has no critic: it is built for adv_estimator='gae' on learners "
                "(env runners never hold one)."
            )
        if hasattr(self, VALUE_HEAD):
            hidden = in_own_forward(self.model, lambda: self._trunk_hidden(batch))
            return self._values(self.value_head, hidden, batch)
        critic = self.critic
        return in_own_forward(critic, lambda: self._values(
            critic.head, self._trunk_hidden(batch, critic.trunk), batch))

    def _trunk_hidden(self, batch: dict[str, Any], trunk: torch.nn.Module | None = None):
        """A trunk's (default: the policy's) last hidden states: (B, L, H) of the padded rows,
        or (1, N, H) of their real tokens with remove_padding."""
        trunk = self.model.base_model if trunk is None else trunk
        if self.remove_padding:
            return remove_padding.trunk_hidden(trunk, remove_padding.unpad(batch))
        return last_hidden_state(trunk, batch[INPUT_IDS], batch[ATTENTION_MASK],
                                 position_ids_for(batch[ATTENTION_MASK]))

    @torch.no_grad()
    def score_values(self, batch: dict[str, Any]) -> torch.Tensor:
        """The critic's values (B, T) at rollout time (V_old), no grad, in eval mode and in the
        learner's micro-batches, like `score_tokens`."""
        critic = getattr(self, CRITIC, None) or self.model
        return self._in_eval_chunks(critic, batch, self.compute_values)

    def _in_eval_chunks(self, model: torch.nn.Module, batch: dict[str, Any], fn) -> torch.Tensor:
        """fn (rows, T') over the learner's micro-batches of `batch` (the same token and row
        budget: micro_batches.py), put back together as (B, T); `model` in eval mode."""
        was_training = model.training
        model.eval()
        try:
            keys = (INPUT_IDS, ATTENTION_MASK, RESPONSE_IDS)
            return micro_batches.map_rows(
                lambda rows: self._in_forward(lambda: fn(rows)), {k: batch[k] for k in keys},
                max_tokens=self.micro_batch_tokens, max_rows=self.micro_batch_rows,
                unpadded=self.remove_padding)
        finally:
            model.train(was_training)
            release_gathered(model)

    # A DeepSpeed learner sets `forward_via` to a call of its engine's forward, which runs the
    # module's forward_train: DeepSpeed starts its bookkeeping for a forward there (gradient
    # accumulation across micro-batches; under ZeRO-3 the gathering of weights), so scoring
    # runs inside it too, as `RUN_IN_FORWARD`.
    forward_via = None

    def _in_forward(self, fn):
        if self.forward_via is not None:
            return self.forward_via(fn)  # via _forward_train, under its autocast
        with self._autocast():
            return fn()

    @torch.no_grad()
    def score_tokens(self, batch: dict[str, Any], *, reference: bool) -> torch.Tensor:
        """log-probs (B, T) of the response tokens under the policy or the reference, no grad.

        In eval mode (no dropout) and in the learner's micro-batches, so scoring a whole rollout
        batch never needs more memory than training.
        """
        if reference and self._reference_is_base:
            with lora.adapters_disabled(self.model):
                return self.score_tokens(batch, reference=False)
        model = self.reference_model if reference else self.model

        return self._in_eval_chunks(  # (B, T)
            model, batch, lambda rows: self._token_logp(model, rows, entropy_grad=False)[0])

    @torch.no_grad()
    def score_teacher_tokens(self, batch: dict[str, Any]) -> torch.Tensor:
        """log-probs (B, T) of the response tokens under the distillation teacher, no grad: of its
        logits / temperature, as the student's are, in eval mode and in the learner's
        micro-batches (like `score_tokens`)."""
        if not self.has_teacher:
            raise ValueError("RLVRModule has no teacher: set teacher_model_name_or_path (learners "
                             "only; env runners never hold one).")
        teacher = self.teacher_model
        return self._in_eval_chunks(  # (B, T)
            teacher, batch, lambda rows: self._token_logp(teacher, rows, entropy_grad=False)[0])

    # RLlib's default get_state converts to numpy, which has no bfloat16: keep torch tensors,
    # in a TensorState so that Ray still moves their bytes without pickling them. Like RLlib's
    # numpy views, CPU tensors alias the parameters (no copy: whoever keeps them pickles or
    # copies them; a sync of SmolLM2-135M spent 0.26 s in a clone here).
    #
    # With LoRA the learner's state holds the adapters and not the frozen base (it comes from
    # model_name_or_path), and its inference-only state (what env runners receive) the merged
    # weights under the model's own names.
    #
    # Under ZeRO-3 a DeepSpeed learner sets `partitioned` (learner/deepspeed_learner.py): the
    # parameters are then empty placeholders, and state dicts are gathered from, and loaded
    # into, every learner's partition (collectives: every learner calls these at once).
    partitioned = None

    def get_state(self, components=None, *, not_components=None, inference_only=False, **kw):
        if inference_only and self._adapters:
            state = {f"{MODEL}.{k}": v for k, v in self.policy_weights().items()}
        elif self.partitioned is not None:
            state = self.partitioned.state_dict(
                include=lambda k: not (inference_only and _non_inference(k) or _teacher(k)
                                       or self._adapters and _frozen_base(k)))
        else:
            state = self.state_dict()
        # The teacher is frozen and comes from teacher_model_name_or_path: checkpoints (and
        # weight syncs) never carry it, however large it is.
        state = {k: v for k, v in state.items() if not _teacher(k)}
        if inference_only:
            state = {k: v for k, v in state.items() if not _non_inference(k)}
        elif self._adapters:
            state = {k: v for k, v in state.items() if not _frozen_base(k)}
        return TensorState({k: v.detach().cpu() for k, v in state.items()})

    def policy_weights(self) -> dict[str, torch.Tensor]:
        """The causal LM's weights under its Hugging Face names (what engines load), the
        adapters merged in."""
        if self.partitioned is None:
            return lora.merged_weights(self.model) if self._adapters else self.model.state_dict()
        prefix = f"{MODEL}."
        state = {k[len(prefix):]: v for k, v in self.partitioned.state_dict(
            include=lambda k: k.startswith(prefix)).items()}  # {} on all ranks but the first
        # LoRA: the adapters gathered with the base (a few KB more), merged on its CPU copy.
        return lora.merged_state(state, scaling=self.lora["alpha"] / self.lora["rank"]) \
            if self._adapters else state

    def set_state(self, state: dict[str, Any]) -> None:
        tensors = {k: torch.as_tensor(v) for k, v in state.items()}
        adapters = lora.adapter_weights(tensors)
        if adapters and not self._adapters:
            # A LoRA learner's state into plain weights (an export): merge into the base.
            tensors = self._merged(tensors, adapters)
        if self.partitioned is not None:
            missing, unexpected = self.partitioned.load(tensors)
        else:
            # A tensor that already is the weight (a sampler sharing the learner's model) is not
            # copied onto itself.
            own = self.state_dict()
            same = {k for k, v in tensors.items() if k in own and v.shape == own[k].shape
                    and v.data_ptr() == own[k].data_ptr()}
            missing, unexpected = self.load_state_dict(
                {k: v for k, v in tensors.items() if k not in same}, strict=False)
            missing = [k for k in missing if k not in same]
        # An inference-only copy never holds reference or critic, a LoRA state never the frozen
        # base, no state the teacher; anything else missing is a bug.
        missing = [k for k in missing if not _non_inference(k) and not _teacher(k)
                   and not (adapters and _frozen_base(k))]
        if missing or unexpected:
            raise ValueError(
                f"RLVRModule.set_state: state does not fit this model (missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}); was it saved from another model_name_or_path?"
            )

    def _merged(self, state: dict[str, torch.Tensor], adapters: dict[str, torch.Tensor]):
        """`state` with its adapters merged into this module's weights, which must be the base
        (a module freshly built from model_name_or_path, as `checkpoints.load_policy` builds
        one; env runners never get here: they receive merged weights)."""
        if not self.lora:
            raise ValueError(
                "RLVRModule.set_state: the state holds LoRA adapters, but this module was built "
                "without lora_rank; build it from the run's config."
            )
        prefix = f"{MODEL}."
        merged = lora.merge_adapters(
            self.model.state_dict(), {k[len(prefix):]: v for k, v in adapters.items()},
            scaling=self.lora["alpha"] / self.lora["rank"])
        rest = {k: v for k, v in state.items() if k not in adapters}
        return {**rest, **{prefix + k: v for k, v in merged.items()}}


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Hugging Face's gradient checkpointing on `model` (a causal LM or its trunk): each layer's
    activations are recomputed in the backward pass instead of kept. Non-reentrant: it needs no
    input that requires a gradient (a LoRA model's embeddings are frozen), and it restores the
    RNG state, so dropout draws the same masks twice and the gradients are the plain ones."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"RLVRConfig.gradient_checkpointing=True: {type(model).__name__} does not support "
            "Hugging Face's gradient checkpointing; set gradient_checkpointing=False.")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def check_fused_head(model: torch.nn.Module, setting: str = "use_fused_kernels") -> None:
    """Raise ValueError unless the model's logits are its LM head, a plain linear layer, on its
    trunk's last hidden states: what fused kernels compute from. A model that scales or
    soft-caps its logits, or a LoRA adapter on the head, is rejected rather than trained on
    other log-probs than it samples from: by the config's names for such a step, and by
    comparing both on a 3-token input (the same matmul on the same hidden states). `setting`:
    the config's setting that needs it (use_remove_padding runs the head on hidden states too).
    """
    head = model.get_output_embeddings()
    scaling = [name for name in POST_HEAD_SETTINGS
               if getattr(model.config, name, None) not in (None, 1, 1.0)]
    why = None
    if type(head) is not torch.nn.Linear:
        kind = type(head)
        why = f"its LM head is a {kind.__module__}.{kind.__qualname__}, not a plain torch.nn.Linear"
    elif scaling:
        why = f"the model's config sets {', '.join(scaling)} (applied to the logits after the head)"
    else:
        ids = torch.arange(min(3, head.out_features))[None]
        mask = torch.ones_like(ids)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits = response_logits(model, ids, mask, ids.shape[1] - 1)  # all 3 positions
                hidden = last_hidden_state(model.base_model, ids, mask, position_ids_for(mask))
                ours = head(hidden)[:, :-1]
        finally:
            model.train(was_training)
        if not torch.allclose(ours.float(), logits.float(), rtol=1e-4, atol=1e-5):
            why = "its logits are not its LM head on its last hidden states"
    if why:
        raise ValueError(f"RLVRConfig.{setting}=True computes log-probs from the LM head "
                         f"on the last hidden states, but {why}; set {setting}=False.")


def _frozen_base(key: str) -> bool:
    """Whether a state-dict key is a frozen base weight of a LoRA policy (not the adapters)."""
    return key.split(".", 1)[0] == MODEL and ".lora_" not in key


def _teacher(key: str) -> bool:
    """Whether a state-dict key is a weight of the distillation teacher."""
    return key.split(".", 1)[0] == TEACHER


def _non_inference(key: str) -> bool:
    """Whether a state-dict key belongs to a part env runners never hold."""
    return key.split(".", 1)[0] in NON_INFERENCE
