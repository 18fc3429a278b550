"""Collection: every candidate context of every labelled question answered once, with the user's prompt.

A question's candidates are those of the widest family tune replays (:data:`COLLECT_SETTINGS`:
``swap_orders`` with two swaps, so the top-n, the top-n with its last document swapped for each of the
next two, and each of those reversed). Every other family tune tries is a subset of them. Each candidate is
answered and scored exactly as the rerank pipeline answers and scores it (:mod:`grogu.rerank.pipeline`:
``UtilityScorer.answer_contexts`` then ``force_answers``), so a replayed setting gives the answer the
pipeline would give.

Each candidate's row also holds ``gold_loglik``, the dense judge (:func:`.judging.gold_logliks`): the
mean log-probability per token of its best gold answer after its grounded prompt. Row 0 is the plain
context (the retriever's order). Records collected before it lack it; they still replay, judged by words.

Each question becomes one JSON line in the records file, written as soon as it is scored. A rerun skips
the questions already there (it resumes after an interruption). A record holds its example's content hash
(:attr:`.examples.Example.content_hash`): an example whose question, answers or documents changed under
the same id is collected again (and judged with its new answers); the newer line wins.

A record also holds the seconds its work took, in three parts: the retriever's own context answered (what
the plain pipeline does), that answer teacher-forced (its score), and the other candidates answered and
scored. Tune's cost of a setting comes from them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Sequence

from ...core.checks import check_documents
from ...rerank import pipeline as rerank_pipeline
from ...rerank.settings import ModeSettings
from ...rerank.tuned import same_model
from ...runtime.models import public_model_name
from .examples import Example
from .judging import gold_logliks

#: the candidates collected for every question: every family tune replays is a subset of these
COLLECT_SETTINGS = ModeSettings(family="swap_orders", swaps=2, gate="always")
#: what a record must share with the run that reads it; also the model (its fingerprint, else its public
#: name) and the dtype where the record names one
RECORD_KEYS = ("prompt_hash", "top_n", "max_new_tokens")


def _row(result: Any) -> dict[str, Any]:
    return {
        "answer": result.answer,
        "variants": {k: round(float(v), 6) for k, v in result.variants.items()},
        "n_tokens": result.n_tokens,
        "finished": bool(result.answer_finished),
    }


def read_records(path: str | None, meta: dict[str, Any]) -> dict[str, dict]:
    """The records already at ``path``, by id; a ValueError when they were collected for another set-up."""
    if not path or not os.path.exists(path):
        return {}
    out = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if not line.endswith("\n"):  # a line cut by an interruption: that question is collected again
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{path}:{n} is not a JSON record") from None
            other = {k: rec.get(k) for k in RECORD_KEYS if rec.get(k) != meta[k]}
            if rec.get("model_fingerprint") and meta.get("model_fingerprint"):
                if not same_model(rec["model_fingerprint"], meta["model_fingerprint"]):
                    other["model_fingerprint"] = rec["model_fingerprint"]
            elif public_model_name(rec.get("model")) != public_model_name(meta.get("model")):
                other["model"] = rec.get("model")
            if rec.get("dtype") and meta.get("dtype") and rec["dtype"] != meta["dtype"]:
                other["dtype"] = rec["dtype"]  # another dtype gives other answers (older records name none)
            if other:
                raise ValueError(
                    f"{path} holds records collected with {other}, not { ({k: meta.get(k) for k in other}) }: "
                    "write this run's records elsewhere (another --out)"
                )
            out[rec["id"]] = rec
    return out


def is_current(record: dict[str, Any], example: Example) -> bool:
    """Whether ``record`` was collected from ``example`` as it is now: the same content hash (question,
    answers, documents). A record older than the hash is compared by its question, answers and texts."""
    if "example_hash" in record:
        return record["example_hash"] == example.content_hash
    texts = [f"{d.title or ''} {d.text}" for d in check_documents(list(example.documents))]
    held = (record.get("question"), record.get("answers"), record.get("texts"))
    return held == (example.question, list(example.answers), texts)


def _drop_cut_line(path: str) -> None:
    """Cut a last line an interruption left unfinished, so the next record starts on its own line."""
    if not os.path.exists(path):
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def _collect_batch(scorer: Any, batch: Sequence[Example], top_n: int, meta: dict[str, Any]) -> list[dict]:
    """The records of a few questions, their candidates answered together (one engine batch a step)."""
    plans = [
        rerank_pipeline.plan(ex.question, list(ex.documents), top_n, None, COLLECT_SETTINGS, None, scorer.grounded_only)
        for ex in batch
    ]
    t0 = time.perf_counter()
    first = scorer.answer_contexts([p.context_documents(p.contexts[:1])[0] for p in plans])
    t1 = time.perf_counter()
    forced = scorer.force_answers(
        [(p.context_documents(p.contexts[:1])[0], g, gen) for p, (g, gen) in zip(plans, first)], False
    )
    t2 = time.perf_counter()
    rest_ctx = [(i, c) for i, p in enumerate(plans) for c in p.context_documents(p.contexts[1:])]
    rest_scored: list[Any] = []
    answered: list[Any] = []
    if rest_ctx:
        answered = scorer.answer_contexts([c for _, c in rest_ctx])
        rest_scored = scorer.force_answers([(c, g, gen) for (_, c), (g, gen) in zip(rest_ctx, answered)], False)
    t3 = time.perf_counter()
    # the dense judge: every candidate's gold answers teacher-forced after its grounded prompt, one batch
    owner = list(range(len(plans))) + [i for i, _ in rest_ctx]
    gold = gold_logliks(scorer, [g for g, _ in first] + [g for g, _ in answered], [batch[i].answers for i in owner])
    t4 = time.perf_counter()
    n_rest = max(len(rest_ctx), 1)
    records = []
    for i, (ex, p) in enumerate(zip(batch, plans)):
        mine = [r for (j, _), r in zip(rest_ctx, rest_scored) if j == i]
        golds = [gold[i]] + [v for (j, _), v in zip(rest_ctx, gold[len(plans) :]) if j == i]
        rows = [_row(forced[i])] + [_row(r) for r in mine]
        records.append(
            {
                "id": ex.id,
                "question": ex.question,
                "answers": list(ex.answers),
                "example_hash": ex.content_hash,
                **meta,
                "texts": p.support_texts(),
                "candidates": p.contexts,
                "scored": [{**row, "gold_loglik": v} for row, v in zip(rows, golds)],
                # a batch's seconds shared by its questions: the first contexts equally, the rest by count
                "seconds": {
                    "answer_first": (t1 - t0) / len(batch),
                    "force_first": (t2 - t1) / len(batch),
                    "rest": (t3 - t2) * len(mine) / n_rest,
                    # the dense judge's share (tune's own work: no setting's cost)
                    "gold": (t4 - t3) * len(rows) / len(owner),
                },
            }
        )
    return records


def collect(
    scorer: Any,
    examples: Sequence[Example],
    top_n: int,
    meta: dict[str, Any],
    records_path: str | None = None,
    *,
    batch: int = 1,
    progress: bool = True,
) -> list[dict]:
    """Every example's record, in example order: read from ``records_path`` where already collected, else
    answered now (``batch`` questions at a time) and appended there. ``meta``: the set-up
    (:data:`RECORD_KEYS`), written on every record and checked on the ones read."""
    from tqdm import tqdm

    done = read_records(records_path, meta)
    changed = [ex.id for ex in examples if ex.id in done and not is_current(done[ex.id], ex)]
    todo = [ex for ex in examples if ex.id not in done or ex.id in changed]
    if changed and progress:
        shown = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
        print(
            f"grogu tune: {len(changed)} question(s) changed since collected, collected again: {shown}", file=sys.stderr
        )
    bar = tqdm(
        total=len(examples),
        initial=len(examples) - len(todo),
        desc="answering candidates",
        unit="question",
        disable=not progress,
        file=sys.stderr,
    )
    if records_path:
        _drop_cut_line(records_path)
    out = open(records_path, "a", encoding="utf-8") if records_path else None
    try:
        for start in range(0, len(todo), batch):
            for rec in _collect_batch(scorer, todo[start : start + batch], top_n, meta):
                done[rec["id"]] = rec
                if out is not None:
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    out.flush()
            bar.update(len(todo[start : start + batch]))
    finally:
        bar.close()
        if out is not None:
            out.close()
    return [done[ex.id] for ex in examples]


__all__ = ["COLLECT_SETTINGS", "RECORD_KEYS", "collect", "read_records", "is_current"]
