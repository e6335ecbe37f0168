"""`rllib-llm export`: a run's policy as a Hugging Face directory that scores token for token like
the policy in the checkpoint, with the run's tokenizer and a generation config; which checkpoint
a run directory means, and the errors when it means none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rllib_llm.envs import arithmetic_problems
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from rllib_llm.algorithm.checkpoint_files import write_complete_file
from rllib_llm.cli import main
from rllib_llm.learner.module import response_logits, token_logp_and_entropy
from rllib_llm.models import EMBEDDED_DIR, encode_prompt, load_model, load_tokenizer
from rllib_llm.outputs.checkpoints import (
    EXPORT_INFO,
    CheckpointError,
    export_policy,
    find_checkpoint,
    load_policy,
    training_iteration,
)
from rllib_llm.recipes.embedded import embedded_config

pytestmark = pytest.mark.usefixtures("ray_session")  # tests/conftest.py

# A KL loss gives the checkpoint a reference model, which the export must leave out; lr 1e-3
# moves the tiny policy away from the embedded checkpoint within two iterations.
TINY = dict(seed=0, rollout_batch_size=4, num_return_sequences_in_group=2, response_length=4,
            lr=1e-3, use_kl_loss=True)


def policy_of(algo):
    return algo.learner_group.local_learner.module["default_policy"]


def teacher_forced_batch(tokenizer, num: int = 6) -> dict[str, torch.Tensor]:
    """Held-out prompts, left-padded, each followed by its answer and EOS (right-padded)."""
    problems = arithmetic_problems("test")[:num]
    prompts = [encode_prompt(tokenizer, p["prompt"]) for p in problems]
    responses = [tokenizer(p["answer"], add_special_tokens=False)["input_ids"]
                 + [tokenizer.eos_token_id] for p in problems]
    p_len, t_len = max(map(len, prompts)), max(map(len, responses))
    pad = tokenizer.pad_token_id
    rows = [[pad] * (p_len - len(p)) + p + r + [pad] * (t_len - len(r))
            for p, r in zip(prompts, responses, strict=True)]
    masks = [[0] * (p_len - len(p)) + [1] * (len(p) + t_len) for p in prompts]
    return {"input_ids": torch.tensor(rows),  # (B, P + T)
            "attention_mask": torch.tensor(masks),  # (B, P + T)
            "response_ids": torch.tensor([r + [pad] * (t_len - len(r)) for r in responses])}


def logp_of(model, batch) -> torch.Tensor:
    """Teacher-forced log-probs (B, T) of the responses, as the learner computes them."""
    with torch.no_grad():
        t = batch["response_ids"].shape[1]
        logits = response_logits(model.eval(), batch["input_ids"], batch["attention_mask"], t)
        return token_logp_and_entropy(logits, batch["response_ids"], 1.0)[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run directory as `save_to_path` lays it out (RLVR_x/checkpoint_000001 and _000002,
    after one and two iterations), and the learner's log-probs of `teacher_forced_batch` when
    the second was written."""
    root = tmp_path_factory.mktemp("run")
    algo = embedded_config("topr", **TINY).build_algo()
    try:
        for i in (1, 2):
            algo.train()
            algo.save_to_path(str(root / "RLVR_x" / f"checkpoint_00000{i}"))
        policy = policy_of(algo)
        assert policy.has_reference  # the checkpoint holds a reference model
        batch = teacher_forced_batch(load_tokenizer("embedded"))
        learner_logp = policy.score_tokens(batch, reference=False)  # (B, T)
    finally:
        algo.stop()
    return root, learner_logp


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    root, _ = run
    out = tmp_path_factory.mktemp("export") / "model"
    assert main(["export", str(root), str(out)]) == 0
    return out


