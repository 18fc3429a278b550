"""Scoring many queries from the command line (``grogu score|rerank``): the target the arguments name,
one output record per query, resumable ``--out`` files and Ray Data.

The output holds one JSON record per input query, in input order, exactly as the sequential command
writes them. It is resumable: a rerun keeps the complete records already in ``--out`` (checked against
the input, query by query; a half-written last line is dropped) and scores only the rest.

With ``--ray`` the queries go through Ray Data: chunks of ``--batch-queries`` whole queries (a query's
documents stay together, so they share its prompt prefix in one engine batch) are scored by
``map_batches`` on an actor pool of ``--workers`` engines (one model load per actor); Ray Data keeps
the input order, and each chunk's records are appended as soon as it and every chunk before it is
done. The chunks are the sequential command's, so the records are the same.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from .tuned import settings_from_arguments


def target_of(args: argparse.Namespace | dict[str, Any]) -> Any:
    """The target LLM the parsed arguments name: a ServerTarget with --server, else the --model spec."""
    a = vars(args) if isinstance(args, argparse.Namespace) else args
    if not a.get("server"):
        return a["model"]
    if a.get("device") is not None or a.get("dtype") is not None:
        raise SystemExit("--device/--dtype apply to a model loaded here, not to one behind --server")
    from ..runtime.inference_server import ServerTarget

    return ServerTarget(
        a["server"],
        a.get("served_model"),
        api=a.get("server_api", "auto"),
        tokenizer=a["model"],
        top_logprobs=a.get("top_logprobs", 20),
        api_key=a.get("api_key"),
    )


def score_chunk(scorer: Any, options: dict[str, Any], chunk: list[dict]) -> list[dict]:
    """The records of a chunk of queries scored together (``grogu score``: one engine batch;
    ``grogu rerank``: each query's mode runs its own batch). ``options``: the parsed arguments."""
    if options["command"] == "rerank":
        settings = settings_from_arguments(options)
        scored = [
            scorer.rerank(it["query"], it["documents"], options["top_n"], options["threshold"], settings=settings)
            for it in chunk
        ]
        mode = settings.mode
        extra = {"top_n": options["top_n"], "gate_support": settings.gate_support}
        extra["gate_confidence"] = settings.gate_confidence
        if settings.gate_entropy_change is not None:
            extra["gate_entropy_change"] = settings.gate_entropy_change
    else:
        scored = scorer.score_batch([(it["query"], it["documents"]) for it in chunk])
        mode, extra = "document", {}
    return [record(item, results, scorer, mode, **extra) for item, results in zip(chunk, scored)]


def record(item: dict, results: list, scorer: Any, mode: str, **rerank: Any) -> dict:
    """The output record of one query: its results in the order of the mode, with each document. A
    rerank's record also holds its ``top_n`` and, in the context mode, the gate's verdict on the
    retriever's own context (``gate``: ``grogu.GateVerdict.as_dict()``) and its thresholds."""
    gate = next((r.gate for r in results if getattr(r, "gate", None) is not None), None)
    extra = dict(rerank)
    if gate is not None:
        extra["gate"] = gate.as_dict()
    return {
        "query": item["query"],
        "model": scorer.model_name,
        "metric": scorer.metric,
        "mode": mode,
        **extra,
        "results": [
            {
                "index": r.index,
                "score": r.score,
                "confidence": r.confidence,
                "n_tokens": r.n_tokens,
                "n_key_tokens": r.n_key_tokens,
                "answer": r.answer,
                "variants": r.variants,
                "document": r.document,
                "rank_score": r.rank_score,
            }
            for r in results
        ],
    }


def scorer_options(args: argparse.Namespace | dict[str, Any]) -> dict[str, Any]:
    """:class:`grogu.UtilityScorer` keyword arguments from the parsed ``score`` / ``rerank`` arguments."""
    a = vars(args) if isinstance(args, argparse.Namespace) else args
    template = None
    if a.get("prompt_file"):
        from ..core.prompts import read_prompt_file

        template = read_prompt_file(a["prompt_file"])
    return dict(
        model=target_of(a),
        template=template,
        metric=a["metric"],
        alpha=a["alpha"],
        top_k_frac=a["top_k_frac"],
        max_new_tokens=a["max_new_tokens"],
        device=a["device"],
        dtype=a["dtype"],
        answer_style=a["answer_style"],
    )


def completed_prefix(path: str, items: list[dict]) -> int:
    """How many records ``path`` already holds for the first queries of ``items`` (0 when it does not
    exist). A half-written last line is cut off; a record that belongs to another query is an error
    (the file is the output of another input)."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        data = f.read()
    complete = data[: data.rfind(b"\n") + 1]
    if len(complete) != len(data):  # a crash in the middle of a line: drop the partial record
        with open(path, "wb") as f:
            f.write(complete)
    lines = complete.decode("utf-8").splitlines()
    if len(lines) > len(items):
        raise SystemExit(
            f"{path} holds {len(lines)} records but the input has {len(items)} queries: "
            f"it is the output of another input (use another --out)"
        )
    for n, (line, item) in enumerate(zip(lines, items), 1):
        try:
            query = json.loads(line)["query"]
        except (ValueError, KeyError, TypeError):
            raise SystemExit(f"{path}:{n}: not a grogu record; use another --out or delete the file") from None
        if query != item["query"]:
            raise SystemExit(
                f"{path}:{n} is the record of {query!r:.60}, but query {n} of the input is "
                f"{item['query']!r:.60}: it is the output of another input (use another --out)"
            )
    return len(lines)


class ChunkScorer:
    """A Ray Data actor: one engine (loaded once), scoring chunks of queries into their records."""

    def __init__(self, options: dict[str, Any]) -> None:
        from .scorer import UtilityScorer

        self.options = options
        self.scorer = UtilityScorer(**scorer_options(options))

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        out = []
        for payload in batch["payload"]:
            records = score_chunk(self.scorer, self.options, json.loads(payload))
            out.append("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        return {"start": batch["start"], "records": np.array(out, dtype=object)}


def score_on_ray(args: argparse.Namespace, items: list[dict], done: int) -> int:
    """Score ``items[done:]`` on Ray Data and append their records to ``args.out`` in input order."""
    import ray

    todo = items[done:]
    if not todo:
        return 0
    if not ray.is_initialized():
        if args.address:
            ray.init(address=args.address)
        else:
            ray.init(include_dashboard=False)
    from ray.data import DataContext

    size = args.batch_queries
    rows = [
        {"start": done + s, "payload": json.dumps(todo[s : s + size], ensure_ascii=False)}
        for s in range(0, len(todo), size)
    ]
    DataContext.get_current().execution_options.preserve_order = True
    options = {k: v for k, v in vars(args).items() if k != "func"}
    ds = ray.data.from_items(rows).map_batches(
        ChunkScorer,
        fn_constructor_kwargs={"options": options},
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=args.workers),
        num_cpus=1,
        num_gpus=args.gpus_per_worker,
    )
    expected = done
    with open(args.out, "a", encoding="utf-8") as out:
        for row in ds.iter_rows():
            if row["start"] != expected:  # never write out of order: the resume point depends on it
                raise RuntimeError(f"Ray Data returned chunk {row['start']} while {expected} was due")
            out.write(row["records"])
            out.flush()
            expected += row["records"].count("\n")
    return 0
