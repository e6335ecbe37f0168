"""The fixed-shape decode step (what a CUDA graph replays) gives the eager loop's tokens and
log-probs, on the CPU: the same code runs there without capture."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from rllib_llm.models.tiny_llama import tiny_llama_config
from rllib_llm.rollout.decode_graphs import StaticDecode, supports_static_decode
from rllib_llm.rollout.engine import SamplingParams
from rllib_llm.rollout.kv_cache import kv_cache
from rllib_llm.rollout.torch_engine import TorchRolloutEngine

torch.set_num_threads(1)

PAD, EOS, V = 0, 1, 40
PROMPTS = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15]]  # ragged: left padding in the mask


def tiny_llama(attention: str) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = tiny_llama_config(V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=64, pad_token_id=PAD, eos_token_id=EOS)
    config._attn_implementation = attention
    return LlamaForCausalLM(config).eval()


def generate(model, decode_step: str, sampling: SamplingParams, **engine_kwargs):
    engine = TorchRolloutEngine(model, eos_token_id=EOS, pad_token_id=PAD,
                                decode_step=decode_step, **engine_kwargs)
    return engine.generate(PROMPTS, 3, sampling)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("sampling", [
    SamplingParams(temperature=1.0, max_tokens=24, seed=3),  # seeded sampling, EOS stops rows
    SamplingParams(temperature=0.7, top_p=0.8, max_tokens=16, seed=5,
                   stop_sequences=((7, 8),)),
    SamplingParams(temperature=0.0, max_tokens=16),  # greedy
])
def test_static_step_gives_the_eager_loops_tokens_and_logprobs(attention, sampling):
    model = tiny_llama(attention)
    eager = generate(model, "eager", sampling)
    static = generate(model, "static", sampling)
    for eager_group, static_group in zip(eager, static, strict=True):
        for a, b in zip(eager_group, static_group, strict=True):
            assert b.token_ids == a.token_ids and b.finish_reason == a.finish_reason
            # Masked columns weigh exactly 0: only the attention's float sums are reordered.
            torch.testing.assert_close(torch.tensor(b.logprobs), torch.tensor(a.logprobs),
                                       atol=1e-5, rtol=0)
    lengths = {len(r.token_ids) for group in eager for r in group}
    assert len(lengths) > 1 or sampling.greedy  # some rows stopped early: the test covers it


def test_static_step_across_decode_batches_and_under_autocast():
    """Several decode batches (one fixed-shape step each) and bf16 autocast give the eager
    loop's tokens; log-probs within bf16's rounding."""
    model = tiny_llama("sdpa")
    sampling = SamplingParams(temperature=1.0, max_tokens=12, seed=1)
    kwargs = {"max_tokens_per_batch": 40, "autocast_dtype": torch.bfloat16}
    eager = generate(model, "eager", sampling, **kwargs)
    static = generate(model, "static", sampling, **kwargs)
    for eager_group, static_group in zip(eager, static, strict=True):
        for a, b in zip(eager_group, static_group, strict=True):
            assert b.token_ids == a.token_ids
            torch.testing.assert_close(torch.tensor(b.logprobs), torch.tensor(a.logprobs),
                                       atol=2e-2, rtol=0)


def test_static_step_writes_one_column_and_leaves_the_rest():
    """A step writes its keys at the column it is given, and nowhere else."""
    model = tiny_llama("sdpa")
    cache = kv_cache(model.config, 2, 8)
    prompt = torch.tensor([[5, 6, 7], [PAD, 8, 9]])
    prompt_mask = (prompt != PAD).long()
    with torch.inference_mode():
        model(input_ids=prompt, attention_mask=prompt_mask, past_key_values=cache,
              position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0), use_cache=True)
        before = cache.layers[0].keys.clone()
        step = StaticDecode(model, cache, prompt_mask, 8, capture=False)
        step(torch.tensor([10, 11]), torch.tensor([[3], [2]]), 3)
    after = cache.layers[0].keys
    assert torch.equal(after[:, :, :3], before[:, :, :3])  # the prompt's columns
    assert after[:, :, 3].abs().sum() > 0  # the step's column
    assert not after[:, :, 4:].any()  # the columns to come: zeroed, never garbage
    assert step.mask[:, 0, 0].tolist() == [[True] * 4 + [False] * 4,
                                           [False] + [True] * 3 + [False] * 4]


def test_refusals():
    model = tiny_llama("sdpa")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        TorchRolloutEngine(model, eos_token_id=EOS, pad_token_id=PAD, decode_step="cuda_graph")
    with pytest.raises(ValueError, match="decode_step='fast' must be one of"):
        TorchRolloutEngine(model, eos_token_id=EOS, pad_token_id=PAD, decode_step="fast")
    flex = tiny_llama("sdpa")
    flex.config._attn_implementation = "flex_attention"
    assert "flex_attention" in supports_static_decode(flex, kv_cache(flex.config, 1, 4))


@pytest.mark.parametrize("fallback", [True, False])
def test_a_failed_capture_falls_back_to_the_eager_step_only_when_allowed(monkeypatch, fallback):
    """'auto' graphs (graph_fallback): a capture that raises warns once and the call goes on
    eagerly, with the eager loop's samples; explicit graphs raise the capture's error."""
    model = tiny_llama("sdpa")
    sampling = SamplingParams(temperature=1.0, max_tokens=10, seed=2)
    expected = generate(model, "eager", sampling)

    def capturing_step(engine, cache, prompt_mask, max_len):
        step = StaticDecode(engine.model, cache, prompt_mask, max_len, capture=False)
        step.capture = True  # as on a GPU; its capture fails below
        return step

    def failing_capture(step):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(TorchRolloutEngine, "_decode_step", capturing_step)
    monkeypatch.setattr(StaticDecode, "_capture", failing_capture)
    engine = TorchRolloutEngine(model, eos_token_id=EOS, pad_token_id=PAD, decode_step="static",
                                graph_fallback=fallback)
    if not fallback:
        with pytest.raises(RuntimeError, match="stream is capturing"):
            engine.generate(PROMPTS, 3, sampling)
        return
    with pytest.warns(UserWarning, match="could not capture its decode step"):
        got = engine.generate(PROMPTS, 3, sampling)
    assert engine.decode_step == "eager" and "stream is capturing" in engine.graph_failure
    assert [[r.token_ids for r in g] for g in got] == [[r.token_ids for r in g] for g in expected]
