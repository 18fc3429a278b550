"""What the ``grogu`` sub-commands run besides the scoring loop of :func:`grogu.apps.cli.main`: the queries
of ``grogu score`` / ``grogu rerank`` and their text table, and the ``influence``, ``seper`` and ``acu``
sub-commands."""

from __future__ import annotations

import argparse
import json
from importlib import resources
from typing import Any, Iterator

from ...core.files import read_documents
from ...rerank import batch


def iter_queries(args: argparse.Namespace) -> Iterator[dict]:
    if args.example:  # a case the retriever's own context gets wrong, then one it gets right
        yield from json.loads(resources.files("grogu").joinpath("data/example.json").read_text())
    elif args.queries:
        with open(args.queries, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    item = json.loads(line)
                    if "query" not in item or "documents" not in item:
                        raise SystemExit(f"{args.queries}:{n}: each line needs 'query' and 'documents'")
                    yield item
    else:
        if not args.query or not args.docs:
            raise SystemExit("give --query and --docs, or --queries FILE, or --example")
        yield {"query": args.query, "documents": read_documents(args.docs)}


def _snippet(doc: Any, width: int) -> str:
    text = doc if isinstance(doc, str) else (doc.get("title") and f"[{doc['title']}] " or "") + doc.get("text", "")
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _titles(docs: list[Any]) -> str:
    return " ".join(f"[{d.get('title')}]" if isinstance(d, dict) and d.get("title") else _snippet(d, 20) for d in docs)


def gate_lines(record: dict, documents: list[Any]) -> list[str]:
    """The context mode's story of one query: the retriever's own top-n and its answer, the gate's verdict
    and why, and, when it was in doubt, the candidates answered and the context chosen."""
    gate, kept = record["gate"], record["results"]
    n = len(kept) if record.get("top_n") is None else min(record["top_n"], len(documents))
    lines = [f"retriever's top {n}: {_titles(documents[:n])}", f"  answer: {_snippet(gate['answer'], 100)}"]
    if gate["in_doubt"]:
        why = []
        if "support" in gate["reasons"]:
            why.append(f"support {gate['support']:.2f} < {record['gate_support']:g}")
        if "confidence" in gate["reasons"]:
            why.append(f"confidence {gate['confidence']:.2f} < {record['gate_confidence']:g}")
        if "entropy_change" in gate["reasons"]:
            why.append(f"entropy change {gate['entropy_change']:.2f} < {record['gate_entropy_change']:g}")
        lines.append(f"gate: in doubt ({', '.join(why)}): {gate['candidates']} candidate contexts answered")
        if gate["changed"] and kept:
            chosen = [r["document"] for r in kept]
            lines += [f"chosen: {_titles(chosen)}", f"  answer: {_snippet(kept[0]['answer'], 100)}"]
        else:
            lines.append("chosen: the retriever's own context (no candidate beat it)")
    else:
        change = "" if gate.get("entropy_change") is None else f", entropy change {gate['entropy_change']:.2f}"
        lines.append(
            f"gate: calm (support {gate['support']:.2f}, confidence {gate['confidence']:.2f}{change}): the "
            "retriever's context is kept, nothing else is answered"
        )
    return lines


def record_table(record: dict, documents: list[Any] | None = None) -> str:
    """One query's record as the text table of ``grogu score`` / ``grogu rerank``. ``documents``: the
    query's documents in the retriever's order (the context mode's verdict is told with them)."""
    context = record["mode"] == "context"
    lines = [
        f"query: {record['query']}",
        f"model: {record['model']}   mode: {record['mode']}   metric: {record['metric']} (utility, higher = more useful)",
    ]
    if context and record.get("gate") and documents is not None:
        lines += gate_lines(record, documents)
    elif context and record["results"]:
        first = record["results"][0]
        lines.append(f"chosen context: utility {first['score']:.4f}, answer -> {_snippet(first['answer'], 70)}")
    lines += [f"{'rank':>4} {'doc':>4} {'utility':>9} {'key/tok':>8}  document / grounded answer"]
    for rank, r in enumerate(record["results"], 1):
        utility = "(context)" if context else f"{r['score']:>9.4f}"
        lines.append(
            f"{rank:>4} {r['index']:>4} {utility:>9} {r['n_key_tokens']:>3}/{r['n_tokens']:<4}  "
            f"{_snippet(r['document'], 70)}"
        )
        if not context:
            lines.append(f"{'':>30}-> {_snippet(r['answer'], 68)}")
    return "\n".join(lines)


def _print_rows(title: str, header: list[str], rows: list[list[Any]], as_json: bool, record: dict) -> None:
    if as_json:
        print(json.dumps(record, ensure_ascii=False, default=str))
        return
    print(title)
    print("  ".join(f"{h:>10}" for h in header))
    for row in rows:
        print(
            "  ".join(f"{v:>10.4f}" if isinstance(v, float) else f"{str(v):>10}" for v in row[:-1])
            + "  "
            + _snippet(row[-1], 60)
        )


def other_metric(args: argparse.Namespace) -> int:
    """influence / seper / acu subcommands."""
    if args.command == "acu":
        from ...metrics.acu import ACUScorer

        if args.items:
            with open(args.items, encoding="utf-8") as f:
                items = [json.loads(line) for line in f if line.strip()]
        elif args.claim is not None and args.evidence is not None and args.stance:
            items = [{"claim": args.claim, "evidence": args.evidence, "stance": args.stance}]
        else:
            raise SystemExit("give --claim, --evidence and --stance, or --items FILE")
        scorer = ACUScorer(batch.target_of(args), device=args.device, dtype=args.dtype)  # --server: one that forces
        results = scorer.score_batch([(it["claim"], it["evidence"], it["stance"]) for it in items])
        for it, r in zip(items, results):
            _print_rows(
                f"claim: {it['claim']}",
                ["ACU", "raised", "evidence"],
                [[r.acu, r.raised, it["evidence"]]],
                args.json,
                {**it, "acu": r.acu, "delta_p": r.delta_p, "p_with": r.p_with, "p_without": r.p_without},
            )
        return 0
    docs = read_documents(args.docs)
    if args.command == "influence":
        from ...metrics.influence import InfluenceScorer

        r = InfluenceScorer(
            batch.target_of(args),
            embedder=args.embedder,
            max_new_tokens=args.max_new_tokens,
            device=args.device,
            dtype=args.dtype,
            method=args.method,
            n_ablations=args.ablations,
            seed=args.seed,
        ).score(args.query, docs, answer=args.answer)
        _print_rows(
            f"query: {args.query}\nanswer: {r.answer}\nmethod: {r.method}",
            ["doc", "influence", "document"],
            [[i, s, d] for i, (s, d) in enumerate(zip(r.scores, docs))],
            args.json,
            {
                "query": args.query,
                "answer": r.answer,
                "method": r.method,
                "scores": r.scores,
                "leave_one_out_answers": r.leave_one_out_answers,
                "single_answers": r.single_answers,
                **({"logprobs": r.forward.logprobs, "masks": r.forward.masks} if r.forward else {}),
            },
        )
        return 0
    from ...metrics.seper import SePerScorer

    scorer = SePerScorer(
        batch.target_of(args),
        entailment=args.nli,
        n_samples=args.samples,
        tau=args.tau,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        device=args.device,
        dtype=args.dtype,
    )
    res = scorer.score(args.query, docs, args.reference)
    _print_rows(
        f"query: {args.query}   references: {args.reference}",
        ["doc", "dSePer_S", "dSePer_H", "document"],
        [[i, r.delta_soft, r.delta_hard, d] for i, (r, d) in enumerate(zip(res, docs))],
        args.json,
        {
            "query": args.query,
            "references": args.reference,
            "results": [{"index": i, **vars(r)} for i, r in enumerate(res)],
        },
    )
    return 0
