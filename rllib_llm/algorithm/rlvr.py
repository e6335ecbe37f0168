"""`RLVR`: the training loop, read top to bottom — sample, update, sync weights, each timed."""

from __future__ import annotations

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    TIMERS,
)

from rllib_llm.rollout.env_runner import SAMPLER_STATE

# Our part of the algorithm's checkpoint: each remote env runner's sampler state (RLlib saves
# only the driver's env runner, which does not sample when there are remote ones).
REMOTE_SAMPLERS = "rlvr_remote_samplers"

# Timer names (under timers/ in the results): the phases of one iteration.
SAMPLE_TIMER = "sample"  # generate + verify (split further in env_runners/time_*_s)
LEARN_TIMER = "learn"
SYNC_TIMER = "weight_sync"


class RLVR(Algorithm):
    @classmethod
    def get_default_config(cls):
        from rllib_llm.algorithm.config import RLVRConfig

        return RLVRConfig(cls)

    def setup(self, config) -> None:
        super().setup(config)
        self._weight_broadcast = None
        if config.weight_sync_backend != "object_store":
            from rllib_llm.algorithm.weight_sync import BroadcastWeightSync

            self._weight_broadcast = BroadcastWeightSync(config, self.learner_group,
                                                         self.env_runner_group)

    def training_step(self) -> None:
        with self.metrics.log_time((TIMERS, SAMPLE_TIMER), reduce="mean", window=1):
            episodes, runner_metrics = self._sample()
        self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)

        with self.metrics.log_time((TIMERS, LEARN_TIMER), reduce="mean", window=1):
            learner_results = self.learner_group.update(
                episodes=episodes,
                timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                    (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)},
                # The whole batch in one call: RLVRLearner runs the ppo_epochs x mini-batch
                # optimizer steps itself, counting responses and keeping prompt groups whole
                # (RLlib's iterator counts env steps, which are tokens here).
                num_epochs=1,
                minibatch_size=None,
            )
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)

        with self.metrics.log_time((TIMERS, SYNC_TIMER), reduce="mean", window=1):
            self._sync_weights()

    def _sync_weights(self) -> None:
        """Learner -> env runners: a broadcast when configured and possible, else RLlib's
        object-store sync (which also updates the driver's env runner)."""
        broadcast = self._weight_broadcast
        if broadcast is not None and broadcast.sync():
            return
        self.env_runner_group.sync_weights(
            from_worker_or_learner_group=self.learner_group, inference_only=True
        )
        if broadcast is not None:
            broadcast.mark_local_env_runner_fresh()

    def restore_env_runners(self, env_runner_group) -> list[int]:
        """RLlib restores a runner with the driver's runner's weights, which a broadcast leaves
        behind: send restored runners the learner's, and rebuild the group with them."""
        restored = super().restore_env_runners(env_runner_group)
        if restored and self._weight_broadcast is not None and \
                env_runner_group is self.env_runner_group:
            env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group, to_worker_indices=restored,
                inference_only=True, timeout_seconds=self.config.weight_sync_timeout_s,
            )
            self._weight_broadcast.mark_local_env_runner_fresh()
            self._weight_broadcast.invalidate()
        return restored

    # --- checkpoints ------------------------------------------------------------------------------
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        group = self.env_runner_group
        if group is not None and group.num_remote_env_runners() > 0:
            states = group.foreach_env_runner(
                lambda r: (r.worker_index, r.get_state(components=SAMPLER_STATE)),
                local_env_runner=False)
            state[REMOTE_SAMPLERS] = {index: s[SAMPLER_STATE] for index, s in states}
        return state

    def set_state(self, state) -> None:
        """RLlib's restore, plus each remote runner's sampler state; then every runner gets
        the restored weights with their version (RLlib's sync skips runners whose version
        looks newer)."""
        super().set_state(state)
        samplers = state.get(REMOTE_SAMPLERS)
        group = self.env_runner_group
        if samplers and group is not None:
            group.foreach_env_runner(
                lambda r: r.set_state({SAMPLER_STATE: samplers[r.worker_index]})
                if r.worker_index in samplers else None,
                local_env_runner=False)

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
            if self._weight_broadcast is not None:
                self._weight_broadcast.refresh_local_env_runner()
            return group.local_env_runner.evaluate(**kwargs)
        return group.foreach_env_runner(
            lambda r: r.evaluate(**kwargs), remote_worker_ids=[1], local_env_runner=False
        )[0]
