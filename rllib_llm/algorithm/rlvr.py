"""`RLVR`: the training loop, read top to bottom — sample, update, sync weights, each timed."""

from __future__ import annotations

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    TIMERS,
)

# Timer names (under timers/ in the results): the phases of one iteration.
SAMPLE_TIMER = "sample"  # generate + verify (split further in env_runners/time_*_s)
LEARN_TIMER = "learn"
SYNC_TIMER = "weight_sync"


class RLVR(Algorithm):
    @classmethod
    def get_default_config(cls):
        from rllib_llm.algorithm.config import RLVRConfig

        return RLVRConfig(cls)

    def training_step(self) -> None:
        cfg = self.config
        with self.metrics.log_time((TIMERS, SAMPLE_TIMER), reduce="mean", window=1):
            episodes, runner_metrics = self._sample()
        self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)

        with self.metrics.log_time((TIMERS, LEARN_TIMER), reduce="mean", window=1):
            learner_results = self.learner_group.update(
                episodes=episodes,
                timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                    (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)},
                num_epochs=cfg.ppo_epochs,
                minibatch_size=cfg.mini_batch_size,
                shuffle_batch_per_epoch=False,  # keep prompt groups together
            )
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)

        with self.metrics.log_time((TIMERS, SYNC_TIMER), reduce="mean", window=1):
            self.env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group, inference_only=True
            )

    def _sample(self):
        """Episodes and metrics from every env runner (the local one when there are none)."""
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            runner = group.local_env_runner
            return runner.sample(), [runner.get_metrics()]
        results = group.foreach_env_runner(
            lambda r: (r.sample(), r.get_metrics()), local_env_runner=False
        )
        episodes = [e for eps, _ in results for e in eps]
        return episodes, [m for _, m in results]

    def evaluate_accuracy(self, *, split: str = "test", num_problems: int | None = None,
                          temperature: float | None = None, seed: int = 0) -> dict[str, float]:
        """Verifier accuracy of the current policy on held-out problems (one sample each)."""
        cfg = self.config
        group = self.env_runner_group
        kwargs = dict(
            split=split,
            num_problems=num_problems or cfg.eval_num_problems,
            temperature=cfg.eval_temperature if temperature is None else temperature,
            seed=seed,
        )
        if group.local_env_runner is not None:
            return group.local_env_runner.evaluate(**kwargs)
        return group.foreach_env_runner(
            lambda r: r.evaluate(**kwargs), remote_worker_ids=[1], local_env_runner=False
        )[0]
