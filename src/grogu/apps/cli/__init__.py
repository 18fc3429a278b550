"""``grogu`` command line: score or rerank documents for a query with a target LLM.

  grogu rerank --example                          # the bundled example, embedded SmolLM2
  grogu rerank --query "..." --docs docs.jsonl --top-n 3
  grogu score --queries many.jsonl --json > scores.jsonl
  grogu score --queries many.jsonl --out scores.jsonl --ray --workers 4   # Ray Data, resumable

Documents: a .jsonl file (one string or {"text", "title"} object a line), a .json list, or a text
file with one document per paragraph (blank-line separated). Queries: a .jsonl file of
{"query": ..., "documents": [...]} objects.

:func:`main` reads the arguments (:mod:`grogu.apps.cli.arguments`), runs the scoring of ``grogu score`` /
``grogu rerank`` and hands the other sub-commands to their runners (:mod:`grogu.apps.cli.runners`, or the
module named in :data:`EXTRA_COMMANDS`).
"""

from __future__ import annotations

import importlib
import json
import sys

from ...rerank.tuned import settings_from_arguments
from .arguments import EXTRA_COMMANDS, build_parser
from .runners import iter_queries, other_metric, record_table

#: the research harness's commands, which live in the grogu-research package (research/)
RESEARCH_COMMANDS = ("eval", "rewrite-pairs", "train-rewriter")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    given = sys.argv[1:] if argv is None else argv
    if given and given[0] in RESEARCH_COMMANDS:
        parser.error(
            f"'{given[0]}' belongs to the research harness: run 'grogu-research {given[0]}' "
            "(pip install -e research, from a checkout of this repository)"
        )
    args = parser.parse_args(argv)
    if args.command == "rerank":  # the settings together, as the Python API checks them: a usage error here
        try:
            settings_from_arguments(vars(args)).check_threshold(args.threshold)
        except ValueError as exc:
            parser.error(str(exc))
    if args.command in ("influence", "seper", "acu"):
        return other_metric(args)
    if args.command in EXTRA_COMMANDS:
        return importlib.import_module(EXTRA_COMMANDS[args.command][0]).run(args)
    from tqdm import tqdm

    from ...rerank.batch import completed_prefix, score_chunk, scorer_options
    from ...rerank.scorer import UtilityScorer

    items = list(iter_queries(args))
    done = completed_prefix(args.out, items) if args.out else 0
    if args.ray:
        if not args.out or not args.queries:
            raise SystemExit("--ray needs --queries FILE and --out FILE (records are written in input order)")
        if args.server:
            raise SystemExit("--ray runs engines on Ray workers; with --server, the server does the batching")
        from ...rerank.batch import score_on_ray

        return score_on_ray(args, items, done)
    scorer = UtilityScorer(**scorer_options(args))
    out = open(args.out, "a", encoding="utf-8") if args.out else None
    progress = tqdm(
        total=len(items),
        initial=done,
        desc="queries",
        unit="q",
        disable=len(items) < 2 or args.example,
        file=sys.stderr,
    )
    for start in range(done, len(items), args.batch_queries):
        chunk = items[start : start + args.batch_queries]
        for item, record in zip(chunk, score_chunk(scorer, vars(args), chunk)):
            if out is not None:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            elif args.json:
                print(json.dumps(record, ensure_ascii=False), flush=True)
            else:
                print(record_table(record, item["documents"]) + "\n", flush=True)
        if out is not None:
            out.flush()
        progress.update(len(chunk))
    progress.close()
    if out is not None:
        out.close()
    return 0


__all__ = ["main"]


if __name__ == "__main__":
    raise SystemExit(main())
