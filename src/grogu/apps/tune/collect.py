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

A record also holds the seconds its work takes the rerank pipeline, in three parts: the retriever's own
context answered (what the plain pipeline does), that answer teacher-forced (its score), and the other
candidates answered and scored. Tune's cost of a setting comes from them, so they must not depend on
``batch``. The pipeline answers one query at a time, and an engine call's seconds do not grow in proportion
to its contexts. So seconds are measured where a question is collected alone (``"timing": "single"``):
every question with ``batch=1``. With a larger batch, the first :data:`CALIBRATION` questions of a run
are collected alone, after an untimed warm-up (one context answered and forced). Their engine calls give
seconds per call, per decode step, per prompt token and per decoded token (:func:`pipeline_fit`). A
batched question's parts are that fit applied to the calls the pipeline would make for it alone
(``"timing": "fit"``). ``work`` holds each part's [calls, steps, prompt tokens, decoded tokens], ``calls``
the engine calls as made (and their seconds). The batch's own seconds, shared by tokens, stay in ``batch_seconds``.
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
#: questions a run with ``batch`` > 1 collects alone first, to time the engine calls the pipeline makes
CALIBRATION = 3
#: the parts of a question's work, as records time them
PARTS = ("answer_first", "force_first", "rest")
#: the clock of the timings
_clock = time.perf_counter
#: what a record must share with the run that reads it; also the model (its fingerprint, else its public
#: name) and the dtype where the record names one
RECORD_KEYS = ("prompt_hash", "top_n", "max_new_tokens")


def _size(prompt: Any) -> int:
    """A prompt's tokens (0 for chat messages, which a server tokenizes)."""
    return len(prompt) if isinstance(prompt, (list, tuple)) else 0


def _answer_work(answered: Sequence[tuple[Any, Any]]) -> list[int]:
    """[calls, steps, prompt tokens, decoded tokens] of the engine call that answers ``answered`` ((grounded
    prompt, answer) pairs): a step for the prompts, then one per token of the longest answer."""
    if not answered:
        return [0, 0, 0, 0]
    steps = 1 + max(len(gen.token_ids) for _, gen in answered)
    return [1, steps, sum(_size(g) for g, _ in answered), sum(len(gen.token_ids) for _, gen in answered)]


def _force_work(scorer: Any, question: str, answered: Sequence[tuple[Any, Any]]) -> list[int]:
    """[calls, steps, prompt tokens, decoded tokens] of the engine call that teacher-forces ``answered``
    under the question's ungrounded prompt: one step that reads the prompt and the answer. Nothing on a
    target that cannot teacher-force."""
    if scorer.grounded_only or not answered:
        return [0, 0, 0, 0]
    prompt = _size(scorer.prompts.ungrounded_ids(question))
    return [1, 1, sum(prompt + max(len(gen.token_ids), 1) for _, gen in answered), 0]


def fit_call_seconds(calls: Sequence[Sequence[float]]) -> list[float] | None:
    """Seconds per call, per step, per prompt token and per decoded token that best explain engine calls'
    seconds (``calls``: [calls, steps, prompt tokens, decoded tokens, seconds] each, calls 1). Least
    squares on the relative error, each rate at least 0: the best fit over the subsets of the rates. None
    without a timed call."""
    import numpy as np

    timed = [c for c in calls if c[4] > 0 and c[0]]
    if not timed:
        return None
    x = np.array([[v / c[4] for v in c[:4]] for c in timed], dtype=float)  # each equation over its seconds
    best, best_error = None, np.inf
    for mask in range(1, 16):
        cols = [j for j in range(4) if mask >> j & 1]
        rates, *_ = np.linalg.lstsq(x[:, cols], np.ones(len(x)), rcond=None)
        error = float(((x[:, cols] @ rates - 1.0) ** 2).sum())
        if (rates >= 0).all() and error < best_error - 1e-12:
            best, best_error = [0.0] * 4, error
            for j, r in zip(cols, rates):
                best[j] = float(r)
    return best


def pipeline_fit(records: Sequence[dict[str, Any]]) -> list[float] | None:
    """:func:`fit_call_seconds` of the engine calls of the questions collected alone (as the pipeline makes
    them); None without any."""
    return fit_call_seconds([c for r in records if r.get("timing") == "single" for c in r.get("calls", [])])


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


