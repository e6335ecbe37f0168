"""The settings of the update: epochs and batches, the policy-gradient loss and its
variants, the learner strategy (DeepSpeed, FSDP2), the KL to the reference model and
on-policy distillation (the optimisation, loss, variant parameters, learners, kl and
distillation sections of docs/SETTINGS.md).
"""

from __future__ import annotations

from rllib_llm.algorithm.field_rules import (
    DEFAULT_MICRO_BATCH_TOKENS,
    Field,
    boolean,
    boolean_or_auto,
    core_names,
    kl_kind,
    non_negative,
    number_rule,
    one_of,
    optional,
    positive,
    positive_int,
    text,
    token_budget,
)
from rllib_llm.exchange.memory_budgets import AUTO, GPU_MICRO_BATCH_TOKENS

LEARNING_FIELDS: tuple[Field, ...] = (
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
          "name added with rllib_llm.core.register_pg_variant).", one_of(core_names("pg_variant")),
          "loss"),
    Field("loss_agg_mode", "seq-mean-token-mean",
          "How per-token losses become one number: token-mean, seq-mean-token-sum, "
          "seq-mean-token-mean, seq-mean-token-sum-norm (Dr. GRPO).",
          one_of(core_names("loss_agg_mode")), "loss"),
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
          "weight_sync_bucket_bytes at a time). Under 'fsdp2' the reference model, a critic "
          "(its own Adam, clipped by its own norm) and a distillation teacher are sharded the "
          "same way; LoRA trains the adapters on the sharded base (env runners get the merged "
          "weights); gradient checkpointing, use_remove_padding and use_fused_kernels work as "
          "under 'torch', with the same update (tested); every grad_clip_by clips as on one "
          "learner ('global_norm': the whole model's norm over the shards); autocast_dtype "
          "must be None (model_dtype 'bfloat16' is FSDP2's own mixed precision).",
          one_of(("torch", "deepspeed", "fsdp2")), "learners"),
    Field("fsdp_reshard_after_forward", AUTO,
          "Under learner_strategy='fsdp2', whether each decoder layer frees its gathered weights "
          "after its forward (torch's fully_shard(reshard_after_forward=...), verl's "
          "fsdp_config.reshard_after_forward). True: gathered for the forward, freed, gathered "
          "again for the backward, so at most one layer (and the root: embeddings, final norm, "
          "LM head) is whole at a time, and each micro-batch's gradients are reduce-scattered "
          "after its backward. False: kept whole from the forward to the backward (and through "
          "a scoring pass), one all-gather per layer and micro-batch instead of two, and the "
          "gradients accumulated whole over a step's micro-batches and reduce-scattered once, "
          "in the last (as DDP's no_sync; the same sums as DDP's: within 9.2e-7 of one torch "
          "learner after 5 updates in tests/learner/test_fsdp2.py, DDP 9.9e-7), at DDP's "
          "memory during an update; between updates every learner holds its shards either "
          "way (weights, gradients and Adam's state). 'auto' = "
          "True on a GPU, False on a CPU learner, where each of gloo's collectives costs a "
          "round of waking both processes and host memory is plentiful (the embedded model's "
          "update: benchmarks/RESULTS.md, \"Learner strategies\").",
          boolean_or_auto, "learners", annotation='bool | str'),
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
          "learner_strategy 'torch' or 'fsdp2' (which shards it like the policy).",
          optional(text), "distillation", annotation='str | None'),
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
)
