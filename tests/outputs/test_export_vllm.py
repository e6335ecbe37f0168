"""An export serves with vLLM as it is: `LLM(model=OUT)` loads the weights, the char tokenizer and
the generation config, and scores and decodes like transformers does. (`make test-vllm`.)"""

from __future__ import annotations

import gc
import os

import pytest
import torch
from rllib_llm.envs import arithmetic_problems
from transformers import AutoModelForCausalLM, AutoTokenizer

from rllib_llm.outputs.checkpoints import export_policy
from rllib_llm.recipes.embedded import embedded_config

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("ray_session")]

RESPONSE_LENGTH = 5
# Max |vLLM - transformers| of a float32 prompt log-prob: 4.8e-6 measured over 32 held-out
# problem + answer texts (vLLM's CPU kernels round differently from transformers' eager ones).
# Ten times that: a wrong weight or token shifts log-probs by orders of magnitude more.
LOGPROB_ATOL = 5e-5


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from rllib_llm.rollout.vllm_engine import INSTALL_HINT, vllm_installed

    if not vllm_installed():
        pytest.skip(f"needs vLLM: {INSTALL_HINT}")
    root = tmp_path_factory.mktemp("vllm_export")
    algo = embedded_config("topr", seed=0, rollout_batch_size=4, num_return_sequences_in_group=2,
                           response_length=RESPONSE_LENGTH, lr=1e-3).build_algo()
    try:
        algo.train()
        algo.save_to_path(str(root / "checkpoint"))
    finally:
        algo.stop()
    export_policy(root / "checkpoint", root / "out")
    return root / "out"


@pytest.fixture(scope="module")
def llm(exported):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
    from vllm import LLM

    engine = LLM(model=str(exported), dtype="float32", seed=0, enforce_eager=True,
                 kv_cache_memory_bytes=64 * 2**20)
    yield engine
    # vLLM tears down process-global state when an engine is collected: do it now, not while
    # another module's engine runs.
    del engine
    gc.collect()


@pytest.fixture(scope="module")
def hf(exported):
    return (AutoModelForCausalLM.from_pretrained(exported).eval(),
            AutoTokenizer.from_pretrained(exported))


def test_vllm_scores_text_like_transformers(llm, hf):
    from vllm import SamplingParams

    model, tokenizer = hf
    texts = [p["prompt"] + p["answer"] for p in arithmetic_problems("test")[:32]]
    outs = llm.generate(texts, SamplingParams(max_tokens=1, prompt_logprobs=0))
    worst = 0.0
    for text, out in zip(texts, outs, strict=True):
        ids = tokenizer(text)["input_ids"]
        assert list(out.prompt_token_ids) == ids  # vLLM tokenises with the exported tokenizer
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].float()  # (L - 1, V)
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
        got = torch.tensor([step[i].logprob for step, i in zip(out.prompt_logprobs[1:], ids[1:],
                                                                strict=True)])
        worst = max(worst, (got - expected).abs().max().item())
    assert worst < LOGPROB_ATOL


def test_vllm_decodes_like_transformers_and_reads_the_generation_config(llm, hf):
    from vllm import SamplingParams

    model, tokenizer = hf
    defaults = llm.get_default_sampling_params()  # from the export's generation_config.json
    assert (defaults.temperature, defaults.top_p, defaults.top_k, defaults.max_tokens) == \
        (1.0, 1.0, 0, RESPONSE_LENGTH)
    prompts = [p["prompt"] for p in arithmetic_problems("test")[:16]]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=RESPONSE_LENGTH))
    for prompt, out in zip(prompts, outs, strict=True):
        ids = tokenizer(prompt, return_tensors="pt")
        greedy = model.generate(**ids, do_sample=False, max_new_tokens=RESPONSE_LENGTH)
        assert list(out.outputs[0].token_ids) == greedy[0, ids["input_ids"].shape[1]:].tolist()
        assert out.outputs[0].text == tokenizer.decode(out.outputs[0].token_ids,
                                                       skip_special_tokens=True)
