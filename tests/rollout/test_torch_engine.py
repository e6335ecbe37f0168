"""The torch rollout engine: the log-probs the learner relies on, stopping, seeding, weight sync."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import DynamicCache, LlamaForCausalLM
from transformers.modeling_outputs import CausalLMOutputWithPast

from rllib_llm.models.tiny_llama import tiny_llama_config
from rllib_llm.rollout.engine import Response, RolloutEngine, SamplingParams
from rllib_llm.rollout.torch_engine import TorchRolloutEngine, left_pad, top_p_filter

torch.set_num_threads(1)

PAD, EOS, V = 0, 1, 40
PROMPTS = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15]]  # ragged: exercises left padding


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = tiny_llama_config(
        V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        pad_token_id=PAD, eos_token_id=EOS,
    )
    return LlamaForCausalLM(config).eval()


def make_engine(model: nn.Module) -> TorchRolloutEngine:
    return TorchRolloutEngine(model, eos_token_id=EOS, pad_token_id=PAD)


def teacher_forced_logprobs(model, prompt, response, temperature) -> torch.Tensor:
    """log_softmax(logits / T)[token] of each response token, from one unpadded forward pass."""
    ids = torch.tensor([prompt + response.token_ids])  # (1, P + R)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # (R, V)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(response.token_ids)[:, None]).squeeze(-1)  # (R,)


def test_engine_satisfies_protocol(model):
    assert isinstance(make_engine(model), RolloutEngine)


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8), (1.6, 1.0)])
def test_logprobs_match_teacher_forcing(model, temperature, top_p):
    engine = make_engine(model)
    sampling = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=12, seed=3)
    out = engine.generate(PROMPTS, 3, sampling)
    for prompt, group in zip(PROMPTS, out, strict=True):
        for response in group:
            expected = teacher_forced_logprobs(model, prompt, response, temperature)
            got = torch.tensor(response.logprobs)
            # Pre-top-p distribution: with top_p < 1 the filtered probs would be larger.
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_greedy_reports_temperature_one_logprobs_and_argmax(model):
    out = make_engine(model).generate(PROMPTS, 1, SamplingParams(temperature=0, max_tokens=6))
    for prompt, (response,) in zip(PROMPTS, out, strict=True):
        expected = teacher_forced_logprobs(model, prompt, response, 1.0)
        torch.testing.assert_close(torch.tensor(response.logprobs), expected, atol=1e-5, rtol=0)
        ids = torch.tensor([prompt + response.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]  # (R, V)
        assert logits.argmax(-1).tolist() == response.token_ids


@pytest.mark.parametrize(("temperature", "top_p"), [(0.0, 1.0), (1.0, 1.0), (0.7, 0.9)])
def test_sampler_logp_is_bit_equal_to_the_learners_for_the_same_logits(temperature, top_p):
    # Given the same logits, the reported log-prob is the learner's value exactly (not to
    # ~1e-6, as torch's log_softmax gave), so sampler and learner differ only where their
    # forwards round differently (KV-cache decode against one full forward).
    from rllib_llm.learner.token_logp import token_logp_and_entropy
    from rllib_llm.rollout.torch_engine import sample_next_token

    logits = torch.randn(64, 300, generator=torch.Generator().manual_seed(0)) * 4  # (B, V)
    sampling = SamplingParams(temperature=temperature, top_p=top_p, seed=0)
    token, logp = sample_next_token(logits, sampling, torch.Generator().manual_seed(1))
    with torch.no_grad():
        learner, _ = token_logp_and_entropy(logits[:, None], token[:, None],
                                            temperature or 1.0, entropy_grad=False)
    assert torch.equal(logp, learner[:, 0])


def test_n_responses_per_prompt_and_shapes(model):
    out = make_engine(model).generate(PROMPTS, 5, SamplingParams(max_tokens=7, seed=0))
    assert len(out) == len(PROMPTS)
    for group in out:
        assert len(group) == 5
        for r in group:
            assert isinstance(r, Response) and len(r.token_ids) == len(r.logprobs) >= 1
            assert all(0 <= t < V for t in r.token_ids) and all(lp <= 0 for lp in r.logprobs)
        # Samples of one prompt are independent draws, not copies of one.
        assert len({tuple(r.token_ids) for r in group}) > 1


def test_same_seed_same_samples_other_seed_other_samples(model):
    engine = make_engine(model)
    a = engine.generate(PROMPTS, 4, SamplingParams(max_tokens=8, seed=11))
    b = engine.generate(PROMPTS, 4, SamplingParams(max_tokens=8, seed=11))
    c = engine.generate(PROMPTS, 4, SamplingParams(max_tokens=8, seed=12))
    assert a == b
    assert a != c


def test_generation_runs_in_eval_mode_and_restores_the_mode():
    torch.manual_seed(0)
    config = tiny_llama_config(V, hidden_size=32, num_attention_heads=4, intermediate_size=64)
    config.attention_dropout = 0.5  # dropout would make the log-probs random
    model = LlamaForCausalLM(config).train()
    engine = make_engine(model)
    out = engine.generate(PROMPTS, 2, SamplingParams(max_tokens=5, seed=0))
    assert model.training
    model.eval()
    for prompt, group in zip(PROMPTS, out, strict=True):
        for r in group:
            expected = teacher_forced_logprobs(model, prompt, r, 1.0)
            torch.testing.assert_close(torch.tensor(r.logprobs), expected, atol=1e-5, rtol=0)


def test_max_batch_size_chunks_give_the_same_greedy_result(model):
    sampling = SamplingParams(temperature=0, max_tokens=6)
    whole = make_engine(model).generate(PROMPTS, 2, sampling)
    chunked = TorchRolloutEngine(model, eos_token_id=EOS, pad_token_id=PAD, max_batch_size=3)
    got = chunked.generate(PROMPTS, 2, sampling)
    assert [[r.token_ids for r in g] for g in got] == [[r.token_ids for r in g] for g in whole]


def test_batches_keep_groups_whole_and_split_only_groups_larger_than_a_batch():
    from rllib_llm.rollout.torch_engine import _batches

    assert _batches([9] * 3, 2, 6) == [[(0, 2), (1, 2), (2, 2)]]
    assert _batches([9] * 3, 2, 4) == [[(0, 2), (1, 2)], [(2, 2)]]
    assert _batches([9] * 2, 2, 3) == [[(0, 2), (1, 1)], [(1, 1)]]
    assert _batches([9], 5, 2) == [[(0, 2)], [(0, 2)], [(0, 1)]]
    assert _batches([], 4, 8) == []
    assert _batches([9] * 3, 2, None) == [[(0, 2), (1, 2), (2, 2)]]


class ScriptedLM(nn.Module):
    """A fake causal LM whose greedy choice at position p is `script[p]`, whatever the input.

    Rows with prompts of different lengths are at different positions, so each reaches EOS at its
    own step: this checks per-row stopping and that positions ignore the left padding.
    """

    def __init__(self, script: list[int]):
        super().__init__()
        self.config = tiny_llama_config(V, hidden_size=8, num_attention_heads=2)
        self.script = script
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, position_ids, past_key_values=None, logits_to_keep=0, **_):
        assert isinstance(past_key_values, DynamicCache)
        # The prediction at position p is the token for position p + 1.
        target = torch.tensor(self.script)[(position_ids + 1).clamp(max=len(self.script) - 1)]
        logits = torch.full((*input_ids.shape, V), -10.0)  # (B, S, V)
        logits.scatter_(-1, target[..., None], 10.0)
        return CausalLMOutputWithPast(logits=logits[:, -logits_to_keep:])


def test_stops_at_eos_including_it_or_at_max_tokens():
    # positions: 0..5 hold prompt tokens at most; EOS sits at position 6.
    script = [2, 2, 2, 2, 3, 4, EOS, 5, 5, 5, 5, 5, 5]
    engine = TorchRolloutEngine(ScriptedLM(script), eos_token_id=EOS, pad_token_id=PAD)
    prompts = [[7] * 2, [7] * 4, [7] * 6]  # responses start at positions 2, 4, 6
    out = engine.generate(prompts, 1, SamplingParams(temperature=0, max_tokens=3))
    assert out[0][0] == Response([2, 2, 3], pytest.approx([0.0] * 3, abs=1e-6), "length")
    assert out[1][0].token_ids == [3, 4, EOS] and out[1][0].finish_reason == "stop"
    assert out[2][0].token_ids == [EOS] and out[2][0].finish_reason == "stop"


def test_a_stop_sequence_ends_a_response_right_after_it_and_sampling_is_otherwise_unchanged(
        model):
    sampling = SamplingParams(temperature=1.0, max_tokens=24, seed=3)
    free = make_engine(model).generate(PROMPTS, 4, sampling)
    flat = [r.token_ids for group in free for r in group]
    # A two-token sequence that some of the free responses contain (before any EOS).
    seq = next((tuple(t[i:i + 2]) for t in flat for i in range(len(t) - 2)
                if EOS not in t[:i + 2]), None)
    stopped = make_engine(model).generate(
        PROMPTS, 4, SamplingParams(temperature=1.0, max_tokens=24, seed=3, stop_sequences=(seq,)))
    hits = 0
    for f, s in zip([r for g in free for r in g], [r for g in stopped for r in g], strict=True):
        end = next((i + 2 for i in range(len(f.token_ids) - 1)
                    if tuple(f.token_ids[i:i + 2]) == seq), None)
        if end is None:  # never reached: the very same response
            assert s == f
        else:
            hits += 1
            assert s.token_ids == f.token_ids[:end] and s.finish_reason == "stop"
            assert s.logprobs == pytest.approx(f.logprobs[:end])
    assert hits >= 1


def test_several_eos_ids_each_stop():
    script = [2, 2, 2, 9, 5, 5, 5]
    engine = TorchRolloutEngine(ScriptedLM(script), eos_token_id=[EOS, 9], pad_token_id=PAD)
    (resp,), = engine.generate([[7, 7]], 1, SamplingParams(temperature=0, max_tokens=5))
    assert resp.token_ids == [2, 9] and resp.finish_reason == "stop"


def test_load_weights_changes_outputs_and_sets_version(model):
    engine_model = LlamaForCausalLM(model.config).eval()  # a different random init
    engine = make_engine(engine_model)
    greedy = SamplingParams(temperature=0, max_tokens=6)
    before = engine.generate(PROMPTS, 1, greedy)
    assert engine.weight_version == 0
    engine.load_weights(model.state_dict(), version=7)
    after = engine.generate(PROMPTS, 1, greedy)
    assert engine.weight_version == 7
    assert after != before
    assert after == make_engine(model).generate(PROMPTS, 1, greedy)
    assert engine.model is engine_model  # loaded in place, not re-created


def test_load_weights_accepts_a_partial_state_dict(model):
    engine = make_engine(LlamaForCausalLM(model.config).eval())
    name = "model.norm.weight"
    engine.load_weights({name: torch.full_like(model.state_dict()[name], 2.0)}, version=1)
    assert torch.equal(engine.model.state_dict()[name], torch.full_like(model.model.norm.weight, 2))


def test_load_weights_rejects_unknown_keys_and_bad_shapes(model):
    engine = make_engine(LlamaForCausalLM(model.config).eval())
    with pytest.raises(ValueError, match=r"\['policy.lm_head.weight'\] are not in the engine"):
        engine.load_weights({"policy.lm_head.weight": torch.zeros(1)}, version=1)
    with pytest.raises(ValueError, match="model.norm.weight has shape \\(3,\\)"):
        engine.load_weights({"model.norm.weight": torch.zeros(3)}, version=1)
    assert engine.weight_version == 0


def test_generate_rejects_bad_arguments(model):
    engine = make_engine(model)
    with pytest.raises(ValueError, match="n=0 must be >= 1"):
        engine.generate(PROMPTS, 0, SamplingParams())
    with pytest.raises(ValueError, match=r"prompt_ids\[1\] is empty"):
        engine.generate([[5], []], 1, SamplingParams())
    with pytest.raises(ValueError, match="max_batch_size=0"):
        TorchRolloutEngine(model, eos_token_id=EOS, pad_token_id=PAD, max_batch_size=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.5}, "temperature=-0.5 must be >= 0"),
        ({"temperature": float("nan")}, "temperature=nan must be >= 0"),
        ({"top_p": 0.0}, r"top_p=0.0 must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p=1.5 must be in \(0, 1\]"),
        ({"max_tokens": 0}, "max_tokens=0 must be an int >= 1"),
        ({"max_tokens": 2.0}, "max_tokens=2.0 must be an int >= 1"),
        ({"seed": -1}, "seed=-1 must be None or an int >= 0"),
        ({"stop_sequences": ((),)}, "holds an empty sequence"),
    ],
)
def test_sampling_params_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_top_p_filter_hand_values():
    probs = torch.tensor([[0.2, 0.5, 0.3], [0.2, 0.5, 0.3]])
    # Row 0 (top_p 0.6): 0.5 alone falls short, 0.5 + 0.3 reaches it -> keep those two.
    torch.testing.assert_close(top_p_filter(probs[:1], 0.6), torch.tensor([[0.0, 0.5, 0.3]]))
    # top_p 0.5: the most likely token alone reaches it.
    torch.testing.assert_close(top_p_filter(probs[1:], 0.5), torch.tensor([[0.0, 0.5, 0.0]]))
    torch.testing.assert_close(top_p_filter(probs, 1.0), probs)


def test_left_pad():
    ids, mask = left_pad([[3, 4], [5]], PAD, torch.device("cpu"))
    assert ids.tolist() == [[3, 4], [PAD, 5]]
    assert mask.tolist() == [[1, 1], [0, 1]]


def test_the_kv_cache_is_allocated_once_for_the_final_length(model):
    """Every forward of a decode sees the same cache buffers, sized (rows, kv heads, padded
    prompt length + max_tokens, head dim) from the prefill on: the cache never grows."""
    seen = []

    def record(module, args, kwargs, output):
        keys = kwargs["past_key_values"].layers[0].keys  # (B, kv_heads, L + T, head_dim)
        seen.append((keys.data_ptr(), tuple(keys.shape)))

    handle = model.register_forward_hook(record, with_kwargs=True)
    try:
        make_engine(model).generate(PROMPTS, 3, SamplingParams(max_tokens=9, seed=0))
    finally:
        handle.remove()
    heads, head_dim = model.config.num_key_value_heads, model.config.head_dim
    assert len(seen) > 2
    assert set(seen) == {(seen[0][0], (len(PROMPTS) * 3, heads, 5 + 9, head_dim))}


def test_max_tokens_per_batch_chunks_give_the_same_greedy_result(model):
    sampling = SamplingParams(temperature=0, max_tokens=6)
    whole = make_engine(model).generate(PROMPTS, 3, sampling)
    for budget in (1, 2 * (5 + 6), 25):  # a row alone (over budget), 2 rows, 2 or 4 rows
        chunked = TorchRolloutEngine(model, eos_token_id=EOS, pad_token_id=PAD,
                                     max_tokens_per_batch=budget)
        got = chunked.generate(PROMPTS, 3, sampling)
        assert [[r.token_ids for r in g] for g in got] == [[r.token_ids for r in g] for g in whole]


def test_batches_under_a_token_budget():
    from rllib_llm.rollout.torch_engine import _batches

    # Rows cost rows x the batch's longest row: 4 rows of 10 tokens fit in 40.
    assert _batches([10] * 3, 2, None, 40) == [[(0, 2), (1, 2)], [(2, 2)]]
    # A longer prompt would push the rows already there over the budget: it starts a batch.
    assert _batches([10, 20], 2, None, 40) == [[(0, 2)], [(1, 2)]]
    assert _batches([20, 10], 2, None, 60) == [[(0, 2), (1, 1)], [(1, 1)]]
    # A row over the budget runs alone.
    assert _batches([50, 10], 2, None, 40) == [[(0, 1)], [(0, 1)], [(1, 2)]]
    # Both bounds hold: 3 rows (max_rows) though 10 would fit the tokens.
    assert _batches([10] * 2, 2, 3, 100) == [[(0, 2), (1, 1)], [(1, 1)]]
    assert _batches([10] * 2, 2, 3, 20) == [[(0, 2)], [(1, 2)]]


def test_max_tokens_per_batch_must_be_positive(model):
    with pytest.raises(ValueError, match="max_tokens_per_batch=0 must be None or >= 1"):
        TorchRolloutEngine(model, eos_token_id=EOS, pad_token_id=PAD, max_tokens_per_batch=0)


def test_device_none_runs_where_the_model_is_and_never_moves_it():
    config = tiny_llama_config(V, hidden_size=8, num_attention_heads=2, intermediate_size=8)
    with torch.device("meta"):  # a device the engine would fail to move a model from
        model = LlamaForCausalLM(config)
    engine = TorchRolloutEngine(model, eos_token_id=EOS, pad_token_id=PAD)
    assert engine.device == torch.device("meta") and engine.model is model
    assert all(p.device.type == "meta" for p in model.parameters())


def test_sliding_window_models_keep_the_growing_cache_and_exact_logprobs():
    from transformers import MistralConfig, MistralForCausalLM

    from rllib_llm.rollout.kv_cache import PreallocatedLayer, kv_cache

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=V, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           sliding_window=4, pad_token_id=PAD, eos_token_id=EOS)
    assert not any(isinstance(layer, PreallocatedLayer) for layer in kv_cache(config, 2, 8).layers)
    model = MistralForCausalLM(config).eval()
    out = make_engine(model).generate(PROMPTS, 2, SamplingParams(max_tokens=10, seed=1))
    for prompt, group in zip(PROMPTS, out, strict=True):
        for r in group:
            expected = teacher_forced_logprobs(model, prompt, r, 1.0)
            torch.testing.assert_close(torch.tensor(r.logprobs), expected, atol=1e-5, rtol=0)
