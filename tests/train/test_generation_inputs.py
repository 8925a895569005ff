"""``generate``'s settings and texts are checked before any decoding: a NaN or infinite
temperature, a NaN ``top_p``, a non-integer count or seed, and a prompt or stop string that is
not UTF-8 (Python's lone surrogates) are refused by name instead of returning empty text or a
tokenizer's ``TypeError``."""

import math

import pytest
from flax import nnx

from jaxfeed import Dataset
from jaxfeed.models import TransformerLM
from jaxfeed.text import train_tokenizer
from jaxfeed.train.generation import generate, generate_ids


@pytest.fixture(scope="module")
def lm_and_tokenizer():
    tok = train_tokenizer(Dataset.from_dict({"text": ["abc abd"] * 8}), "text", vocab_size=270)
    lm = TransformerLM(tok.get_vocab_size(), dim=16, depth=1, num_heads=2, max_length=32,
                       rngs=nnx.Rngs(0))  # fmt: skip
    return lm, tok


BAD_SETTINGS = [
    ({"temperature": math.nan}, "temperature must be a finite number >= 0"),
    ({"temperature": math.inf}, "temperature must be a finite number >= 0"),
    ({"temperature": -1.0}, "temperature must be a finite number >= 0"),
    ({"temperature": "1.0"}, "temperature must be a finite number >= 0"),
    ({"top_p": math.nan}, r"top_p must be in \(0, 1\]"),
    ({"top_p": "0.5"}, r"top_p must be in \(0, 1\]"),
    ({"top_k": 2.0}, "top_k must be a positive int"),
    ({"max_new_tokens": 4.0}, "max_new_tokens must be a positive int"),
    ({"seed": 1.5}, "seed must be an int"),
    ({"seed": 2**64}, "seed must be an int"),
]


@pytest.mark.parametrize(("settings", "message"), BAD_SETTINGS)
def test_bad_sampling_settings_are_refused(lm_and_tokenizer, settings, message):
    lm, tok = lm_and_tokenizer
    kwargs = {"max_new_tokens": 4, **settings}
    with pytest.raises(ValueError, match=f"generate: {message}"):
        generate(lm, tok, "abc", **kwargs)
    with pytest.raises(ValueError, match=f"generate: {message}"):
        generate_ids(lm, [[3, 4]], **kwargs)


def test_text_that_is_not_utf8_is_refused_by_name(lm_and_tokenizer):
    lm, tok = lm_and_tokenizer
    not_utf8 = b"abc \xff".decode("utf-8", "surrogateescape")  # as Python reads such an argument
    with pytest.raises(
        ValueError, match=r"prompt 1 is not UTF-8 text \(byte 0xff at character 4\)"
    ):
        generate(lm, tok, ["abc", not_utf8], max_new_tokens=2)
    with pytest.raises(ValueError, match=r"stop string 0 is not UTF-8 text \(byte 0xff"):
        generate(lm, tok, "abc", max_new_tokens=2, stop=not_utf8)
    assert isinstance(generate(lm, tok, "abc", max_new_tokens=2, temperature=0), str)
