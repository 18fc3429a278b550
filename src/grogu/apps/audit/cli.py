"""``grogu audit``: compare retrieval set-ups for the target LLM and write an HTML report and a JSON summary.

  grogu audit --example --out audit-report/
  grogu audit --setup bm25=bm25.jsonl --setup dense=dense.jsonl --top-n 3 --out audit-report/
  grogu audit --logs influence.jsonl --out audit-report/          # from grogu.observe.influence_log records
  grogu audit --setup a=a.jsonl --setup b=b.jsonl --remote http://host:8000 --token ...   # grogu serve

Each set-up file holds one ``{"query", "documents"}`` object a line (documents best first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources

from ...runtime.models import DEFAULT_MODEL
from .signals import DEFAULT_SIGNAL, SIGNALS


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ...metrics.defaults import METRIC_NAMES
    from ..cli.arguments import POSITIVE_INT, add_server_arguments

    src = p.add_argument_group("input")
    src.add_argument(
        "--setup",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="a retrieval set-up: JSONL of {'query', 'documents'} lines (repeatable; NAME defaults to the file's stem)",
    )
    src.add_argument("--queries", default=None, help="audit only these queries (JSONL of {'query'} or one a line)")
    src.add_argument("--example", action="store_true", help="the bundled example: three set-ups, twelve queries")
    src.add_argument(
        "--logs",
        nargs="+",
        default=None,
        help="aggregate influence-log JSONL files instead (grogu.observe.influence_log records; no model is run)",
    )
    src.add_argument("--setup-field", default=None, help="--logs: the metadata key naming each record's set-up")
    p.add_argument("--out", default="audit-report", help="folder for report.html and summary.json")
    p.add_argument("--top-n", type=POSITIVE_INT, default=None, help="documents per context (default: all given)")
    p.add_argument(
        "--no-documents",
        action="store_true",
        help="score the contexts only (no per-document usefulness: k + 1 fewer contexts a query)",
    )
    p.add_argument(
        "--min-count", type=POSITIVE_INT, default=2, help="retrievals before a document can be 'never useful'"
    )
    p.add_argument(
        "--signal",
        default=DEFAULT_SIGNAL,
        choices=sorted(SIGNALS),
        help=f"the headline signal (default {DEFAULT_SIGNAL}); every signal's mean is in summary.json",
    )
    p.add_argument("--batch-size", type=POSITIVE_INT, default=16, help="contexts per scorer call")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap intervals")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"target LLM (default {DEFAULT_MODEL})")
    p.add_argument("--metric", default=None, choices=sorted(METRIC_NAMES), help="GROGU variant (default key_entropy)")
    p.add_argument("--max-new-tokens", type=POSITIVE_INT, default=None, help="longest scored answer")
    p.add_argument(
        "--answer-style",
        default="short",
        choices=("long", "short"),
        help="'short' (the default): the style the audit's signal was chosen and checked on",
    )
    p.add_argument("--device", default=None, help="cpu, cuda, … (default: CUDA if available)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16, … ")
    p.add_argument("--remote", default=None, help="a grogu serve URL: score there (grogu.RemoteScorer)")
    p.add_argument("--token", default=None, help="--remote: the service's bearer token")
    p.add_argument("--title", default="grogu audit", help="the report's title")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_server_arguments(p)


def example_setups() -> list:
    """The bundled example's set-ups (package data ``data/audit_example.json``)."""
    from .setups import Setup, document

    data = json.loads(resources.files("grogu").joinpath("data/audit_example.json").read_text("utf-8"))
    return [
        Setup(name, {it["query"]: [document(d) for d in it["documents"]] for it in runs})
        for name, runs in data["setups"].items()
    ]


def _scorer(args: argparse.Namespace):
    if args.remote:
        from ..serve import RemoteScorer

        return RemoteScorer(
            args.remote,
            token=args.token,
            metric=args.metric,
            max_new_tokens=args.max_new_tokens,
            answer_style=args.answer_style,
        )
    from ...rerank.batch import target_of
    from ...rerank.scorer import UtilityScorer

    return UtilityScorer(
        target_of(args),
        metric=args.metric,
        max_new_tokens=args.max_new_tokens,
        device=args.device,
        dtype=args.dtype,
        answer_style=args.answer_style,
    )


def run(args: argparse.Namespace) -> int:
    from .aggregate import from_influence_logs
    from .core import BASELINE, audit, check_setups
    from .report import write_report
    from .setups import read_queries, read_setup

    if args.logs:
        summary = from_influence_logs(args.logs, setup_field=args.setup_field, min_count=args.min_count)
        html, js = write_report(summary, args.out, args.title)
        print(f"{summary['n_records']} records, {len(summary['documents'])} documents\nreport: {html}\nsummary: {js}")
        return 0
    if args.example:
        setups = example_setups()
    elif args.setup:
        setups = []
        for spec in args.setup:
            name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
            if not os.path.exists(path):
                raise SystemExit(f"--setup {spec}: no file {path}")
            try:
                setups.append(read_setup(path, name or None))
            except (ValueError, TypeError) as e:
                raise SystemExit(f"grogu audit: --setup {spec}: {e}") from None
    else:
        raise SystemExit("give --setup NAME=FILE (at least one), --example, or --logs FILE")
    try:  # every check that needs no model, before the model loads
        queries = read_queries(args.queries) if args.queries else None
        check_setups(setups, queries)
    except (ValueError, TypeError) as e:
        raise SystemExit(f"grogu audit: {e}") from None
    result = audit(
        _scorer(args),
        setups,
        queries=queries,
        top_n=args.top_n,
        documents=not args.no_documents,
        signal=args.signal,
        batch_size=args.batch_size,
        min_count=args.min_count,
        seed=args.seed,
        progress=not args.quiet,
    )
    summary = result.as_dict()
    html, js = write_report(summary, args.out, args.title)
    t = result.timing
    print(
        f"{len(result.queries)} queries, {t['contexts']} contexts in {t['seconds']:.1f} s "
        f"({t['contexts_per_s']:.2f} contexts/s)",
        file=sys.stderr,
    )
    for w in result.settings["warnings"]:
        print(f"grogu audit: warning: {w}", file=sys.stderr)
    print(f"signal: {result.signal}, {SIGNALS[result.signal].meaning}")
    rows = [(n, result.setups[n]) for n in result.ranking()] + [("(" + BASELINE + ")", result.baseline)]
    for name, s in rows:
        print(f"  {name:<22} {s['mean']:+.4f}  [{s['low']:+.4f}, {s['high']:+.4f}]")
    print(result.verdict["headline"])
    print(f"report: {html}\nsummary: {js}")
    return 0
