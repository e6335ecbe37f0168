"""The embedded char-level tokenizer: one token per printable ASCII character.

A character vocabulary keeps the embedded model tiny (98 rows of embeddings) and makes every
arithmetic answer a fixed, obvious token sequence ("19" is two tokens), so a reward on exact
matches is easy to reason about. It is an ordinary `tokenizers` pipeline wrapped in
`PreTrainedTokenizerFast`, saved next to the embedded checkpoint, so `AutoTokenizer.from_pretrained`
loads it like any Hugging Face tokenizer.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN)  # ids 0, 1, 2
PRINTABLE = "".join(chr(c) for c in range(32, 127))  # ' ' .. '~', 95 characters


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Build the char tokenizer: specials at ids 0..2, then chars 32..126 at ids 3..97.

    Characters outside printable ASCII map to `<unk>`. No BOS and no chat template: the prompt is
    the raw text, which is what `encode_prompt` feeds the embedded model.
    """
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in PRINTABLE:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    # Every character is its own "word"; "isolated" keeps spaces as tokens instead of dropping them.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    # Fuse joins tokens with no separator (the default decoder would put spaces between chars).
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        clean_up_tokenization_spaces=False,  # " ," must decode to " ," for the round trip
        model_max_length=512,
    )
