"""`RLVRModule`: an RLlib TorchRLModule around a Hugging Face causal LM (+ frozen reference).

The learner's batch packs each response after its left-padded prompt:

    input_ids  (B, P + T)   [pad pad p0 p1 p2 | a0 a1 e0 a2 pad]
    action_mask (B, T)                        [ 1  1  0  1  0 ]   (0 = padding or env token)

so one causal-LM forward per packed response gives the log-prob of every response token, never
one forward per token. Token t of the response is predicted by the logits at position P + t - 1.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule

from rllib_llm.learner.tensor_state import TensorState
from rllib_llm.models import load_model

REFERENCE = "reference_model"


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


def token_logp_and_entropy(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float, *,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(token) and the entropy of pi under logits / temperature, both (B, T).

    The sampler drew tokens from softmax(logits / temperature), so the learner scores them the
    same way; computed in float32 so bf16 models do not lose the small log-prob differences
    that importance ratios are made of. With `entropy_grad=False` the entropy is computed
    without autograd: it is then only a metric, and its (B, T, V) graph would cost memory.
    """
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)  # (B, T, V)
    logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (B, T)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = -(logp_all.exp() * logp_all).sum(-1)  # (B, T)
    return logp, entropy


class RLVRModule(TorchRLModule, InferenceOnlyAPI):
    """The policy LM, plus a frozen reference LM on learners that need a KL term.

    model_config keys: `model_name_or_path`, `model_dtype`, `temperature`, `use_reference`,
    `entropy_grad` (the entropy needs a gradient: entropy_coef > 0), `score_batch_size` (rows
    per forward of `score_tokens`; None = all at once). Env runners build the module with
    `inference_only=True`: the policy alone.
    """

    def setup(self) -> None:
        cfg = self.model_config
        self.temperature = float(cfg["temperature"])
        self.model = load_model(cfg["model_name_or_path"], dtype=cfg["model_dtype"])
        self.entropy_grad = bool(cfg.get("entropy_grad", True))
        self.score_batch_size = cfg.get("score_batch_size")
        if cfg.get("use_reference") and not self.inference_only:
            ref = load_model(cfg["model_name_or_path"], dtype=cfg["model_dtype"])
            ref.requires_grad_(False)
            self.reference_model = ref.eval()

    def train(self, mode: bool = True):
        """The learner switches the module to training mode; the reference stays in eval mode
        (it scores, never trains: dropout there would make its log-probs random)."""
        super().train(mode)
        if self.has_reference:
            self.reference_model.eval()
        return self

    def get_non_inference_attributes(self) -> list[str]:
        return [REFERENCE]

    @property
    def has_reference(self) -> bool:
        return hasattr(self, REFERENCE)

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        """Next-token logits after each sequence: {"action_dist_inputs": (B, V)}."""
        logits = response_logits(self.model, batch["input_ids"], batch["attention_mask"], 1)
        return {"action_dist_inputs": logits[:, -1] / self.temperature}

    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        tokens = batch["response_ids"]  # (B, T)
        logits = response_logits(
            self.model, batch["input_ids"], batch["attention_mask"], tokens.shape[1]
        )
        logp, entropy = token_logp_and_entropy(logits, tokens, self.temperature,
                                               entropy_grad=self.entropy_grad)
        return {"logp": logp, "entropy": entropy}

    @torch.no_grad()
    def score_tokens(self, batch: dict[str, Any], *, reference: bool) -> torch.Tensor:
        """log-probs (B, T) of the response tokens under the policy or the reference, no grad.

        In eval mode (no dropout) and `score_batch_size` rows per forward, like the learner's
        micro-batches, so scoring a whole rollout batch never needs more memory than training.
        """
        model = self.reference_model if reference else self.model
        was_training = model.training
        model.eval()
        try:
            tokens = batch["response_ids"]  # (B, T)
            size = self.score_batch_size or tokens.shape[0]
            chunks = []
            for start in range(0, tokens.shape[0], size):
                rows = slice(start, start + size)
                logits = response_logits(model, batch["input_ids"][rows],
                                         batch["attention_mask"][rows], tokens.shape[1])
                chunks.append(token_logp_and_entropy(logits, tokens[rows], self.temperature,
                                                     entropy_grad=False)[0])
            return torch.cat(chunks)  # (B, T)
        finally:
            model.train(was_training)

    # RLlib's default get_state converts to numpy, which has no bfloat16: keep torch tensors,
    # in a TensorState so that Ray still moves their bytes without pickling them. Like RLlib's
    # numpy views, CPU tensors alias the parameters (no copy: whoever keeps them pickles or
    # copies them; a sync of SmolLM2-135M spent 0.26 s in a clone here).
    def get_state(self, components=None, *, not_components=None, inference_only=False, **kw):
        state = self.state_dict()
        if inference_only:
            state = {k: v for k, v in state.items() if not k.startswith(REFERENCE + ".")}
        return TensorState({k: v.detach().cpu() for k, v in state.items()})

    def set_state(self, state: dict[str, Any]) -> None:
        tensors = {k: torch.as_tensor(v) for k, v in state.items()}
        missing, unexpected = self.load_state_dict(tensors, strict=False)
        # An inference-only copy never holds the reference; anything else missing is a bug.
        missing = [k for k in missing if not k.startswith(REFERENCE + ".")]
        if missing or unexpected:
            raise ValueError(
                f"RLVRModule.set_state: state does not fit this model (missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}); was it saved from another model_name_or_path?"
            )
