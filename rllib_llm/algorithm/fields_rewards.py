"""The settings of rewards: reward models and LLM judges, reward shaping, the advantage
estimator and the critic (the reward model, advantage and critic sections of
docs/SETTINGS.md).
"""

from __future__ import annotations

from rllib_llm.algorithm.field_rules import (
    Field,
    boolean,
    core_names,
    is_number,
    non_negative,
    one_of,
    optional,
    overlong_buffer,
    positive,
    positive_int,
    text,
    unit_interval,
)

REWARD_FIELDS: tuple[Field, ...] = (
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
          one_of(core_names("adv_estimator")), "advantage"),
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
          optional(one_of(core_names("norm_type"))), "advantage", annotation='str | None'),
    Field("norm_std_type", None, "Divide by the 'batch', 'group' or 'running' score std.",
          optional(one_of(core_names("norm_type"))), "advantage", annotation='str | None'),
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
)
