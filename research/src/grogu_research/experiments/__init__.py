"""The evaluation harness: the papers' experiments on the real data in ``../shared/data``.

>>> from grogu_research.experiments import run
>>> result = run("winrate", model="smollm2-135m-instruct", limit=100, out_dir="runs/eval/winrate")
>>> result["summary"]["win_rate"]["distractor"]["key_entropy"]["rate"]

Experiments (one module each):

- ``winrate`` — GROGU paper, Table 1: gold SQuAD paragraph against a retrieved distractor (no answer
  string) and a random paragraph; win-rates of PPL, KeyPPL, Entropy, KeyEntropy, BM25 and MiniLM.
- ``noise`` — GROGU paper, §4.2: 1 gold + 4 random against 1 gold + 4 retrieved paragraphs; accuracy,
  wins/ties, Kendall's tau between each metric's preference and correctness, binary-classifier acc/F1.
- ``layout`` — GROGU paper, §4.3: gold first, fifth or last among 10; each model's own GROGU choice
  against a random layout (and, with two models, each model using the other's choice).
- ``seper`` — ΔSePer's Pearson correlation with the ground-truth utility on MuSiQue, with baselines.
- ``acu`` — ACU of sufficient against insufficient evidence on SufficientFacts (FEVER).

Every run returns a dict (``experiment``, ``models``, ``n``, ``config``, ``summary``, ``items``,
``wall_s``) and, unless ``write=False``, writes ``<name>.json`` (everything, per item), ``<name>.md``
(the table) and ``<name>.png`` (a plot) to ``out_dir`` (default ``runs/eval/<name>``). Importing
this package is light: torch and transformers are imported when an experiment runs.
"""

from __future__ import annotations

import importlib
from typing import Any

#: experiment name -> module (relative to this package)
EXPERIMENTS: dict[str, str] = {
    "winrate": ".winrate",
    "noise": ".noise",
    "layout": ".layout",
    "seper": ".seper",
    "acu": ".acu",
}


def run(name: str, **options: Any) -> dict:
    """Run one experiment; ``options`` are its keyword arguments (``model``, ``limit``, ``seed``,
    ``out_dir``, ...; see the experiment module's ``run``). Returns the result dict."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}")
    return importlib.import_module(EXPERIMENTS[name], __name__).run(**options)


__all__ = ["run", "EXPERIMENTS"]
