"""The ``grogu`` command line's arguments: the parser of every sub-command, and argparse types that
check an option's value as the Python API does (a bad value is a usage error naming the option)."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import fields
from typing import Any

from ...core import checks
from ...metrics import defaults
from ...rerank.settings import DEFAULT_TOP_N, ModeSettings
from ...runtime.models import DEFAULT_MODEL

# Subcommands that live in their own module: name -> module with ``add_arguments(parser)`` and
# ``run(args) -> int``. Imported lazily (only the chosen one), so ``grogu score`` stays light.
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("grogu.apps.serve.cli", "the shared scoring service on Ray Serve (HTTP API; pip install 'grogu[serve]')"),
    "audit": (
        "grogu.apps.audit.cli",
        "compare retrieval set-ups for the target LLM, find documents it never uses; HTML report",
    ),
    "tune": (
        "grogu.apps.tune.cli",
        "fit the rerank settings to your LLM and QA prompt from labelled questions (settings.json, report.html)",
    ),
}


def _setting(convert, check, *args):
    """An argparse ``type`` that converts the text (int or float) and checks it with :mod:`grogu.core.checks`,
    so a bad option is a usage error naming the option and the value, as in the Python API."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a{'n int' if convert is int else ' number'}: {text!r}") from None
        try:
            return check(*args, value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = getattr(check, "__name__", "setting")
    return parse


POSITIVE_INT = _setting(int, checks.check_positive_int, "value")
TOP_N = _setting(int, checks.check_top_n)
THRESHOLD = _setting(float, checks.check_threshold)
ALPHA = _setting(float, checks.check_alpha)
FRACTION = _setting(float, checks.check_fraction, "value")
PROBABILITY = _setting(float, checks.check_probability, "value")


def _flag(text: str) -> bool:
    if text.lower() in ("true", "yes", "1", "on"):
        return True
    if text.lower() in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text!r}")


#: an argparse ``type`` per type of rerank setting (the settings are checked by ModeSettings itself)
_SETTING_TYPES = {str: str, int: int, float: float, bool: _flag}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grogu", description="LLM-specific utility of retrieved documents (GROGU).")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("score", "score each document (input order)"),
        ("rerank", "sort documents by utility, optionally keep the best"),
    ):
        _add_scoring_arguments(sub.add_parser(name, help=help_text), rerank=name == "rerank")
    _add_metric_commands(sub)
    for name, (module, help_text) in EXTRA_COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        importlib.import_module(module).add_arguments(p)
    return parser


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """The target LLM behind an inference server (grogu.ServerTarget) instead of a model loaded here."""
    from ...runtime.inference_server.apis import APIS

    g = p.add_argument_group("target LLM on an inference server (vLLM, SGLang, llama.cpp, Ollama, OpenAI-compatible)")
    g.add_argument(
        "--server",
        default=None,
        help="its OpenAI-compatible base URL (http://host:8000/v1); --model "
        "then names the tokenizer (alias, path, .gguf or hub id)",
    )
    g.add_argument("--served-model", default=None, help="the served model's name (default: the only one it lists)")
    g.add_argument(
        "--server-api",
        default="auto",
        choices=("auto", *APIS),
        help="the server's API ('chat' and 'ollama': chat APIs, grounded-only metrics entropy/ppl)",
    )
    g.add_argument("--top-logprobs", type=POSITIVE_INT, default=20, help="alternatives per token the server returns")
    g.add_argument("--api-key", default=None, help="the server's API key (default: $OPENAI_API_KEY)")


