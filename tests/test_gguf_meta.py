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