def _collect_batch(
    scorer: Any, batch: Sequence[Example], top_n: int, meta: dict[str, Any], rates: list[float] | None = None
) -> list[dict]:
    """The records of a few questions, their candidates answered together (one engine batch a step). A
    question alone gets its measured seconds. Batched ones get ``rates`` (:func:`pipeline_fit`) applied to
    the steps and tokens of their own calls; without rates, the batch's seconds shared by tokens (which
    depend on the batch)."""
    plans = [
        rerank_pipeline.plan(ex.question, list(ex.documents), top_n, None, COLLECT_SETTINGS, None, scorer.grounded_only)
        for ex in batch
    ]
    t0 = _clock()
    first = scorer.answer_contexts([p.context_documents(p.contexts[:1])[0] for p in plans])
    t1 = _clock()
    forced = scorer.force_answers(
        [(p.context_documents(p.contexts[:1])[0], g, gen) for p, (g, gen) in zip(plans, first)], False
    )
    t2 = _clock()
    rest_ctx = [(i, c) for i, p in enumerate(plans) for c in p.context_documents(p.contexts[1:])]
    rest_scored: list[Any] = []
    answered: list[Any] = []
    t_rest = t2
    if rest_ctx:
        answered = scorer.answer_contexts([c for _, c in rest_ctx])
        t_rest = _clock()
        rest_scored = scorer.force_answers([(c, g, gen) for (_, c), (g, gen) in zip(rest_ctx, answered)], False)
    t3 = _clock()
    # the dense judge: every candidate's gold answers teacher-forced after its grounded prompt, one batch
    owner = list(range(len(plans))) + [i for i, _ in rest_ctx]
    gold = gold_logliks(scorer, [g for g, _ in first] + [g for g, _ in answered], [batch[i].answers for i in owner])
    t4 = _clock()
    # each question's work by part (PARTS) as the pipeline does it, alone: [calls, steps, prompt, decoded]
    work, rest_forces = [], []
    for i, ex in enumerate(batch):
        mine_answered = [a for (j, _), a in zip(rest_ctx, answered) if j == i]
        rest_answer, rest_force = _answer_work(mine_answered), _force_work(scorer, ex.question, mine_answered)
        rest_forces.append(rest_force)
        first_work = (_answer_work([first[i]]), _force_work(scorer, ex.question, [first[i]]))
        work.append(dict(zip(PARTS, (*first_work, [a + f for a, f in zip(rest_answer, rest_force)]))))

    def together(parts: list[list[int]]) -> list[int]:  # several questions' teacher-forcing in one call
        return [max(w[0] for w in parts), max(w[1] for w in parts), sum(w[2] for w in parts), sum(w[3] for w in parts)]

    calls = [  # the engine calls as made here: [calls, steps, prompt tokens, decoded tokens, seconds]
        [*_answer_work(first), t1 - t0],
        [*together([w["force_first"] for w in work]), t2 - t1],
        [*_answer_work(answered), t_rest - t2],
        [*together(rest_forces), t3 - t_rest],
    ]
    spent = dict(zip(PARTS, (t1 - t0, t2 - t1, t3 - t2)))
    totals = {part: sum(w[part][2] + w[part][3] for w in work) for part in PARTS}
    records = []
    for i, (ex, p) in enumerate(zip(batch, plans)):
        share = {part: (work[i][part][2] + work[i][part][3]) / totals[part] if totals[part] else 0.0 for part in PARTS}
        shared = {part: spent[part] * share[part] for part in PARTS}
        if len(batch) == 1:
            timing, seconds = "single", dict(spent)
        elif rates is not None:
            timing, seconds = "fit", {part: sum(r * w for r, w in zip(rates, work[i][part])) for part in PARTS}
        else:
            timing, seconds = "batch", shared
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
                # the pipeline's seconds for this question (module docstring)
                "seconds": {
                    **seconds,
                    # the dense judge's share (tune's own work: no setting's cost)
                    "gold": (t4 - t3) * len(rows) / len(owner),
                },
                "timing": timing,
                "work": work[i],
                "calls": calls,
                "batch_seconds": shared,
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
    answered now (``batch`` questions at a time; with ``batch`` > 1, the first :data:`CALIBRATION` alone) and
    appended there. ``meta``: the set-up (:data:`RECORD_KEYS`), written on every record and checked on the
    ones read."""
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
    # batch > 1: a few questions alone first (after an untimed warm-up), to fit the pipeline's calls
    singles = [r for r in done.values() if r.get("timing") == "single"] if batch > 1 else []
    alone = todo if batch == 1 else todo[: max(0, CALIBRATION - len(singles))]
    groups = [[ex] for ex in alone] + [todo[s : s + batch] for s in range(len(alone), len(todo), batch)]
    if batch > 1 and alone:
        ex = alone[0]
        plan = rerank_pipeline.plan(
            ex.question, list(ex.documents), top_n, None, COLLECT_SETTINGS, None, scorer.grounded_only
        )
        context = plan.context_documents(plan.contexts[:1])[0]
        [(grounded, gen)] = scorer.answer_contexts([context])
        scorer.force_answers([(context, grounded, gen)], False)
    try:
        for group in groups:
            rates = pipeline_fit(singles)
            for rec in _collect_batch(scorer, group, top_n, meta, rates):
                done[rec["id"]] = rec
                if rec["timing"] == "single" and batch > 1:
                    singles.append(rec)
                if out is not None:
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    out.flush()
            bar.update(len(group))
    finally:
        bar.close()
        if out is not None:
            out.close()
    return [done[ex.id] for ex in examples]


__all__ = [
    "COLLECT_SETTINGS",
    "CALIBRATION",
    "RECORD_KEYS",
    "collect",
    "read_records",
    "is_current",
    "fit_call_seconds",
    "pipeline_fit",
]
