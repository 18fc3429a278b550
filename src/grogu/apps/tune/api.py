"""``grogu.tune``: the rerank decision fitted to the user's own LLM and QA prompt from labelled questions.

1. Collect (:mod:`.collect`): every candidate context of every question answered once, with the prompt.
   Each candidate also gets the dense judge: the gold answers' log-likelihood under the LLM, teacher-forced.
2. Replay (:mod:`.replay`): every setting of the grid (``grid="small"``: 26 settings; ``"full"``: about
   1,200) on the records, judged densely and by whole words (or the user's judge), with its cost relative
   to the plain answer.
3. Choose (:mod:`.choose`): a rule fixed in code before any label is read. The setting is chosen on some
   folds of the questions and judged on the others, by the dense judge where the records hold it
   (``choose_by``). A challenger must beat the shipped default; the retriever's order
   (``family="keep"``) is one. The gain over the retriever's order is stated with 90 % intervals
   (:mod:`.gain`).
4. Write (:mod:`.report`): ``settings.json`` (every front end takes it: ``settings="DIR/settings.json"``),
   ``report.html`` and ``report.txt``, beside ``records.jsonl`` (the collection, resumable).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from ...core.checks import check_positive_int, check_top_n
from ...core.frameworks import adapter_for
from ...core.prompts import RAG_QA_TEMPLATE, PromptTemplate, read_prompt_file, template_from_text
from ...rerank.tuned import TunedSettings, model_fingerprint, prompt_hash
from ...runtime.models import DEFAULT_MODEL
from .collect import collect
from .examples import Example, load_examples

#: the answer budget when neither the caller nor the model says one (UtilityScorer's default)
DEFAULT_MAX_NEW_TOKENS = 64


def prompt_template(qa_prompt: Any, model: Any = None) -> PromptTemplate:
    """The grogu template that renders what the LLM reads from ``qa_prompt``: a grogu ``PromptTemplate``; a
    template string with ``{context}`` and ``{question}``; a prompt file's path (``os.PathLike``); a
    LangChain prompt (``ChatPromptTemplate``...) or a LlamaIndex prompt, rendered for ``model`` when it is
    that framework's LLM (by the framework's adapter, :mod:`grogu.core.frameworks`). None: LlamaIndex's chat
    QA prompt (:data:`grogu.core.prompts.RAG_QA_TEMPLATE`)."""
    if qa_prompt is None:
        return RAG_QA_TEMPLATE
    if isinstance(qa_prompt, PromptTemplate):
        return qa_prompt
    if isinstance(qa_prompt, str):
        return template_from_text(qa_prompt)
    if isinstance(qa_prompt, os.PathLike):
        return read_prompt_file(qa_prompt)
    adapter = adapter_for(qa_prompt, "prompt")
    if adapter is not None:
        return adapter.prompt_template(qa_prompt, model if adapter.owns(model) else None)
    raise TypeError(
        "qa_prompt must be a grogu.PromptTemplate, a template string with {context} and {question}, a prompt "
        f"file's path, or a LangChain or LlamaIndex prompt; got {type(qa_prompt).__name__}"
    )


def _engine_and_budget(model: Any, device: str | None, dtype: str | None) -> tuple[Any, int | None]:
    """The target for ``model`` (anything UtilityScorer takes, or a LangChain / LlamaIndex LLM, resolved by
    its framework's adapter) and that LLM's own answer budget where it states one."""
    adapter = adapter_for(model, "LLM")
    if adapter is None:
        from ...runtime.engine import get_engine

        return get_engine(model, device=device, dtype=dtype), None
    return adapter.resolve_engine(model, device, dtype), adapter.answer_budget(model)


def build_scorer(
    model: Any, qa_prompt: Any, max_new_tokens: int | None, device: str | None = None, dtype: str | None = None
) -> Any:
    """The :class:`grogu.UtilityScorer` that answers with the user's prompt and answer budget."""
    from ...rerank.scorer import UtilityScorer

    template = prompt_template(qa_prompt, model)
    engine, budget = _engine_and_budget(model, device, dtype)
    budget = max_new_tokens if max_new_tokens is not None else budget or DEFAULT_MAX_NEW_TOKENS
    return UtilityScorer(engine, max_new_tokens=check_positive_int("max_new_tokens", budget), template=template)


def set_up(scorer: Any, top_n: int) -> dict[str, Any]:
    """What records and the settings file say they were made with. The model's name has no install path
    (:func:`grogu.runtime.models.public_model_name`); its fingerprint, dtype and device say which weights
    ran and how."""
    from ...rerank.tuned import target_device, target_dtype
    from ...runtime.models import public_model_name

    return {
        "model": public_model_name(scorer.model_name),
        "model_fingerprint": model_fingerprint(scorer.target),
        "dtype": target_dtype(scorer.target),
        "device": target_device(scorer.target),
        "prompt_hash": prompt_hash(scorer.template),
        "top_n": top_n,
        "max_new_tokens": scorer.max_new_tokens,
    }


def _batch(scorer: Any, batch: int | None) -> int:
    if batch is not None:
        return check_positive_int("batch", batch)
    device = getattr(getattr(scorer.target, "device", None), "type", "cpu")
    return 8 if device == "cuda" else 1


def collect_records(
    examples: Any,
    model: Any = DEFAULT_MODEL,
    qa_prompt: Any = None,
    *,
    top_n: int = 3,
    max_new_tokens: int | None = None,
    records: str | None = None,
    batch: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    progress: bool = True,
) -> list[dict]:
    """Collect (:mod:`.collect`) only: every candidate of every example answered with the prompt, as
    records (appended to ``records``, resumable). ``tune`` replays them; a benchmark can too."""
    top_n = check_top_n(top_n)
    if top_n is None:
        raise ValueError("tune needs top_n (the documents the pipeline keeps), not None")
    exs = examples if isinstance(examples, list) and all(isinstance(e, Example) for e in examples) else None
    exs = exs or load_examples(examples)
    scorer = build_scorer(model, qa_prompt, max_new_tokens, device, dtype)
    return collect(scorer, exs, top_n, set_up(scorer, top_n), records, batch=_batch(scorer, batch), progress=progress)


def tune(
    examples: Any,
    model: Any = DEFAULT_MODEL,
    qa_prompt: Any = None,
    top_n: int = 3,
    out: str | os.PathLike | None = None,
    *,
    max_new_tokens: int | None = None,
    judge: Callable[[str, Sequence[str]], bool] | None = None,
    max_cost: float | None = None,
    folds: int = 5,
    batch: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    progress: bool = True,
    incumbent: str = "shipped",
    grid: str = "small",
    choose_by: str | None = None,
) -> TunedSettings:
    """Fit the rerank settings to ``model`` and ``qa_prompt`` on labelled ``examples`` (module docstring).

    examples: a JSONL path or a list of dicts with ``question``, ``answers`` and ``documents`` (the
    retriever's order). model: anything :class:`grogu.UtilityScorer` takes, or a LangChain / LlamaIndex
    LLM (``ChatHuggingFace``, ``HuggingFaceLLM``). qa_prompt: the pipeline's QA prompt
    (:func:`prompt_template`). top_n: documents the pipeline keeps. out: a folder for ``settings.json``,
    ``report.html``, ``report.txt`` and ``records.jsonl`` (None: nothing written, nothing resumed).
    judge: ``judge(answer, answers) -> bool`` (default: a gold answer's words among the answer's).
    max_cost: the most a setting may cost on average, relative to the plain answer (None: no cap).
    folds: cross-validation folds (at most one per two questions). incumbent: the setting a challenger must
    beat, ``"shipped"`` (the shipped default) or ``"keep"`` (the retriever's order; the first rule).
    grid: the settings tried, ``"small"`` (26, :func:`.replay.small_grid`) or ``"full"`` (about 1,200).
    choose_by: the judge of the choice, ``"dense"`` (the gold answers' log-likelihood under the LLM),
    ``"words"`` (the rule before it), or None (dense where the records hold it: :mod:`.choose`).
    Returns the chosen :class:`grogu.rerank.tuned.TunedSettings`: ``decision`` is ``"tuned"`` where a setting
    beat the incumbent, else ``"default"`` (the shipped default stays) or ``"keep"`` (the retriever's order).
    """
    from .choose import choose
    from .report import write_report

    top_n = check_top_n(top_n)
    if top_n is None:
        raise ValueError("tune needs top_n (the documents the pipeline keeps), not None")
    exs = load_examples(examples)
    folds = check_positive_int("folds", folds)
    from .choose import CHOOSE_BY, INCUMBENTS
    from .replay import GRIDS

    # checked before collection, the slow part, so that a typo fails at once
    for name, value, allowed in (("grid", grid, tuple(GRIDS)), ("choose_by", choose_by, (*CHOOSE_BY, None))):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    if incumbent not in INCUMBENTS:
        raise ValueError(f"incumbent must be one of {INCUMBENTS}, got {incumbent!r}")
    if judge is not None and not callable(judge):
        raise TypeError(f"judge must be a callable judge(answer, answers) -> bool, got {type(judge).__name__}")
    if max_cost is not None:
        from ...core.checks import check_float

        max_cost = check_float("max_cost", max_cost, minimum=1.0)
    scorer = build_scorer(model, qa_prompt, max_new_tokens, device, dtype)
    meta = set_up(scorer, top_n)
    records_path = None
    if out is not None:
        os.makedirs(out, exist_ok=True)
        records_path = os.path.join(out, "records.jsonl")
    records = collect(scorer, exs, top_n, meta, records_path, batch=_batch(scorer, batch), progress=progress)
    result = choose(
        records,
        judge=judge,
        max_cost=max_cost,
        folds=folds,
        grounded_only=scorer.grounded_only,
        incumbent=incumbent,
        settings=grid,
        choose_by=choose_by,
    )
    tuned = TunedSettings(
        settings=result.settings,
        model=meta["model"],
        prompt_hash=meta["prompt_hash"],
        top_n=top_n,
        max_new_tokens=meta["max_new_tokens"],
        decision=result.decision,
        evidence=result.evidence,
        fingerprint=meta["model_fingerprint"],
        dtype=meta["dtype"],
        device=meta["device"],
    )
    if out is not None:
        path = os.path.join(out, "settings.json")
        tuned.save(path)
        write_report(result, tuned, out)
        tuned = TunedSettings(**{**vars(tuned), "path": path})
    print(result.summary(), flush=True) if progress else None
    return tuned


__all__ = [
    "tune",
    "collect_records",
    "prompt_template",
    "template_from_text",
    "build_scorer",
    "DEFAULT_MAX_NEW_TOKENS",
]
