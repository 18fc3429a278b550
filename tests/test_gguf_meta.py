"""The chat template read from a GGUF file's metadata (transformers' GGUF tokenizer loader drops it)."""

from __future__ import annotations

import pytest

import grogu
from grogu.runtime.gguf_meta import gguf_string, with_gguf_chat_template
from grogu.runtime.models import embedded_path


def test_reads_strings_from_the_packaged_gguf(tmp_path):
    path = embedded_path(grogu.DEFAULT_MODEL)
    template = gguf_string(path, "tokenizer.chat_template")
    assert template and "<|im_start|>" in template and "add_generation_prompt" in template
    assert gguf_string(path, "general.architecture") == "llama"
    assert gguf_string(path, "no.such.key") is None
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"NOPE" + bytes(32))
    with pytest.raises(ValueError, match="not a GGUF file"):
        gguf_string(str(bad), "tokenizer.chat_template")


def test_a_tokenizer_without_a_template_gets_the_gguf_one():
    class Bare:
        chat_template = None

    path = embedded_path(grogu.DEFAULT_MODEL)
    tok = with_gguf_chat_template(Bare(), path)
    assert tok.chat_template == gguf_string(path, "tokenizer.chat_template")

    class Own:
        chat_template = "{{ messages }}"

    assert with_gguf_chat_template(Own(), path).chat_template == "{{ messages }}"  # its own is kept


@pytest.mark.slow
def test_a_load_parses_the_gguf_once_and_gets_what_transformers_gets(monkeypatch):
    """load_model reads the GGUF's config, tokenizer and weights through one parse (transformers alone
    parses it three times); load_tokenizer gives the tokenizer transformers gives; gguf's and
    transformers' own names are back in place after each load."""
    import os

    import gguf
    from transformers import AutoTokenizer
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    from grogu.runtime.models import load_model, load_tokenizer

    parses: list[str] = []
    real = gguf.GGUFReader

    class Counting(real):
        def __init__(self, path, mode="r"):
            parses.append(os.fspath(path))
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    checkpoint, name_map = hf_gguf.load_gguf_checkpoint, gguf.get_tensor_name_map
    ours = load_tokenizer(grogu.DEFAULT_MODEL)
    assert len(parses) == 1
    assert (gguf.GGUFReader, gguf.get_tensor_name_map, hf_gguf.load_gguf_checkpoint) == (Counting, name_map, checkpoint)
    path = embedded_path(grogu.DEFAULT_MODEL)
    theirs = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    assert len(parses) == 2
    assert ours.get_vocab() == theirs.get_vocab()
    text = "Parliament first met in Canberra in 1927. 東京 🎉"
    assert ours.encode(text) == theirs.encode(text)
    model, tokenizer = load_model(grogu.DEFAULT_MODEL, device="cpu")
    assert len(parses) == 3 and tokenizer.encode(text) == ours.encode(text)
    assert model.config.num_hidden_layers == 30 and model.dtype.is_floating_point
    assert (gguf.GGUFReader, gguf.get_tensor_name_map, hf_gguf.load_gguf_checkpoint) == (Counting, name_map, checkpoint)
