"""Reward models served by Ray actors, and the reward they add to sampled episodes
(`reward_model_name_or_path`, docs/DESIGN.md "Reward models").

`RewardWorkers` starts `num_reward_workers` plain Ray actors (`RewardWorker`, each holding a
`models.reward_model.RewardScorer`) with the CPUs and GPUs the settings ask for. After every
sampling round the driver hands each worker an equal contiguous share of the round's responses
as text (the prompt, and the response decoded without special tokens), the workers score their
shares at once in batches of `reward_model_batch_size`, and each episode's final reward becomes
`core.combine_rewards(verifier, model, *reward_weights)`. The verifier's verdict (its final
info) is left as it was, so `correct` and accuracy stay the verifier's.

A worker whose process dies (killed, out of memory) is restarted by Ray, which runs again the
`score` call it died in (`max_restarts`, `max_task_retries`): the iteration goes on, later by a
model load. A worker that raises, dies for good or returns a non-finite score stops the iteration
with a one-line error naming the worker and the responses, before any episode is changed or
trained on.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import ray
import torch

from rllib_llm.core.reward_models import combine_rewards
from rllib_llm.envs.token_mdp import PROMPT, PROMPT_IDS, rebuild_state

# Metric names, under REWARD_MODEL_RESULTS in the results.
REWARD_MODEL_RESULTS = "reward_model"
MODEL_SCORE_MEAN = "model_score_mean"  # the reward model's mean score of the batch's responses
VERIFIER_SCORE_MEAN = "verifier_score_mean"  # the verifier's mean reward of the same responses
REWARD_MEAN = "reward_mean"  # the combined reward trained on
TIME_S = "time_s"  # wall seconds of the workers' scoring, every round of the iteration
# Seconds a reward worker may take to start (load its model) before the build fails: a worker
# Ray cannot place would otherwise wait forever.
READY_TIMEOUT_S = 300.0
# Restarts Ray gives each reward worker whose process dies, over the run; past them it is gone.
MAX_RESTARTS = 3


class RewardWorker:
    """A Ray actor holding one copy of the reward model (created by `RewardWorkers`)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from rllib_llm.models.reward_model import RewardScorer

        self.scorer = RewardScorer(**spec)

    def ready(self) -> str:
        """The device the model sits on, once loaded."""
        return str(self.scorer.device)

    def resources(self) -> dict[str, float]:
        """The resources Ray assigned this actor."""
        return dict(ray.get_runtime_context().get_assigned_resources())

    def score(self, prompts: list[str], responses: list[str]) -> list[float]:
        return self.scorer.score(prompts, responses)


def scorer_spec(cfg) -> dict[str, Any]:
    """`RewardScorer`'s arguments from the config."""
    return {"name_or_path": cfg.reward_model_name_or_path, "model_type": cfg.reward_model_type,
            "batch_size": cfg.reward_model_batch_size, "dtype": cfg.model_dtype,
            "judge_template": cfg.reward_judge_template,
            "judge_tokens": tuple(cfg.reward_judge_tokens)}


def check_cluster(cfg, available: dict[str, float]) -> None:
    """Refuse reward workers whose CPUs or GPUs the cluster does not have in all (a GPU asked
    for where none exists): Ray would leave such an actor waiting, silently."""
    n = cfg.num_reward_workers
    for resource, per_worker, setting in (
            ("GPU", cfg.num_gpus_per_reward_worker, "num_gpus_per_reward_worker"),
            ("CPU", cfg.num_cpus_per_reward_worker, "num_cpus_per_reward_worker")):
        asked = n * per_worker
        if asked > available.get(resource, 0.0) + 1e-9:
            raise ValueError(
                f"RLVRConfig.num_reward_workers={n} x {setting}={per_worker} asks Ray for "
                f"{asked:g} {resource}s, and the cluster has {available.get(resource, 0.0):g} "
                f"in all. Lower {setting} or num_reward_workers, or add {resource}s.")


