"""Shared fixtures: tiny random models of real architectures (fast, deterministic) on the real
SmolLM2 tokenizer, and the real packaged SmolLM2-135M-Instruct."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    from transformers import AutoTokenizer

    from grogu.models import embedded_path

    path = embedded_path("smollm2-135m-instruct")
    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    out = tmp_path_factory.mktemp("smollm2-tokenizer")
    tok.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


def tiny_model(arch: str = "llama", vocab_size: int = 49152, seed: int = 0):
    """A 2-layer model of a real architecture with random weights, peaked enough that greedy
    decoding has no near-ties."""
    import transformers as tf

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, initializer_range=0.4, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    if arch == "llama":
        cfg = tf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=4096, **common)
        model = tf.LlamaForCausalLM(cfg)
    elif arch == "qwen2":
        cfg = tf.Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=False, **common)
        model = tf.Qwen2ForCausalLM(cfg)
    elif arch == "gpt2":
        cfg = tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=1024, **common)
        model = tf.GPT2LMHeadModel(cfg)
    else:
        raise ValueError(arch)
    return model.eval()


@pytest.fixture(scope="session")
def tiny_engine(tokenizer):
    from grogu import Engine

    return Engine(tiny_model("llama"), tokenizer, device="cpu")


@pytest.fixture(scope="session")
def smol_engine():
    from grogu import get_engine

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_engine("smollm2-135m-instruct", device="cpu")


def squad_paragraphs(n: int, seed: int = 0) -> list[dict]:
    """n real SQuAD dev paragraphs with one question each (skips the test when ../shared is absent)."""
    import json
    import random

    path = os.path.join(SHARED_DATA, "squad-v1.1-dev", "dev-v1.1.json")
    if not os.path.exists(path):
        pytest.skip(f"real data not found at {path} (clone the project next to ../shared)")
    with open(path) as f:
        data = json.load(f)["data"]
    paras = [(a["title"], p) for a in data for p in a["paragraphs"]]
    rng = random.Random(seed)
    picked = rng.sample(paras, n)
    return [{"title": t.replace("_", " "), "text": p["context"], "question": p["qas"][0]["question"],
             "answers": [a["text"] for a in p["qas"][0]["answers"]]} for t, p in picked]
