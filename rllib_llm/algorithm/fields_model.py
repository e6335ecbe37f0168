"""The settings of the model: which causal LM, its dtype, LoRA, fused kernels and
attention (the `model` section of docs/SETTINGS.md).
"""

from __future__ import annotations

from rllib_llm.algorithm.field_rules import (
    Field,
    boolean,
    non_negative_int,
    one_of,
    optional,
    positive,
    text,
)

MODEL_FIELDS: tuple[Field, ...] = (
    # --- model ----------------------------------------------------------------------------------
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
          "runners receive merged weights. Under learner_strategy='fsdp2' the adapters train on "
          "the sharded base, the merge runs on the first learner's copy gathered for the sync, "
          "and sharded checkpoints hold the base's shards too.", non_negative_int, "model"),
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
          "adapter on it, soft-capped or scaled logits) and zero_stage 2 under DeepSpeed (under "
          "FSDP2 the head runs inside the sharded model's registered second forward).",
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
          "(benchmarks/speed/remove_padding.py). Needs a plain linear LM head whose output is the "
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
)