def test_exported_model_scores_exactly_like_the_checkpoints_policy(run, exported):
    _, learner_logp = run
    model = AutoModelForCausalLM.from_pretrained(exported)
    assert model.dtype == torch.float32
    batch = teacher_forced_batch(AutoTokenizer.from_pretrained(exported))
    # Bit for bit: safetensors stores the float32 weights losslessly and the same Llama code runs
    # the same CPU kernels on the same inputs, so any difference at all would be a wrong weight.
    assert torch.equal(logp_of(model, batch), learner_logp)
    # ... and the policy is the trained one, not the embedded checkpoint it started from.
    assert not torch.allclose(logp_of(load_model("embedded"), batch), learner_logp, atol=1e-3)
    # The policy alone: the reference model (and a critic) stay behind.
    names = set(load_file(exported / "model.safetensors"))
    assert names == set(load_file(EMBEDDED_DIR / "model.safetensors"))


def test_export_holds_the_runs_tokenizer_and_a_generation_config(exported):
    original, tokenizer = load_tokenizer("embedded"), AutoTokenizer.from_pretrained(exported)
    for text in ["36-25=", "  a b, c. ~", "é?", ""]:
        assert tokenizer(text)["input_ids"] == original(text)["input_ids"]
    assert tokenizer.decode([20, 21, 1], skip_special_tokens=True) == "12"
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1)
    gen = GenerationConfig.from_pretrained(exported)
    # The run's sampler: EOS and pad, its temperature and top-p, no top-k, response_length.
    assert (gen.eos_token_id, gen.pad_token_id) == (1, 0)
    assert (gen.do_sample, gen.temperature, gen.top_p, gen.top_k) == (True, 1.0, 1.0, 0)
    assert gen.max_new_tokens == TINY["response_length"]
    info = json.loads((exported / EXPORT_INFO).read_text())
    assert info["training_iteration"] == 2 and info["checkpoint"].endswith("checkpoint_000002")
    assert info["base_model"] == "embedded" and info["model_dtype"] == "float32"


