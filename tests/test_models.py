"""Tokenizer, prompt encoding and loading of the embedded checkpoint."""

from __future__ import annotations

import pytest

from rllib_llm.models import EMBEDDED_DIR, encode_prompt, load_tokenizer
from rllib_llm.models.char_tokenizer import PRINTABLE, build_char_tokenizer

TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}|{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("embedded")


def test_char_tokenizer_specials_and_vocab(tok):
    assert (tok.pad_token, tok.eos_token, tok.unk_token) == ("<pad>", "<eos>", "<unk>")
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert len(tok) == 3 + 95
    assert tok.bos_token is None and not tok.chat_template


@pytest.mark.parametrize("text", [PRINTABLE, "12+7=", "  two  spaces , and . ", "", "~"])
def test_char_tokenizer_round_trip(tok, text):
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)  # one token per char, no BOS/EOS added
    assert tok.decode(ids) == text


def test_char_tokenizer_unknown_char_maps_to_unk(tok):
    assert tok("é")["input_ids"] == [tok.unk_token_id]


def test_shipped_tokenizer_equals_builder(tok):
    built = build_char_tokenizer()
    assert built.get_vocab() == tok.get_vocab()


def test_auto_tokenizer_loads_shipped_dir():
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(EMBEDDED_DIR)
    assert auto.decode(auto("3-1=")["input_ids"]) == "3-1="
    assert auto.eos_token_id == 1


def test_encode_prompt_without_template_is_plain_encoding(tok):
    assert encode_prompt(tok, "12+7=") == [tok.convert_tokens_to_ids(c) for c in "12+7="]


def test_encode_prompt_applies_chat_template():
    tok = build_char_tokenizer()
    tok.chat_template = TINY_CHAT_TEMPLATE
    ids = encode_prompt(tok, "12+7=")
    assert tok.decode(ids) == "<user>12+7=|<assistant>"


def test_load_tokenizer_uses_eos_as_pad_when_missing(tmp_path):
    tok = build_char_tokenizer()
    tok.pad_token = None
    tok.save_pretrained(tmp_path)
    loaded = load_tokenizer(str(tmp_path))
    assert loaded.pad_token == "<eos>" and loaded.pad_token_id == loaded.eos_token_id
