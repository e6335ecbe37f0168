"""`RLVREnvRunner`: generates whole responses in batches, then steps the env through them.

Per iteration each runner takes its share of `rollout_batch_size` prompts from its environment,
samples `num_return_sequences_in_group` responses per prompt with the rollout engine (one batched
call with a KV cache), and replays every response through the environment with `step_chunk`, so
the environment stays the authority on rewards and termination while the per-token Python work
stays small. Each response becomes one `SingleAgentEpisode` carrying the sampler's log-probs and
the weight version that produced it.

Multi-turn envs (`env.multi_turn`, e.g. "math_tool") go turn by turn instead
(`rollout.turn_loop`): generate until each env needs input, step all envs at once from a
thread pool (tool calls run concurrently), continue, with one env per running episode.

With partial rollouts (`partial_rollout_max_split` > 1, `rollout.partial_rollouts`) responses are
generated in segments, and those unfinished when a call holds its groups go on in the next call.
"""

from __future__ import annotations

import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
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
    device_default,
    is_gpu,
    module_device,
    require_visible_gpu,
)
from rllib_llm.exchange.memory_budgets import AUTO, generate_budget
from rllib_llm.exchange.threads import set_torch_threads
from rllib_llm.models import DTYPES
from rllib_llm.rollout.decode_graphs import cuda_graph_decode
from rllib_llm.rollout.engine import SamplingParams
from rllib_llm.rollout.held_out_sampling import (
    EvalShard,
    score_held_out,
    score_held_out_multi_turn,
    shard_indices,
)
from rllib_llm.rollout.partial_rollouts import InFlight
from rllib_llm.rollout.replay import replay_response
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
from rllib_llm.rollout.turn_loop import (
    MAX_TOOL_THREADS,
    run_multi_turn,
    to_single_agent_episode,
)

# This runner's part of a checkpoint that RLlib's EnvRunner state leaves out.
SAMPLER_STATE = "rlvr_sampler"

def env_config_for(config, worker_index: int) -> dict[str, Any]:
    """The env config runner `worker_index` (0: the driver's) builds its env from under `config`:
    the user's `env_config` plus the model, prompt and response lengths and a per-runner seed."""
    env_config = dict(config.env_config)
    env_config.update(
        model=config.model_name_or_path,
        prompt_length=config.resolved_prompt_length,
        response_length=config.response_length,
        seed=(config.seed or 0) + worker_index,
    )
    return env_config


