"""`RLVREnvRunner`: generates whole responses in batches, then steps the env through them.

Per iteration each runner takes its share of `rollout_batch_size` prompts from its environment,
samples `num_return_sequences_in_group` responses per prompt with the rollout engine (one batched
call with a KV cache), and replays every response through the environment with `step_chunk`, so
the environment stays the authority on rewards and termination while the per-token Python work
stays small. Each response becomes one `SingleAgentEpisode` carrying the sampler's log-probs and
the weight version that produced it.

Agent envs (`env.agent_driven`, "openai_agent") run the user's agent once per episode against
this runner's OpenAI-compatible gateway (`rollout.agent_rollouts`), which records the tokens.

Multi-turn envs (`env.multi_turn`, e.g. "math_tool") go turn by turn instead
(`rollout.turn_loop`): generate until each env needs input, step all envs at once from a
thread pool (tool calls run concurrently), continue, with one env per running episode.

With partial rollouts (`partial_rollout_max_split` > 1, `rollout.partial_rollouts`) responses are
generated in segments, and those unfinished when a call holds its groups go on in the next call.

The runner holds the jobs together; each lives in a module of its own: the env it samples from
(`env_setup`), its engine (`engine_setup`), responses into episodes (`episode_building`), the
envs of concurrent multi-turn episodes (`episode_envs`), held-out evaluation
(`held_out_sampling`), the sampler's seeds, group ids and checkpoint part (`sampler_state`) and
the metrics of a call (`sample_metrics`). Weight sync stays here, on the runner.
"""

from __future__ import annotations

import time
from typing import Any

import ray
import torch
from ray.rllib.core import COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.env import INPUT_ENV_SINGLE_SPACES, INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.framework import get_device
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME, WEIGHTS_SEQ_NO

from rllib_llm.exchange.columns import PROMPT_IDS, PROMPT_INDEX
from rllib_llm.exchange.devices import (
    IS_GPU,
    announce,
    is_gpu,
    module_device,
    require_visible_gpu,
)
from rllib_llm.exchange.threads import set_torch_threads
from rllib_llm.rollout import episode_building
from rllib_llm.rollout.agent_rollouts import (
    AllAgentsFailed,
    make_gateway,
    sample_agent_episodes,
)
from rllib_llm.rollout.engine import SamplingParams
from rllib_llm.rollout.engine_setup import make_engine
from rllib_llm.rollout.env_setup import env_config_for, make_env, share_prompts
from rllib_llm.rollout.episode_envs import EpisodeEnvs
from rllib_llm.rollout.eval_shard import EvalShard
from rllib_llm.rollout.held_out_sampling import HeldOutEnv, score_shard
from rllib_llm.rollout.partial_rollouts import in_flight_for
from rllib_llm.rollout.sample_metrics import (
    IDLE_S,
    NUM_DROPPED_PROMPTS,
    SAMPLE_CALL_S,
    WEIGHT_LOAD_S,
    SampleTimes,
    log_partial_metrics,
    log_sample_metrics,
    log_turn_metrics,
)
from rllib_llm.rollout.sampler_state import (
    SAMPLER_STATE,
    SampleCounts,
    restore_sampler_state,
    sample_seed,
    sampler_state,
)
from rllib_llm.rollout.turn_loop import run_multi_turn