def test_export_refuses_a_non_empty_directory_without_force(run, exported, tmp_path, capsys):
    root, _ = run
    before = (exported / "model.safetensors").stat().st_mtime_ns
    assert main(["export", str(root), str(exported)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert (exported / "model.safetensors").stat().st_mtime_ns == before  # untouched
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["export", str(root), str(tmp_path), "--force"]) == 0
    out = capsys.readouterr().out
    assert "model.safetensors" in out and "tokenizer.json" in out and "notes.txt" not in out
    assert (tmp_path / "notes.txt").read_text() == "mine"  # --force overwrites, never deletes
    assert main(["export", str(root), str(tmp_path / "notes.txt")]) == 2
    assert "is a file" in capsys.readouterr().err


def test_an_export_to_a_full_disk_leaves_nothing_and_says_so_in_one_line(run, small_disk,
                                                                          capsys):
    root, _ = run
    small = small_disk("1m")  # the policy's weights are 2.1 MB
    assert main(["export", str(root), str(small / "out")]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"rllib-llm export: error: could not write '{small / 'out'}': ")
    assert "No space left on device" in err and err.endswith("is as it was")
    assert os.listdir(small) == []


def test_a_run_directory_means_its_latest_checkpoint(run, tmp_path):
    root, _ = run
    latest = root / "RLVR_x" / "checkpoint_000002"
    assert find_checkpoint(root) == find_checkpoint(root / "RLVR_x") == latest
    assert training_iteration(latest) == 2
    first = root / "RLVR_x" / "checkpoint_000001"
    assert find_checkpoint(first) == find_checkpoint(root, "RLVR_x/checkpoint_000001") == first
    # The training iteration decides, not the name: a later save under a smaller number wins.
    shutil.copytree(latest, tmp_path / "trial" / "a_checkpoint_9")
    shutil.copytree(latest, tmp_path / "trial" / "checkpoint_000010")
    (tmp_path / "trial" / "checkpoint_000010" / "algorithm_state.pkl").write_bytes(
        (first / "algorithm_state.pkl").read_bytes())
    assert find_checkpoint(tmp_path / "trial") == tmp_path / "trial" / "a_checkpoint_9"


def test_several_trials_need_a_choice(run, tmp_path):
    root, _ = run
    for trial in ("RLVR_a_00000", "RLVR_b_00001"):
        shutil.copytree(root / "RLVR_x", tmp_path / "sweep" / trial)
    with pytest.raises(CheckpointError, match=r"(?s)holds the checkpoints of 2 runs \(trials\):\n"
                       r"  RLVR_a_00000  \(latest: checkpoint_000002, iteration 2\)\n"
                       r"  RLVR_b_00001  .*--checkpoint TRIAL"):
        find_checkpoint(tmp_path / "sweep")
    chosen = find_checkpoint(tmp_path / "sweep", "RLVR_b_00001")
    assert chosen == tmp_path / "sweep" / "RLVR_b_00001" / "checkpoint_000002"


def test_directories_without_a_checkpoint_fail_clearly(run, tmp_path, capsys):
    root, _ = run
    with pytest.raises(FileNotFoundError, match=r"run or checkpoint directory '.*missing' does "
                       r"not exist \(resolved to"):
        find_checkpoint(tmp_path / "missing")
    (tmp_path / "empty" / "RLVR_x").mkdir(parents=True)
    (tmp_path / "empty" / "RLVR_x" / "progress.csv").write_text("")
    with pytest.raises(CheckpointError, match=r"no RLlib checkpoint under '.*empty': no directory "
                       r"in it holds rllib_checkpoint.json \(it holds \['RLVR_x'\]\)"):
        find_checkpoint(tmp_path / "empty")
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointError, match=r"'.*file' is a file; pass a run directory"):
        find_checkpoint(tmp_path / "file")
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(root / "RLVR_x" / "checkpoint_000002" / "rllib_checkpoint.json", other)
    with pytest.raises(CheckpointError, match=r"'.*other' is not a whole checkpoint: it has no "
                       r"rllib_llm_complete.json, which rllib_llm writes last"):
        find_checkpoint(other)
    write_complete_file(other, 2)  # whole, but of another algorithm
    with pytest.raises(CheckpointError, match=r"is an RLlib checkpoint without an RLVR policy: it "
                       r"has no learner_group/learner/rl_module/default_policy/"):
        find_checkpoint(other)
    # The command line prints the message, not a traceback.
    assert main(["export", str(tmp_path / "empty"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rllib-llm export: error: no RLlib checkpoint under")
    assert not (tmp_path / "out").exists()


def test_export_keeps_a_bfloat16_policy_in_bfloat16(tmp_path):
    algo = embedded_config("topr", **{**TINY, "model_dtype": "bfloat16"}).build_algo()
    try:
        algo.train()
        algo.save_to_path(str(tmp_path / "ckpt"))
        weights = {k: v.clone() for k, v in policy_of(algo).model.state_dict().items()}
    finally:
        algo.stop()
    export_policy(tmp_path / "ckpt", tmp_path / "out")
    saved = load_file(tmp_path / "out" / "model.safetensors")
    assert {t.dtype for t in saved.values()} == {torch.bfloat16}
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert model.dtype == torch.bfloat16
    for name, value in model.state_dict().items():
        assert torch.equal(value, weights[name]), name
    assert load_policy(tmp_path / "ckpt").model.dtype == torch.bfloat16


def test_the_console_script_exports(run, exported, tmp_path):
    root, _ = run
    script = Path(sys.executable).parent / "rllib-llm"
    done = subprocess.run([str(script), "export", str(root / "RLVR_x"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # (transformers' save_pretrained imports DeepSpeed when it is installed, and DeepSpeed logs a
    # line to stdout on import: the report is what follows.)
    assert f"wrote {tmp_path / 'out'}:\n" in done.stdout
    for name in ("config.json", "model.safetensors", "generation_config.json",
                 "tokenizer.json", "tokenizer_config.json", EXPORT_INFO):
        assert f"  {name}  (" in done.stdout
    assert "exporting " in done.stderr and "checkpoint_000002 (iteration 2)" in done.stderr
    ours, theirs = (load_file(d / "model.safetensors") for d in (tmp_path / "out", exported))
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