class RewardWorkers:
    """The reward workers of one algorithm, and the reward they give episodes."""

    def __init__(self, cfg, tokenizer) -> None:
        check_cluster(cfg, ray.cluster_resources())
        self.tokenizer = tokenizer
        self.verifier_weight, self.model_weight = (float(w) for w in cfg.reward_weights)
        actor = ray.remote(num_cpus=cfg.num_cpus_per_reward_worker,
                           num_gpus=cfg.num_gpus_per_reward_worker,
                           max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)(RewardWorker)
        spec = scorer_spec(cfg)
        self.workers = [actor.remote(spec) for _ in range(cfg.num_reward_workers)]
        try:
            self.devices = ray.get([w.ready.remote() for w in self.workers],
                                   timeout=READY_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self.stop()
            raise RuntimeError(
                f"the {cfg.num_reward_workers} reward workers (num_cpus_per_reward_worker="
                f"{cfg.num_cpus_per_reward_worker}, num_gpus_per_reward_worker="
                f"{cfg.num_gpus_per_reward_worker}) did not start within {READY_TIMEOUT_S:g} s: "
                "the cluster's free resources cannot place them next to the env runners and "
                "learners, or the model loads too slowly") from None
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
            self.stop()
            raise RuntimeError(f"a reward worker failed to load reward_model_name_or_path="
                               f"{cfg.reward_model_name_or_path!r}: {e}") from e

    def stop(self) -> None:
        for worker in self.workers:
            ray.kill(worker)
        self.workers = []

    def texts(self, episodes: list) -> tuple[list[str], list[str]]:
        """(prompt, response) texts of each episode, as the reward model reads them."""
        prompts, responses = [], []
        for episode in episodes:
            infos = episode.get_infos()
            prompt_ids = list(infos[0][PROMPT_IDS])
            state = rebuild_state(prompt_ids, episode.get_actions(), infos[1:])
            prompt = infos[0].get(PROMPT)
            prompts.append(prompt if isinstance(prompt, str) else
                           self.tokenizer.decode(prompt_ids, skip_special_tokens=True))
            responses.append(self.tokenizer.decode(state[len(prompt_ids):],
                                                   skip_special_tokens=True))
        return prompts, responses

    def score(self, prompts: list[str], responses: list[str]) -> list[float]:
        """The model's score of each response: equal contiguous shares, one per worker, scored
        at once; RuntimeError naming the worker for a failure or a non-finite score."""
        n = len(self.workers)
        bounds = [len(prompts) * i // n for i in range(n + 1)]
        shares = [(bounds[i], bounds[i + 1]) for i in range(n) if bounds[i] < bounds[i + 1]]
        calls = [self.workers[i].score.remote(prompts[a:b], responses[a:b])
                 for i, (a, b) in enumerate(shares)]
        scores: list[float] = []
        for i, ((a, b), call) in enumerate(zip(shares, calls)):
            try:
                part = ray.get(call)
            except ray.exceptions.RayActorError as e:
                raise RuntimeError(
                    f"reward worker {i} failed scoring responses {a}..{b - 1} of this batch: its "
                    f"process died for good (Ray restarts one up to {MAX_RESTARTS} times a run); "
                    "no episode was changed or trained on") from e
            except ray.exceptions.RayTaskError as e:
                raise RuntimeError(
                    f"reward worker {i} failed scoring responses {a}..{b - 1} of this batch; "
                    f"no episode was changed or trained on: {_first_line(e.cause)}") from e
            if len(part) != b - a:
                raise RuntimeError(f"reward worker {i} returned {len(part)} scores for "
                                   f"{b - a} responses")
            for j, value in enumerate(part):
                if not math.isfinite(value):
                    raise RuntimeError(
                        f"reward worker {i} scored response {a + j} of this batch {value} (not "
                        f"finite): prompt {prompts[a + j]!r}, response {responses[a + j]!r}. "
                        "No episode was changed or trained on; check the reward model "
                        "(reward_model_name_or_path) and its dtype (model_dtype).")
            scores += part
        return scores

    def apply(self, episodes: list) -> dict[str, float]:
        """Score `episodes` and set each one's final reward to the combined reward (in place);
        this round's metrics (REWARD_MODEL_RESULTS)."""
        if not episodes:
            return {}
        start = time.perf_counter()
        model = torch.tensor(self.score(*self.texts(episodes)), dtype=torch.float32)
        elapsed = time.perf_counter() - start
        verifier = torch.tensor([float(e.get_rewards()[-1]) for e in episodes],
                                dtype=torch.float32)
        reward = combine_rewards(verifier, model, self.verifier_weight, self.model_weight)
        for episode, value in zip(episodes, reward.tolist()):
            episode.set_rewards(new_data=np.float32(value), at_indices=-1)
        return {MODEL_SCORE_MEAN: float(model.mean()), VERIFIER_SCORE_MEAN: float(verifier.mean()),
                REWARD_MEAN: float(reward.mean()), TIME_S: elapsed,
                "num_responses": float(len(episodes))}


def _first_line(error: BaseException) -> str:
    """'TypeName: the message's first line' (the traceback stays on the chained exception)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def merge_round_metrics(rounds: list[dict[str, float]]) -> dict[str, float]:
    """One iteration's metrics from its sampling rounds' (dynamic sampling draws several): means
    weighted by responses, times summed."""
    rounds = [r for r in rounds if r]
    total = sum(r["num_responses"] for r in rounds)
    if not total:
        return {}
    merged = {name: sum(r[name] * r["num_responses"] for r in rounds) / total
              for name in (MODEL_SCORE_MEAN, VERIFIER_SCORE_MEAN, REWARD_MEAN)}
    merged[TIME_S] = sum(r[TIME_S] for r in rounds)
    return merged