def make_env(env_id, env_config: dict[str, Any]):
    """The env `environment(env_id)` names (registered name or class), built from `env_config`."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    from rllib_llm.envs import register_envs

    register_envs()
    if isinstance(env_id, str):
        if not _global_registry.contains(ENV_CREATOR, env_id):
            raise ValueError(
                f"environment({env_id!r}) is not a registered environment; rllib_llm "
                "registers 'math_verify' (register yours with ray.tune.register_env)."
            )
        return _global_registry.get(ENV_CREATOR, env_id)(env_config)
    if env_id is None:
        raise ValueError("RLVRConfig needs an environment: call .environment('math_verify').")
    return env_id(env_config)


def check_env(config) -> None:
    """Build the training env as the driver's runner would, and close it: its dataset and
    settings are checked here, in this process, with the env's own error.

    RLVR runs this before any runner starts. A remote runner whose env fails to build dies in
    its constructor, and the driver then sees only RLlib's `IndexError` while it looks for the
    runner's spaces, tens of seconds later. Cheap: the driver's runner builds the same env
    next, from the process's cached tokenizer and problem set (envs/problem_set.py).
    """
    env = make_env(config.env, env_config_for(config, 0))
    close = getattr(env, "close", None)
    if close is not None:
        close()


class RLVREnvRunner(EnvRunner, Checkpointable):
    """An EnvRunner for token-level LLM environments, single- and multi-turn.

    `sample()` returns complete episodes only: a response is generated to its end before the
    episode is built. With partial rollouts the responses not yet ended wait in the runner (not
    as episodes) for its next call.
    """

    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        set_torch_threads(self.config.num_torch_threads)
        self._counter = itertools.count()
        self._sample_calls = 0  # training sample() calls so far: they seed the sampler
        self._weights_seq_no = 0  # version of the weights the engine samples with
        self._module_seq_no = 0  # version of the weights in self.module (what get_state returns)
        self._last_sample_end: float | None = None  # perf_counter() when sample() last returned
        self.env = self._make_env(self._env_config())
        self._share_prompts()
        self._eval_env = None
        self._eval_env_config: dict[str, Any] | None = None  # what _eval_env was built from
        self.make_module()
        self._engine = None  # built on first use: a driver-side runner may only ever evaluate
        self._episode_envs: dict[int, list[Any]] = {}  # multi-turn: id(env) -> one env per
        # running episode, spawned from env (the training env's, the held-out env's)
        self._executor: ThreadPoolExecutor | None = None  # multi-turn: steps envs at once
        self._in_flight = self._partial_rollouts()

    def _partial_rollouts(self) -> InFlight | None:
        """The groups in flight between calls with partial rollouts; None without them."""
        split = self.config.partial_rollout_max_split
        if split == 1:
            return None
        if getattr(self.env, "multi_turn", False):
            self.env.close()  # (its tools' and verifier's processes)
            raise ValueError(
                f"RLVRConfig.partial_rollout_max_split={split} with the multi-turn environment "
                f"{self.config.env!r}: partial rollouts continue single responses, not "
                "turns between tool calls; set partial_rollout_max_split=1.")
        return InFlight(split, self.config.response_length,
                        self.config.num_return_sequences_in_group)

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

    def _share_prompts(self) -> None:
        """Remote runner i of n draws share i - 1 of every epoch's prompts, from the order all
        runners seed alike: the runners of an iteration never sample the same prompt. (An env
        without `shard_order` walks its own order, seeded per runner.)"""
        runners = self.config.num_env_runners
        shard_order = getattr(self.env, "shard_order", None)
        if runners and self.worker_index and shard_order is not None:
            shard_order(self.worker_index - 1, runners, self.config.seed or 0)

    def _make_env(self, env_config: dict[str, Any]):
        return make_env(self.config.env, env_config)

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

    def _make_engine(self):
        cfg, tok = self.config, self.env.tokenizer
        who = f"env runner {self.worker_index}" if self.worker_index else "the driver's env runner"
        if cfg.rollout_engine == "vllm":
            from rllib_llm.models import resolve_path
            from rllib_llm.rollout.vllm_engine import VLLMRolloutEngine

            # "auto": CUDA graphs on a GPU, eager on a CPU.
            eager = device_default(cfg.vllm_enforce_eager, self._device, gpu=False, cpu=True)
            if cfg.vllm_enforce_eager == AUTO and self._device.type == "cuda":
                announce(f"{who}'s vLLM engine", self._device,
                         f"vllm_enforce_eager={eager} (auto: CUDA graphs)")
            return VLLMRolloutEngine(
                resolve_path(cfg.model_name_or_path),
                eos_token_id=tok.eos_token_id,
                dtype=cfg.model_dtype,
                seed=(cfg.seed or 0) + (self.worker_index or 0),
                gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                kv_cache_memory_bytes=cfg.vllm_kv_cache_memory_bytes,
                tensor_parallel_size=cfg.vllm_tensor_parallel_size,
                enforce_eager=eager,
                max_num_seqs=cfg.vllm_max_num_seqs,
                enable_sleep_mode=cfg.vllm_enable_sleep_mode,
            )
        from rllib_llm.rollout.torch_engine import TorchRolloutEngine

        # Sized for the device the engine computes on, now that the model is there.
        budget, sized = generate_budget(cfg.max_tokens_per_generate_batch, self._device,
                                        self.module.model, cfg.device_memory_share)
        graphs = cuda_graph_decode(cfg.torch_engine_cuda_graphs, self._device, self.module.model)
        if sized or graphs.note:
            announce(f"{who}'s torch engine", self._device,
                     ", ".join(note for note in (sized, graphs.note) if note))
        # The learners' mixed precision, where the sampler is to sample under it too.
        autocast = cfg.autocast_dtype if cfg.sampler_autocast else None
        return TorchRolloutEngine(
            self.module.model, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
            device=self._device, max_tokens_per_batch=budget,
            autocast_dtype=None if autocast is None else DTYPES[autocast],
            decode_step="cuda_graph" if graphs.on else "eager",
            graph_fallback=cfg.torch_engine_cuda_graphs == AUTO,
        )

    def _sampling(self) -> SamplingParams:
        """The sampling parameters of the next training `sample()` call.

        Each call gets its own seed, mixed from the config's seed, this runner's index and the
        number of calls so far: two runners never draw with the same seed, and a run resumed
        from a checkpoint (which holds the call count) draws what the uninterrupted run would.
        """
        cfg = self.config
        seed = None
        if cfg.seed is not None:
            mix = np.random.SeedSequence([cfg.seed, self.worker_index or 0, self._sample_calls])
            seed = int(mix.generate_state(1)[0])
        self._sample_calls += 1
        self.last_sample_seed = seed
        return SamplingParams(
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_tokens=cfg.response_length,
            seed=seed,
        )

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
        if getattr(self.env, "multi_turn", False):
            return self._sample_multi_turn([info[PROMPT_INDEX] for _, info in prompts], n)
        indices = [info[PROMPT_INDEX] for _, info in prompts]
        t0 = time.perf_counter()
        responses = self.engine.generate([info[PROMPT_IDS] for _, info in prompts], n,
                                         self._sampling())
        t1 = time.perf_counter()
        verdicts = self._verify(self.env, indices, responses)
        t2 = time.perf_counter()
        episodes = self.build_episodes(self.env, indices, responses, verdicts)
        t3 = time.perf_counter()
        self._log_sample_metrics(episodes, SampleTimes(t1 - t0, t2 - t1, t3 - t2))
        return episodes

    def _sample_partial(self, num_prompts: int) -> list[SingleAgentEpisode]:
        """`num_prompts` finished groups, continuing those in flight first (partial rollouts)."""
        t0 = time.perf_counter()
        groups = self._in_flight.sample_groups(num_prompts, self._start_group, self.engine,
                                               self._sampling())
        t1 = time.perf_counter()
        flat = [(g, r) for g in groups for r in g.responses]
        verdicts = self.env.verify_responses([g.prompt_index for g, _ in flat],
                                             [r.token_ids for _, r in flat])
        t2 = time.perf_counter()
        episodes = [replay_response(self.env, g.prompt_index, r.response(), group_id=g.group_id,
                                    weight_version=np.asarray(r.versions, dtype=np.int64),
                                    verification=verdict)
                    for (g, r), verdict in zip(flat, verdicts, strict=True)]
        self._log_sample_metrics(episodes,
                                 SampleTimes(t1 - t0, t2 - t1, time.perf_counter() - t2))
        log_partial_metrics(self.metrics, self._in_flight, [r for _, r in flat])
        return episodes

    def _start_group(self) -> tuple[int, list[int], str]:
        """The next prompt of the env, for a new group: (prompt index, prompt ids, group id)."""
        _, info = self.env.reset()
        return info[PROMPT_INDEX], list(info[PROMPT_IDS]), \
            f"{self.worker_index or 0}-{next(self._counter)}"

    def _sample_multi_turn(self, prompt_indices: list[int], n: int) -> list[SingleAgentEpisode]:
        """Episodes of a multi-turn env, turn by turn (`rollout.turn_loop`); generation and
        env steps (tools, verification) interleave, so their time is reported together, as
        generation; making the finished episodes is the replay."""
        t0 = time.perf_counter()
        finished = run_multi_turn(self.envs_for(self.env, len(prompt_indices) * n),
                                  self.engine, prompt_indices, n, self._sampling(),
                                  self.executor)
        t1 = time.perf_counter()
        version = self.engine.weight_version
        episodes = []
        for g in range(len(prompt_indices)):
            group_id = f"{self.worker_index or 0}-{next(self._counter)}"
            episodes += [to_single_agent_episode(e, group_id=group_id, weight_version=version)
                         for e in finished[g * n:(g + 1) * n]]
        self._log_sample_metrics(episodes,
                                 SampleTimes(t1 - t0, replay=time.perf_counter() - t1))
        log_turn_metrics(self.metrics, episodes)
        return episodes

    def envs_for(self, env, count: int) -> list[Any]:
        """`count` envs for concurrent episodes, spawned from `env` once and then reused."""
        pool = self._episode_envs.setdefault(id(env), [])
        while len(pool) < count:
            pool.append(env.spawn())
        return pool[:count]

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The threads that step multi-turn envs (and so run their tool calls) at once."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(MAX_TOOL_THREADS, thread_name_prefix="env-step")
        return self._executor

    @staticmethod
    def _verify(env, prompt_indices: list[int], responses) -> list[Any]:
        """The verdicts of every response (`responses[g][j]` answers `prompt_indices[g]`), flat,
        in one batch (the verifier's pool overlaps them); `build_episodes` replays each with
        its verdict."""
        flat = [(i, r) for i, group in zip(prompt_indices, responses) for r in group]
        return env.verify_responses([i for i, _ in flat], [r.token_ids for _, r in flat])

    def build_episodes(self, env, prompt_indices: list[int], responses,
                       verdicts) -> list[SingleAgentEpisode]:
        """Replay every response (`responses[g][j]` answers `prompt_indices[g]`) with its
        verdict (`verdicts`, flat in the same order) into an episode."""
        version = self.engine.weight_version
        episodes = []
        for g, (index, group) in enumerate(zip(prompt_indices, responses)):
            group_id = f"{self.worker_index or 0}-{next(self._counter)}"
            for j, response in enumerate(group):
                episodes.append(replay_response(
                    env, index, response, group_id=group_id, weight_version=version,
                    verification=verdicts[g * len(group) + j]))
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
        env = self._held_out_env(config)
        num_problems = min(config.eval_num_problems, env.num_problems)
        sampling = SamplingParams(temperature=config.temperature, top_p=config.top_p,
                                  max_tokens=config.response_length, seed=seed)
        indices = shard_indices(num_problems, shard, num_shards)
        if getattr(env, "multi_turn", False):
            return score_held_out_multi_turn(
                self.envs_for(env, len(indices) * config.eval_num_samples), self.engine,
                indices, config.eval_num_samples, sampling, num_problems, self.executor)
        return score_held_out(env, self.engine, indices, config.eval_num_samples, sampling,
                              num_problems)

    def _held_out_env(self, config):
        """The env of the held-out problems under `config`, kept while that stays the same."""
        env_config = {**self._env_config(config), **config.held_out_env_overrides()}
        if self._eval_env is None or self._eval_env_config != env_config:
            if self._eval_env is not None:
                for spawned in self._episode_envs.pop(id(self._eval_env), ()):
                    spawned.close()
                self._eval_env.close()
            self._eval_env = self._make_env(env_config)
            self._eval_env_config = env_config
        return self._eval_env

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
                 SAMPLER_STATE: self._sampler_state()}
        if self._check_component(COMPONENT_RL_MODULE, components, not_components):
            state[COMPONENT_RL_MODULE] = self.module.get_state(inference_only=True)
            state[WEIGHTS_SEQ_NO] = self._module_seq_no
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Receive the learner's weights; their sequence number becomes the weight version."""
        if COMPONENT_RL_MODULE in state:
            seq_no = state.get(WEIGHTS_SEQ_NO, 0)
            if seq_no == 0 or seq_no > self._weights_seq_no:
                start = time.perf_counter()
                module_state = state[COMPONENT_RL_MODULE]
                if isinstance(module_state, ray.ObjectRef):  # remote runners get a reference
                    module_state = ray.get(module_state)
                if DEFAULT_MODULE_ID in module_state:
                    module_state = module_state[DEFAULT_MODULE_ID]
                # The runner's module is what checkpoints and a later-built engine read.
                self.module.set_state(module_state)
                if self._engine is not None:
                    weights = {} if self._engine_shares_module else \
                        self._model_weights(module_state)
                    self._engine.load_weights(weights, version=seq_no)
                self._weights_seq_no = max(self._weights_seq_no, seq_no)
                self._module_seq_no = seq_no
                self.metrics.log_value(WEIGHT_LOAD_S, time.perf_counter() - start, window=1)
        if NUM_ENV_STEPS_SAMPLED_LIFETIME in state:
            self.num_env_steps_sampled_lifetime = state[NUM_ENV_STEPS_SAMPLED_LIFETIME]
        if SAMPLER_STATE in state:
            self._set_sampler_state(state[SAMPLER_STATE])

    def _sampler_state(self) -> dict[str, Any]:
        """What decides the next samples besides the weights: the env's data order, the count
        of sample calls (the sampler's seeds) and of groups (their ids)."""
        groups = next(self._counter)
        self._counter = itertools.count(groups)  # reading a count advances it: put it back
        state = {"data_order": self.env.order_state(), "sample_calls": self._sample_calls,
                 "groups": groups}
        if self._in_flight is not None:  # the responses partial rollouts continue next call
            state["in_flight"] = self._in_flight.get_state()
        return state

    def _set_sampler_state(self, state: dict[str, Any]) -> None:
        self.env.set_order_state(state["data_order"])
        self._sample_calls = state["sample_calls"]
        self._counter = itertools.count(state["groups"])
        if self._in_flight is not None:
            self._in_flight.set_state(state.get("in_flight", {"in_flight": [], "finished": []}))

    def get_ctor_args_and_kwargs(self):
        return (), {"config": self.config}

    def assert_healthy(self) -> None:
        assert self.env is not None and self.module is not None, "RLVREnvRunner not set up"

    def stop(self) -> None:
        spawned = [e for pool in self._episode_envs.values() for e in pool]
        for env in (self.env, self._eval_env, *spawned):
            if env is not None:
                env.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:  # interpreter shutdown: the env's pool may already be gone
            pass

