"""The driver's side of evaluation: which runners evaluate, each runner's seed, and the metrics
of the runners' shards merged (`rllib_llm.rollout.held_out_sampling` scores a shard; that the
problems are held out is a config rule, `config_rules.evaluation_rules.check_held_out`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from rllib_llm import core
from rllib_llm.algorithm.sample_errors import call_or_error, raise_if_failed
from rllib_llm.rollout.eval_shard import EvalShard

logger = logging.getLogger(__name__)

# Metric names (under evaluation/ in RLlib's results when the training loop evaluates).
PASS_AT_1 = "pass@1"  # mean correctness of every sampled response: c / n, averaged over problems
PASS_AT_K = "pass@k"  # share of problems with a correct response among their n (k = n)
NUM_PROBLEMS = "num_problems"  # held-out problems scored
SAMPLES_PER_PROBLEM = "samples_per_problem"  # n (eval_num_samples)
NUM_SAMPLES = "num_samples"  # responses scored: num_problems * samples_per_problem
RESPONSE_LENGTH_MEAN = "response_length_mean"  # tokens per response

# Tags the evaluation's seed stream, apart from the training sampler's.
_EVAL_SEED_STREAM = 0x45564C


def shard_seed(seed: int, shard: int) -> int:
    """Sampling seed of evaluation shard `shard` under base `seed`: the same every evaluation,
    so evaluations of different weights draw the same randomness (a paired comparison)."""
    return int(np.random.SeedSequence([_EVAL_SEED_STREAM, seed, shard]).generate_state(1)[0])


def evaluation_metrics(shards: list[EvalShard]) -> dict[str, Any]:
    """Merge the runners' shards into the evaluation's metrics (see the names above).

    Raises if a problem was scored twice; warns if some were missed (a runner failed).
    """
    indices = [i for s in shards for i in s.prompt_indices]
    if len(set(indices)) != len(indices):
        raise RuntimeError(f"evaluation scored problems twice: shards cover {sorted(indices)}")
    expected = max((s.num_problems for s in shards), default=0)
    if len(indices) < expected:
        logger.warning("Evaluation scored %d of %d held-out problems (a runner failed?).",
                       len(indices), expected)
    if not indices:
        raise RuntimeError("evaluation scored no problems: no env runner answered")
    n = shards[0].samples_per_problem
    correct = torch.tensor([c for s in shards for c in s.num_correct])  # (P,)
    num_samples = len(indices) * n
    return {
        PASS_AT_1: float(core.pass_at_k(correct, n, 1).mean()),
        PASS_AT_K: float(core.pass_at_k(correct, n, n).mean()),
        NUM_PROBLEMS: len(indices),
        SAMPLES_PER_PROBLEM: n,
        NUM_SAMPLES: num_samples,
        RESPONSE_LENGTH_MEAN: sum(s.response_tokens for s in shards) / num_samples,
    }


def evaluation_runners(eval_group, train_group, learner_group, direct_sync):
    """The group that evaluates, holding the learner's current weights, and its healthy remote
    runners (none: its local runner evaluates).

    The evaluation group (RLlib builds one when `evaluation_interval` or
    `evaluation_num_env_runners` is set; else None) receives the weights through the object
    store, as in RLlib. Without one the training runners evaluate: they hold the weights already,
    except the driver's runner behind a direct sync (`direct_sync`, or None), which catches up if
    it is the one.
    """
    group = eval_group
    if group is not None:
        group.sync_weights(from_worker_or_learner_group=learner_group, inference_only=True)
    else:
        group = train_group
    ids = group.healthy_env_runner_ids() if group.num_remote_env_runners() else []
    if not ids and group is train_group and direct_sync is not None:
        direct_sync.refresh_local_env_runner()
    return group, ids


def score_shards(group, ids: list[int], eval_config, seed: int) -> list[EvalShard]:
    """Each evaluating runner's shard of the held-out problems under `eval_config`: the remote
    runners `ids` of `group` one shard each, or with none its local runner all of them; shard i
    sampled from `shard_seed(seed, i)`."""
    if not ids:
        return [group.local_env_runner.evaluate(config=eval_config, seed=shard_seed(seed, 0))]

    def score(runner):
        shard = ids.index(runner.worker_index)
        # An error in evaluate() comes back as a value, not a 60 s restart (sample_errors.py).
        return call_or_error(runner, "evaluate()", lambda: runner.evaluate(
            config=eval_config, shard=shard, num_shards=len(ids), seed=shard_seed(seed, shard)))

    shards = group.foreach_env_runner(score, remote_worker_ids=ids, local_env_runner=False)
    raise_if_failed(shards)
    return shards
