"""The result keys people build on — Tune's `metric`, ASHA, checkpoint scores, the progress bar,
`rllib-llm plot` — documented once, here. They are keys of `algo.train()`'s result as Tune and its
CSV/TensorBoard loggers flatten it (nested dicts joined by "/"), and they stay stable: a rename
keeps the old name working until the next major version.

`python -m rllib_llm.outputs.metric_names` prints the table (docs/SETTINGS.md's "Metric names").
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EVALUATION_RESULTS,
    FAULT_TOLERANCE_STATS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    TIMERS,
)

from rllib_llm.algorithm import async_sampling, held_out_evaluation, rlvr
from rllib_llm.core import policy_losses
from rllib_llm.exchange.devices import IS_GPU
from rllib_llm.learner import connector, learner
from rllib_llm.rollout import sample_metrics as runner


# Each key is built from the constants of the layer that logs it, so a rename there renames it
# here (tests/outputs: the documented keys are in a real result).
def _key(*parts: str) -> str:
    """A result key as Tune and its loggers flatten the nested result: parts joined by "/"."""
    return "/".join(parts)


def _runners(name: str) -> str:
    return _key(ENV_RUNNER_RESULTS, name)


def _learner(name: str) -> str:
    return _key(LEARNER_RESULTS, DEFAULT_MODULE_ID, name)


# Iteration counter and clocks (RLlib's / Tune's own keys).
ITERATION = "training_iteration"
TIME_TOTAL_S = "time_total_s"
TIME_THIS_ITER_S = "time_this_iter_s"
# Training samples, this iteration's batch (env runners).
REWARD = _runners(runner.EPISODE_RETURN_MEAN)
ACCURACY = _runners(runner.ACCURACY)
RESPONSE_LENGTH = _runners(runner.RESPONSE_LENGTH_MEAN)
TOKENS_SAMPLED_LIFETIME = NUM_ENV_STEPS_SAMPLED_LIFETIME  # response tokens sampled so far
GENERATE_TOKENS_PER_S = _runners(runner.GENERATE_TOKENS_PER_S)
# Held-out accuracy: only in iterations that evaluate (`evaluation_interval`).
HELD_OUT_ACCURACY = _key(EVALUATION_RESULTS, held_out_evaluation.PASS_AT_1)
HELD_OUT_PASS_AT_K = _key(EVALUATION_RESULTS, held_out_evaluation.PASS_AT_K)
# The update (learner), averaged over the iteration's optimizer steps.
LOSS = _learner(learner.TOTAL_LOSS)
KL = _learner(learner.KL_LOSS)  # KL to the reference model: only with use_kl_loss
APPROX_KL = _learner(policy_losses.APPROX_KL)  # KL between the policy and the sampling policy
ENTROPY = _learner(learner.ENTROPY)
CLIP_FRACTION = _learner(policy_losses.CLIPFRAC)
LEARNER_TOKENS_PER_S = _learner(learner.TOKENS_PER_S)
VALUE_LOSS = _learner(learner.VALUE_LOSS)  # adv_estimator="gae" only
# On-policy distillation (teacher_model_name_or_path only).
DISTILLATION_REVERSE_KL = _learner(connector.DISTILLATION_REVERSE_KL)
# Phases of an iteration, seconds.
TIME_SAMPLE_S = _key(TIMERS, rlvr.SAMPLE_TIMER)
TIME_LEARN_S = _key(TIMERS, rlvr.LEARN_TIMER)
TIME_WEIGHT_SYNC_S = _key(TIMERS, rlvr.SYNC_TIMER)
# Inside the sample phase: an env runner's sample() call and its parts (rollout/sample_metrics.py),
# seconds, means over the runners. timers/sample - the call = carrying the episodes to the driver.
SAMPLE_CALL_S = _runners(runner.SAMPLE_CALL_S)
GENERATE_S = _runners(runner.GENERATE_S)
VERIFY_S = _runners(runner.VERIFY_S)
REPLAY_S = _runners(runner.REPLAY_S)
# Staleness and idle time (rllib_llm/algorithm/async_sampling.py), synchronous training too.
STALENESS_MEAN = _key(async_sampling.ASYNC_RESULTS, async_sampling.STALENESS_MEAN)
STALENESS_MAX = _key(async_sampling.ASYNC_RESULTS, async_sampling.STALENESS_MAX)
DROPPED_FRACTION = _key(async_sampling.ASYNC_RESULTS, async_sampling.DROPPED_FRACTION)
LEARNER_WAIT_S = _key(async_sampling.ASYNC_RESULTS, async_sampling.LEARNER_WAIT_S)
RUNNER_IDLE_S = _runners(runner.IDLE_S)
OLD_LOGP_RECOMPUTED = _learner(connector.OLD_LOGP_RECOMPUTED)
# Faults (rllib_llm/algorithm/sync_sampling.py): RLlib's count of restored remote env runners,
# and ours of the runners' shares lost with a runner that died, and sampled again.
RUNNER_RESTARTS = _key(FAULT_TOLERANCE_STATS, "num_remote_worker_restarts")  # RLlib's
RESAMPLED_PARTS = _key(async_sampling.ASYNC_RESULTS, async_sampling.NUM_RESAMPLED_PARTS)
# Placement (rllib_llm/exchange/devices.py): each process's device as a number.
LEARNER_ON_GPU = _learner(IS_GPU)
SAMPLER_ON_GPU = _runners(IS_GPU)

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