def _add_scoring_arguments(p: argparse.ArgumentParser, rerank: bool) -> None:
    """Arguments of ``grogu score`` and ``grogu rerank``."""
    src = p.add_argument_group("input")
    src.add_argument("--query", help="the question")
    src.add_argument("--docs", help="documents: .jsonl, .json or text file (paragraphs)")
    src.add_argument("--queries", help="JSONL file of {'query', 'documents'} objects")
    src.add_argument("--example", action="store_true", help="use the small bundled example")
    p.add_argument(
        "--model", default=DEFAULT_MODEL, help=f"target LLM: alias, path, .gguf or hub id (default {DEFAULT_MODEL})"
    )
    p.add_argument(
        "--metric",
        default=None,
        choices=sorted(defaults.METRIC_NAMES),
        help=f"GROGU variant (default {defaults.DEFAULT_METRIC}; {defaults.GROUNDED_DEFAULT_METRIC} with --server-api chat)",
    )
    p.add_argument("--alpha", type=ALPHA, default=defaults.ALPHA, help="key-token threshold in nats (default 0.05)")
    p.add_argument("--top-k-frac", type=FRACTION, default=defaults.TOP_K_FRAC, help="fallback fraction K (default 0.1)")
    p.add_argument(
        "--max-new-tokens",
        type=POSITIVE_INT,
        default=None,
        help="longest scored answer (default 64; 16 with --answer-style short)",
    )
    p.add_argument(
        "--answer-style",
        default="long",
        choices=("long", "short"),
        help="'short': ask for the answer only and cut it at its first line/sentence (small models)",
    )
    p.add_argument(
        "--prompt-file",
        default=None,
        help="your pipeline's QA prompt: text with {context} and {question}, or .json {'system', 'user'}",
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: CUDA if available)")
    p.add_argument(
        "--dtype", default=None, help="float32, bfloat16, float16 (default: bf16 on CUDA, float32 on CPU and for GGUF)"
    )
    p.add_argument("--batch-queries", type=POSITIVE_INT, default=8, help="queries scored together in one engine pass")
    p.add_argument("--json", action="store_true", help="one JSON object per query on stdout")
    p.add_argument(
        "--out",
        default=None,
        help="write the JSON records to this .jsonl file instead; a rerun "
        "skips the queries already in it (resumes after a crash)",
    )
    p.add_argument(
        "--ray",
        action="store_true",
        help="score on Ray Data: an actor pool of engines (needs --out and --queries; pip install 'grogu[serve]')",
    )
    p.add_argument("--address", default=None, help="--ray: the Ray cluster to join (default: a local Ray)")
    p.add_argument("--workers", type=POSITIVE_INT, default=1, help="--ray: engine actors (default 1)")
    p.add_argument("--gpus-per-worker", type=float, default=0.0, help="--ray: GPUs per engine actor")
    add_server_arguments(p)
    if rerank:
        p.add_argument(
            "--top-n",
            type=TOP_N,
            default=DEFAULT_TOP_N,
            help=f"keep the best n (a positive int; default {DEFAULT_TOP_N}, as the integrations)",
        )
        p.add_argument("--threshold", type=THRESHOLD, default=None, help="keep utility >= this")
        p.add_argument(
            "--settings",
            default=None,
            help="a grogu tune settings file (the options below change its values)",
        )
        settings = p.add_argument_group("rerank settings (grogu.ModeSettings; default: its defaults)")
        for f in fields(ModeSettings):
            settings.add_argument(
                f"--{f.name.replace('_', '-')}",
                type=_SETTING_TYPES[float if f.default is None else type(f.default)],  # None: gate_entropy_change
                default=None,
                choices=f.metadata["choices"],
                help=f"{f.metadata['help']} (default {f.default})",
            )


def _add_metric_commands(sub: Any) -> None:
    """``grogu influence``, ``grogu seper`` and ``grogu acu``."""
    p = sub.add_parser(
        "influence",
        help="Influence Score of each document on the answer (2k+1 generations; forward-only methods: no generation)",
    )
    _common(p, defaults.INFLUENCE_MAX_NEW_TOKENS)
    p.add_argument("--answer", default=None, help="the answer actually given (default: generate it from all documents)")
    p.add_argument(
        "--embedder", default="all-minilm-l6-v2", help="sentence-transformers model (default: packaged MiniLM)"
    )
    p.add_argument(
        "--method",
        default="exact",
        choices=defaults.INFLUENCE_METHODS,
        help="exact: 2k+1 generations; ablation: ContextCite-style estimate from --ablations random "
        "ablations; auto: ablation above 12 documents when cheaper; forward-only, no generation but "
        "the answer when --answer is not given: leave_one_out_logprob (drop of the answer's "
        "log-probability without each document, k+1 forward passes) or contextcite (ContextCite's "
        "LASSO on --ablations masks)",
    )
    p.add_argument(
        "--ablations",
        type=POSITIVE_INT,
        default=None,
        help="random ablations for --method ablation/auto (default 32) or contextcite (default 64)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the ablation masks")
    p = sub.add_parser("seper", help="ΔSePer of each document (reference-based)")
    _common(p, defaults.SEPER_MAX_NEW_TOKENS)
    p.add_argument("--reference", action="append", required=True, help="a reference answer (repeatable)")
    p.add_argument("--nli", required=True, help="NLI sequence-classification model (hub id or path)")
    p.add_argument("--samples", type=POSITIVE_INT, default=10)
    p.add_argument("--tau", type=PROBABILITY, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("acu", help="ACU of evidence for claims (claim verification)")
    p.add_argument("--claim")
    p.add_argument("--evidence")
    p.add_argument("--stance", help="SUPPORTS, REFUTES or NOT ENOUGH")
    p.add_argument("--items", help="JSONL of {'claim', 'evidence', 'stance'} objects")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None)
    p.add_argument("--json", action="store_true")
    add_server_arguments(p)  # a server that teacher-forces (vLLM, SGLang, llama.cpp)


def _common(p: argparse.ArgumentParser, max_new_tokens: int) -> None:
    p.add_argument("--query", required=True)
    p.add_argument("--docs", required=True, help="documents: .jsonl, .json or text file (paragraphs)")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--max-new-tokens", type=POSITIVE_INT, default=max_new_tokens)
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None)
    p.add_argument("--json", action="store_true")
    add_server_arguments(p)
