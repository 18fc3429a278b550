"""Shared setup of the exit scripts: a scorer on a tiny random model (built from a config, nothing
downloaded) or, with GROGU_RELIABILITY_MODEL set, on that model (e.g. smollm2-135m-instruct).

GROGU_RELIABILITY_TOKENIZER: a directory holding the packaged SmolLM2 tokenizer saved with
``save_pretrained`` (loads in a fraction of a second; default: read it from the packaged GGUF)."""

from __future__ import annotations

import os
import warnings

QUERIES = [f"Question {i}: which river flows through the old city of Prague?" for i in range(16)]
DOCS = [
    "The Vltava is the longest river within the Czech Republic and flows through Prague.",
    "Prague is the capital and largest city of the Czech Republic.",
    "Bananas are rich in potassium.",
]


def make_scorer():
    from grogu_research import testing

    from grogu import UtilityScorer

    name = os.environ.get("GROGU_RELIABILITY_MODEL", "tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "tiny":
            saved = os.environ.get("GROGU_RELIABILITY_TOKENIZER")
            if saved:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(saved)
            else:
                tokenizer = testing.embedded_tokenizer()
            return UtilityScorer((testing.tiny_model("llama"), tokenizer), max_new_tokens=8)
        return UtilityScorer(name, device="cpu", max_new_tokens=8)
