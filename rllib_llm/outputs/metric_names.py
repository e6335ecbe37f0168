"""The result keys people build on — Tune's `metric`, ASHA, checkpoint scores, the progress bar,
`rllib-llm plot` — documented once, here. They are keys of `algo.train()`'s result as Tune and its
CSV/TensorBoard loggers flatten it (nested dicts joined by "/"), and they stay stable: a rename
keeps the old name working until the next major version.

`python -m rllib_llm.outputs.metric_names` prints the table (docs/SETTINGS.md's "Metric names").
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# Iteration counter and clocks (RLlib's / Tune's own keys).
ITERATION = "training_iteration"
TIME_TOTAL_S = "time_total_s"
TIME_THIS_ITER_S = "time_this_iter_s"
# Training samples, this iteration's batch (env runners).
REWARD = "env_runners/episode_return_mean"
ACCURACY = "env_runners/accuracy"
RESPONSE_LENGTH = "env_runners/response_length_mean"
TOKENS_SAMPLED_LIFETIME = "num_env_steps_sampled_lifetime"  # response tokens sampled so far
GENERATE_TOKENS_PER_S = "env_runners/generate_tokens_per_s"
# Held-out accuracy: only in iterations that evaluate (`evaluation_interval`).
HELD_OUT_ACCURACY = "evaluation/pass@1"
HELD_OUT_PASS_AT_K = "evaluation/pass@k"
# The update (learner), averaged over the iteration's optimizer steps.
LOSS = "learners/default_policy/loss"
KL = "learners/default_policy/kl_loss"  # KL to the reference model: only with use_kl_loss
APPROX_KL = "learners/default_policy/approx_kl"  # KL between the policy and the sampling policy
ENTROPY = "learners/default_policy/entropy"
CLIP_FRACTION = "learners/default_policy/clipfrac"
LEARNER_TOKENS_PER_S = "learners/default_policy/learner_tokens_per_s"
VALUE_LOSS = "learners/default_policy/value_loss"  # adv_estimator="gae" only
# On-policy distillation (teacher_model_name_or_path only).
DISTILLATION_REVERSE_KL = "learners/default_policy/distillation_reverse_kl"
# Phases of an iteration, seconds.
TIME_SAMPLE_S = "timers/sample"
TIME_LEARN_S = "timers/learn"
TIME_WEIGHT_SYNC_S = "timers/weight_sync"
# Inside the sample phase: an env runner's sample() call and its parts (rollout/sample_metrics.py),
# seconds, means over the runners. timers/sample - the call = carrying the episodes to the driver.
SAMPLE_CALL_S = "env_runners/time_sample_call_s"
GENERATE_S = "env_runners/time_generate_s"
VERIFY_S = "env_runners/time_verify_s"
REPLAY_S = "env_runners/time_replay_s"
# Staleness and idle time (rllib_llm/algorithm/async_sampling.py), synchronous training too.
STALENESS_MEAN = "async_sampling/staleness_mean"
STALENESS_MAX = "async_sampling/staleness_max"
DROPPED_FRACTION = "async_sampling/dropped_fraction"
LEARNER_WAIT_S = "async_sampling/learner_wait_s"
RUNNER_IDLE_S = "env_runners/time_idle_s"
OLD_LOGP_RECOMPUTED = "learners/default_policy/old_logp_recomputed"
# Faults (rllib_llm/algorithm/sync_sampling.py): RLlib's count of restored remote env runners,
# and ours of the runners' shares lost with a runner that died and sampled again.
RUNNER_RESTARTS = "fault_tolerance/num_remote_worker_restarts"
RESAMPLED_PARTS = "async_sampling/num_resampled_parts"
# Placement (rllib_llm/exchange/devices.py): each process's device as a number.
LEARNER_ON_GPU = "learners/default_policy/device_is_gpu"
SAMPLER_ON_GPU = "env_runners/device_is_gpu"

METRICS: Mapping[str, str] = MappingProxyType({
    ITERATION: "training iterations done",
    TIME_TOTAL_S: "seconds of training so far (carried over a resume)",
    TIME_THIS_ITER_S: "seconds this iteration took",
    REWARD: "mean episode return of this iteration's samples",
    ACCURACY: "share of this iteration's samples the verifier accepted",
    RESPONSE_LENGTH: "mean response length of this iteration's samples, tokens",
    TOKENS_SAMPLED_LIFETIME: "response tokens sampled so far",
    GENERATE_TOKENS_PER_S: "generation throughput of the env runners, tokens/s",
    HELD_OUT_ACCURACY: "held-out pass@1 (iterations that evaluate: `evaluation_interval`)",
    HELD_OUT_PASS_AT_K: "held-out pass@k, k = `eval_num_samples`",
    LOSS: "the learner's total loss",
    KL: "KL to the reference model (`use_kl_loss` only)",
    APPROX_KL: "KL between the updated policy and the one that sampled",
    ENTROPY: "mean token entropy of the policy on its samples",
    CLIP_FRACTION: "share of tokens whose ratio was clipped",
    LEARNER_TOKENS_PER_S: "training throughput of the learner, tokens/s",
    VALUE_LOSS: "the critic's loss (`adv_estimator='gae'` only)",
    DISTILLATION_REVERSE_KL: "mean over response tokens of log pi_student - log pi_teacher of "
                             "the sampled token, the reverse KL to the distillation teacher "
                             "(`teacher_model_name_or_path` only)",
    TIME_SAMPLE_S: "seconds generating and verifying this iteration",
    TIME_LEARN_S: "seconds updating this iteration",
    TIME_WEIGHT_SYNC_S: "seconds sending weights to the env runners this iteration",
    SAMPLE_CALL_S: "seconds of an env runner's sample() call, all of it (timers/sample less "
                   "this is the episodes' transfer to the driver)",
    GENERATE_S: "seconds of the call the engine generated (multi-turn: with the env's steps "
                "between turns)",
    VERIFY_S: "seconds of the call the verifier scored the responses",
    REPLAY_S: "seconds of the call spent replaying the responses through the env into episodes",
    STALENESS_MEAN: "weight versions the batch's episodes lag behind the learner, mean "
                    "(async_generation_ratio k: k once k updates are done; 0 synchronously)",
    STALENESS_MAX: "the same, the batch's largest (never above max_staleness)",
    DROPPED_FRACTION: "share of this iteration's episodes dropped as older than max_staleness "
                      "(and sampled again)",
    LEARNER_WAIT_S: "seconds the learner waited for this iteration's batch",
    RUNNER_IDLE_S: "seconds an env runner waited between two sample calls (mean over runners; "
                   "0 at a runner's first)",
    OLD_LOGP_RECOMPUTED: "1 if old_logp were recomputed by the learner, 0 if they are the "
                         "sampler's behaviour log-probs (recompute_old_logp)",
    RUNNER_RESTARTS: "remote env runners RLlib restored after they died, so far (RLlib's)",
    RESAMPLED_PARTS: "shares of this iteration's prompts lost with an env runner that died, "
                     "and sampled again",
    LEARNER_ON_GPU: "1 if the learner computes on a GPU, else 0 (its device is printed at build)",
    SAMPLER_ON_GPU: "share of the sampling env runners that sample on a GPU (in one process: "
                    "the learner's device)",
})


def metrics_markdown() -> str:
    """The table of stable metric names (docs/SETTINGS.md and `rllib-llm --help`)."""
    rows = ["| metric | meaning |", "|---|---|"]
    rows += [f"| `{name}` | {doc} |" for name, doc in METRICS.items()]
    return "\n".join(rows)


if __name__ == "__main__":
    print(metrics_markdown())