class RLVREnvRunner(EnvRunner, Checkpointable):
    """An EnvRunner for token-level LLM environments, single- and multi-turn.

    `sample()` returns complete episodes only: a response is generated to its end before the
    episode is built. With partial rollouts the responses not yet ended wait in the runner (not
    as episodes) for its next call.
    """

    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        cfg = self.config
        set_torch_threads(cfg.num_torch_threads)
        self._counts = SampleCounts()  # training sample calls (seeds) and groups (ids) so far
        self._weights_seq_no = 0  # version of the weights the engine samples with
        self._module_seq_no = 0  # version of the weights in self.module (what get_state returns)
        self._last_sample_end: float | None = None  # perf_counter() when sample() last returned
        self.env = self._make_env(self._env_config())
        share_prompts(self.env, worker_index=self.worker_index or 0,
                      num_runners=cfg.num_env_runners, seed=cfg.seed or 0)
        self._held_out = HeldOutEnv(self._make_env)
        self.make_module()
        self._engine = None  # built on first use: a driver-side runner may only ever evaluate
        self._episode_envs = EpisodeEnvs()  # multi-turn: one env per running episode
        self._gateway = None  # agent envs: the OpenAI-compatible endpoint, built on first use
        self._in_flight = in_flight_for(  # partial rollouts: the groups kept between calls
            self.env, max_split=cfg.partial_rollout_max_split, env_name=cfg.env,
            response_length=cfg.response_length,
            group_size=cfg.num_return_sequences_in_group)

    @property
    def engine(self):
        """The rollout engine, built on first use and brought to the runner's weights."""
        if self._engine is None:
            self._engine = self._make_engine()
            if self._weights_seq_no and not self._engine_shares_module:
                self._engine.load_weights(self._model_weights(self.module.get_state()),
                                          self._weights_seq_no)
            elif self._weights_seq_no:
                self._engine.load_weights({}, self._weights_seq_no)  # same model: version only
        return self._engine

    @property
    def _engine_shares_module(self) -> bool:
        """True when the engine samples from this runner's module itself (the torch engine)."""
        return getattr(self._engine, "model", None) is self.module.model

    @staticmethod
    def _model_weights(module_state: dict[str, Any]) -> dict[str, Any]:
        """The causal LM's own state dict out of RLVRModule's (strip the `model.` prefix)."""
        return {k[len("model."):]: v for k, v in module_state.items() if k.startswith("model.")}

    # --- construction ---------------------------------------------------------------------------
    def _env_config(self, config=None) -> dict[str, Any]:
        """The env's config under `config` (default: this runner's)."""
        return env_config_for(config or self.config, self.worker_index or 0)

    def _make_env(self, env_config: dict[str, Any]):
        return make_env(self.config.env, env_config)

    def share_policy_model(self, model) -> None:
        """Sample with `model`, the local learner's own policy model, instead of this runner's
        copy (freed): in one process sampling and updates take turns, so the sampler always
        sees the learner's current weights, and a weight sync has nothing to copy.

        The sampler then computes where the learner's model is: the shared model never moves
        (moving it to this runner's device would move the learner's parameters with it)."""
        rebuild = self._engine is not None and self._engine_shares_module
        self.module.model = model
        self._device = module_device(model)
        if rebuild:  # a torch engine samples from the module's model: rebuilt around this one
            self._engine = None

    def make_module(self) -> None:
        spec = self.config.get_rl_module_spec(spaces=self.get_spaces(), inference_only=True)
        self.module = spec.build()
        # The torch engine samples from this module: put it on the runner's GPU when the config
        # gives this runner one. A remote runner has num_gpus_per_env_runner; the driver's runner
        # has it only where it samples (num_env_runners=0), else none (RLlib's own rule).
        samples = bool(self.worker_index) or not self.config.num_env_runners
        gpus = self.config.num_gpus_per_env_runner if samples else 0
        require_visible_gpu(gpus, setting="num_gpus_per_env_runner", role="env runner")
        self._device = get_device(self.config, gpus)
        self.module.to(self._device)
        if self.worker_index:  # (the driver's runner is announced by RLVR.setup)
            announce(f"env runner {self.worker_index}", self._device)

    @property
    def device(self) -> torch.device:
        """Where this runner's torch engine samples (a shared model's device, in one process)."""
        return self._device

    @property
    def built_engine(self):
        """The engine if it has been built, else None (`engine` builds it)."""
        return self._engine

    def _make_engine(self):
        return make_engine(self.config, tokenizer=self.env.tokenizer, model=self.module.model,
                           device=self._device, worker_index=self.worker_index or 0)

    def sampling_params(self, call: int) -> SamplingParams:
        """The sampling parameters of this runner's training call number `call` (0 for the
        first), with a seed of its own (`sampler_state.sample_seed`): a run resumed from a
        checkpoint (which holds the count of calls) draws what the uninterrupted run would.
        Changes nothing. A subclass may change them (as benchmarks/learning/rollout_mismatch.py
        samples hotter than the learner)."""
        cfg = self.config
        return SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p,
                              max_tokens=cfg.response_length,
                              seed=sample_seed(cfg.seed, self.worker_index or 0, call))

    @property
    def sample_calls(self) -> int:
        """Training sample calls drawn so far (the last one's parameters:
        `sampling_params(sample_calls - 1)`)."""
        return self._counts.calls

    def _next_sampling_params(self) -> SamplingParams:
        """The parameters of a new training call, counting the call (its seed's index)."""
        return self.sampling_params(self._counts.next_call())

    # --- sampling -------------------------------------------------------------------------------
    def num_prompts_per_sample(self) -> int:
        return self.config.rollout_batch_size // max(1, self.config.num_env_runners)

    def sample(self, *, num_prompts: int | None = None, **kwargs) -> list[SingleAgentEpisode]:
        start = time.perf_counter()
        # (0 before the first sample: every iteration's results carry the metric.)
        idle = 0.0 if self._last_sample_end is None else start - self._last_sample_end
        self.metrics.log_value(IDLE_S, idle, window=1)
        self.metrics.log_value(IS_GPU, is_gpu(getattr(self.engine, "device", self._device)),
                               window=1)
        try:
            return self._sample(num_prompts or self.num_prompts_per_sample())
        finally:
            self._last_sample_end = time.perf_counter()
            self.metrics.log_value(SAMPLE_CALL_S, self._last_sample_end - start, window=1)

    def _sample(self, num_prompts: int) -> list[SingleAgentEpisode]:
        if self._in_flight is not None:
            return self._sample_partial(num_prompts)
        n = self.config.num_return_sequences_in_group
        prompts = [self.env.reset() for _ in range(num_prompts)]  # (obs, info) per prompt
        indices = [info[PROMPT_INDEX] for _, info in prompts]
        if getattr(self.env, "agent_driven", False):
            return self._sample_agents([info for _, info in prompts], n)
        if getattr(self.env, "multi_turn", False):
            return self._sample_multi_turn(indices, n)
        t0 = time.perf_counter()
        responses = self.engine.generate([info[PROMPT_IDS] for _, info in prompts], n,
                                         self._next_sampling_params())
        t1 = time.perf_counter()
        verdicts = episode_building.verify_groups(self.env, indices, responses)
        t2 = time.perf_counter()
        episodes = episode_building.build_episodes(
            self.env, indices, responses, verdicts, group_ids=self._group_ids(len(indices)),
            weight_version=self.engine.weight_version)
        t3 = time.perf_counter()
        self._log_sample_metrics(episodes, SampleTimes(t1 - t0, t2 - t1, t3 - t2))
        return episodes

    def _sample_partial(self, num_prompts: int) -> list[SingleAgentEpisode]:
        """`num_prompts` finished groups, continuing those in flight first (partial rollouts)."""
        t0 = time.perf_counter()
        groups = self._in_flight.sample_groups(num_prompts, self._start_group, self.engine,
                                               self._next_sampling_params())
        t1 = time.perf_counter()
        flat = episode_building.partial_responses(groups)
        verdicts = episode_building.verify_partial(self.env, flat)
        t2 = time.perf_counter()
        episodes = episode_building.build_partial_episodes(self.env, flat, verdicts)
        self._log_sample_metrics(episodes,
                                 SampleTimes(t1 - t0, t2 - t1, time.perf_counter() - t2))
        log_partial_metrics(self.metrics, self._in_flight, [r for _, r in flat])
        return episodes

    def _start_group(self) -> tuple[int, list[int], str]:
        """The next prompt of the env, for a new group: (prompt index, prompt ids, group id)."""
        _, info = self.env.reset()
        return info[PROMPT_INDEX], list(info[PROMPT_IDS]), self._group_ids(1)[0]

    def _group_ids(self, count: int) -> list[str]:
        """Ids for `count` new groups, unique over the runners of a run."""
        return [self._counts.next_group_id(self.worker_index or 0) for _ in range(count)]

    def _sample_multi_turn(self, prompt_indices: list[int], n: int) -> list[SingleAgentEpisode]:
        """Episodes of a multi-turn env, turn by turn (`rollout.turn_loop`); generation and
        env steps (tools, verification) interleave, so their time is reported together, as
        generation; making the finished episodes is the replay."""
        t0 = time.perf_counter()
        envs = self._episode_envs.spawn(self.env, len(prompt_indices) * n)
        finished = run_multi_turn(envs, self.engine, prompt_indices, n,
                                  self._next_sampling_params(),
                                  self._episode_envs.executor)
        t1 = time.perf_counter()
        episodes = episode_building.multi_turn_episodes(
            finished, n, group_ids=self._group_ids(len(prompt_indices)),
            weight_version=self.engine.weight_version)
        self._log_sample_metrics(episodes,
                                 SampleTimes(t1 - t0, replay=time.perf_counter() - t1))
        log_turn_metrics(self.metrics, episodes)
        return episodes

    def _sample_agents(self, reset_infos: list[dict[str, Any]], n: int
                       ) -> list[SingleAgentEpisode]:
        """Episodes of an agent env: the agents run against this runner's gateway; their
        time is generation (the model's and the agents' own work interleave)."""
        if self._gateway is None:
            cfg = self.config
            self._gateway = make_gateway(self.env, self.engine, temperature=cfg.temperature,
                                         top_p=cfg.top_p, response_length=cfg.response_length)
        t0 = time.perf_counter()
        episodes, counts = sample_agent_episodes(
            self.env, self._gateway, reset_infos, n, group_ids=self._group_ids(len(reset_infos)))
        for name, value in counts.metrics().items():
            self.metrics.log_value(name, value, window=1)
        if not episodes:
            raise AllAgentsFailed(
                f"every one of the {len(reset_infos)} prompt groups of this sample call lost an "
                f"agent episode ({counts.errors} errors, {counts.timeouts} timeouts of "
                f"{counts.episodes} episodes); the first: {counts.first_error}")
        self._log_sample_metrics(episodes, SampleTimes(time.perf_counter() - t0))
        return episodes

    def _log_sample_metrics(self, episodes, times: SampleTimes) -> None:
        self.num_env_steps_sampled_lifetime += log_sample_metrics(
            self.metrics, episodes, times, self.engine.weight_version,
            self.env.verifier_metrics())

    # --- evaluation -----------------------------------------------------------------------------
    def evaluate(self, *, config, shard: int = 0, num_shards: int = 1, seed: int = 0) -> EvalShard:
        """Score this runner's share of the held-out problems (see `RLVR.evaluate`).

        Args:
            config: the algorithm's evaluation config: its held-out data set (`eval_dataset`,
                `eval_split`), `eval_num_problems`, `eval_num_samples` and sampling arguments
                (`temperature`, 0 = greedy; `top_p`; `response_length`) are the evaluation's.
            shard, num_shards: this runner scores problems `shard, shard + num_shards, ...` of
                the first `eval_num_problems`.
            seed: the evaluation's sampling seed; the training sampler's state is not touched.
        """
        env = self._held_out.under(
            {**self._env_config(config), **config.held_out_env_overrides()}, self._episode_envs)
        sampling = SamplingParams(temperature=config.temperature, top_p=config.top_p,
                                  max_tokens=config.response_length, seed=seed)
        return score_shard(env, self.engine, shard=shard, num_shards=num_shards,
                           num_problems=min(config.eval_num_problems, env.num_problems),
                           samples_per_problem=config.eval_num_samples, sampling=sampling,
                           episode_envs=self._episode_envs)

    # --- weight sync by broadcast (weight_sync_backend "nccl"/"gloo"; see weight_broadcast) ----
    def join_weight_broadcast(self, *, first_rank: int, **address) -> None:
        """Join the learner's broadcast group; RLVR calls this while the learner joins."""
        self.engine.join_weight_broadcast(first_rank=first_rank, **address)

    def receive_weights(self) -> int:
        """Receive one broadcast of the learner's weights into the engine; returns the version.

        The torch engine samples from this runner's module, which then holds the new weights
        too; vLLM keeps its own copy, and the module keeps the version it last received by
        `set_state` (its `get_state` says which), rather than paying a second copy per sync.
        """
        return self._load_into_engine(self.engine.receive_weights)

    # --- weight sync by CUDA IPC (weight_sync_backend "cuda_ipc"; see weight_ipc) ------------
    def gpu_uuids(self) -> list[str]:
        """The GPUs this runner's process sees (the driver checks the learner's is one)."""
        from rllib_llm.exchange.weight_ipc import visible_uuids

        return visible_uuids()

    def load_shared_weights(self, shared) -> int:
        """Copy the learner's weights from CUDA IPC handles into the engine; returns the
        version (as `receive_weights`)."""
        return self._load_into_engine(lambda: self.engine.load_shared_weights(shared))

    def _load_into_engine(self, load) -> int:
        """`load()` the learner's weights into the engine, timed; they become this runner's
        weights (and its module's, where the engine samples from the module)."""
        start = time.perf_counter()
        version = load()
        self.metrics.log_value(WEIGHT_LOAD_S, time.perf_counter() - start, window=1)
        self._weights_seq_no = version
        if self._engine_shares_module:
            self._module_seq_no = version
        return version

    # --- RLlib plumbing -------------------------------------------------------------------------
    def get_spaces(self):
        spaces = (self.env.observation_space, self.env.action_space)
        return {INPUT_ENV_SPACES: spaces, INPUT_ENV_SINGLE_SPACES: spaces,
                DEFAULT_MODULE_ID: spaces}

    def get_metrics(self):
        # Problems the env dropped for prompts over prompt_length (fixed per data set).
        self.metrics.log_value(NUM_DROPPED_PROMPTS, self.env.num_dropped_prompts, window=1)
        return self.metrics.reduce()

    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        state = {NUM_ENV_STEPS_SAMPLED_LIFETIME: self.num_env_steps_sampled_lifetime,
                 SAMPLER_STATE: sampler_state(self.env, self._counts, self._in_flight)}
        if self._check_component(COMPONENT_RL_MODULE, components, not_components):
            state[COMPONENT_RL_MODULE] = self.module.get_state(inference_only=True)
            state[WEIGHTS_SEQ_NO] = self._module_seq_no
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Receive the learner's weights; their sequence number becomes the weight version."""
        if COMPONENT_RL_MODULE in state:
            seq_no = state.get(WEIGHTS_SEQ_NO, 0)
            if seq_no == 0 or seq_no > self._weights_seq_no:
                self._load_module_state(state[COMPONENT_RL_MODULE], seq_no)
        if NUM_ENV_STEPS_SAMPLED_LIFETIME in state:
            self.num_env_steps_sampled_lifetime = state[NUM_ENV_STEPS_SAMPLED_LIFETIME]
        if SAMPLER_STATE in state:
            restore_sampler_state(state[SAMPLER_STATE], self.env, self._counts, self._in_flight)

    def _load_module_state(self, module_state, seq_no: int) -> None:
        """Load the learner's module state (or a reference to it: remote runners get one) of
        version `seq_no` into the module and, once built, the engine."""
        start = time.perf_counter()
        if isinstance(module_state, ray.ObjectRef):
            module_state = ray.get(module_state)
        if DEFAULT_MODULE_ID in module_state:
            module_state = module_state[DEFAULT_MODULE_ID]
        # The runner's module is what checkpoints and a later-built engine read.
        self.module.set_state(module_state)
        if self._engine is not None:
            weights = {} if self._engine_shares_module else self._model_weights(module_state)
            self._engine.load_weights(weights, version=seq_no)
        self._weights_seq_no = max(self._weights_seq_no, seq_no)
        self._module_seq_no = seq_no
        self.metrics.log_value(WEIGHT_LOAD_S, time.perf_counter() - start, window=1)

    def get_ctor_args_and_kwargs(self):
        return (), {"config": self.config}

    def assert_healthy(self) -> None:
        assert self.env is not None and self.module is not None, "RLVREnvRunner not set up"

    def stop(self) -> None:
        for env in (self.env, self._held_out.env):
            if env is not None:
                env.close()
        self._episode_envs.close()
        if self._gateway is not None:
            self._gateway.stop()

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:  # interpreter shutdown: the env's pool may already be gone
            pass

