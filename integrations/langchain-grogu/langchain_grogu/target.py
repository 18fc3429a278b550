"""The target LLM: what a user may pass as ``model`` and how it becomes a grogu engine.

grogu needs the target model's token log-probabilities, so the target is an open-weights causal LM run
locally — a model name/path/hub id, a shared :class:`grogu.Engine`, a loaded ``(model, tokenizer)``
pair, or the LangChain object that already holds one (``HuggingFacePipeline``, ``ChatHuggingFace`` over
it, or a ``transformers`` text-generation pipeline) — or one behind a vLLM, SGLang or llama.cpp server:
a :class:`grogu.ServerTarget`, or the pipeline's ``ChatOpenAI`` / ``OpenAI`` with ``base_url`` on it. A
``ChatOpenAI`` on the OpenAI API or Ollama is a grounded-only target (its chat API returns no prompt
log-probabilities): ``metric="entropy"`` or ``"ppl"``. Loaded weights are
reused, never loaded a second time: one process-wide engine per model (:func:`grogu.get_engine`).
The grogu service in place of a model is told apart by :func:`grogu.rerank.factory.remote_target`.
"""

from __future__ import annotations

import os
from typing import Any

from grogu import Engine, ServerTarget, get_engine
from grogu.core.target import Target
from grogu.rerank.factory import engine_label
from grogu.runtime.inference_server import target_from_llm

_TARGET_HELP = (
    "pass the target LLM as a model name or path (e.g. 'smollm2-135m-instruct' or a hub id), the URL of a "
    "grogu service (http://host:port, see grogu serve) or a grogu.RemoteScorer, a "
    "grogu.Engine, a (model, tokenizer) pair, a langchain_huggingface HuggingFacePipeline (or a "
    "ChatHuggingFace over one), a transformers text-generation pipeline, a ChatOpenAI / OpenAI "
    "(base_url=...) on a vLLM, SGLang or llama.cpp server, a ChatOpenAI on the OpenAI API or Ollama "
    "(grounded-only: metric='entropy' or 'ppl'), or a grogu.ServerTarget"
)


def _unwrap(target: Any) -> Any:
    """ChatHuggingFace -> its HuggingFacePipeline -> its transformers pipeline."""
    if type(target).__name__ == "ChatHuggingFace":
        target = target.llm
    pipe = getattr(target, "pipeline", None)
    if pipe is not None and getattr(target, "tokenizer", None) is None:  # HuggingFacePipeline
        target = pipe
    return target


def engine_spec(target: Any) -> Engine | ServerTarget | str | tuple[Any, Any]:
    """What :func:`grogu.get_engine` accepts, from anything a user may pass as the target LLM."""
    if isinstance(target, Target):  # a grogu Engine or ServerTarget
        return target
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    if isinstance(target, tuple):
        if len(target) != 2:
            raise TypeError(f"a loaded target LLM must be a (model, tokenizer) pair; {_TARGET_HELP}")
        return target
    inner = _unwrap(target)
    model, tokenizer = getattr(inner, "model", None), getattr(inner, "tokenizer", None)
    if model is not None and tokenizer is not None and hasattr(model, "config"):
        task = getattr(inner, "task", "text-generation")
        if task != "text-generation":
            raise ValueError(
                f"grogu scores with a causal (decoder-only) LM; the given pipeline's task is {task!r}. "
                f"Use a 'text-generation' pipeline."
            )
        return (model, tokenizer)
    served = target_from_llm(target)
    if served is not None:
        return served
    if type(target).__name__ == "HuggingFacePipeline":
        raise ValueError(
            "the HuggingFacePipeline has no loaded transformers pipeline (is it an OpenVINO or "
            "remote backend?); " + _TARGET_HELP
        )
    raise TypeError(
        f"cannot use a {type(target).__name__} as the target LLM: grogu needs the model's token "
        f"log-probabilities, which grogu reads from local models and OpenAI-compatible servers; {_TARGET_HELP}"
    )


def resolve_engine(target: Any, device: str | None = None, dtype: str | None = None) -> Engine:
    """The shared engine of the target LLM (loaded once per process for a name or a loaded model)."""
    spec = engine_spec(target)
    if isinstance(spec, (tuple, ServerTarget)) and (device is not None or dtype is not None):
        raise ValueError("device/dtype only apply to a model given by name: move the loaded model yourself")
    return get_engine(spec, device=device, dtype=dtype)


def answer_budget(llm: Any) -> int | None:
    """The chain LLM's own answer budget, where it states one: ``max_tokens`` (ChatOpenAI, OpenAI), or the
    ``max_new_tokens`` of a ``HuggingFacePipeline`` (its ``pipeline_kwargs``, else its transformers pipeline's
    generate arguments) under a ``ChatHuggingFace``; None otherwise."""
    inner = llm.llm if type(llm).__name__ == "ChatHuggingFace" else llm
    found = [getattr(llm, "max_tokens", None), (getattr(inner, "pipeline_kwargs", None) or {}).get("max_new_tokens")]
    pipe = getattr(inner, "pipeline", None)
    for name in ("_generate_kwargs", "_forward_params"):  # where transformers keeps pipeline(max_new_tokens=...)
        found.append((getattr(pipe, name, None) or {}).get("max_new_tokens"))
    return next((v for v in found if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)


def model_label(target: Any, engine: Engine) -> str:
    """A readable name of the target LLM for metadata and logs."""
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    model_id = getattr(target, "model_id", None) or getattr(_unwrap(target), "model_id", None)
    if isinstance(model_id, str) and model_id:
        return model_id
    return engine_label(engine)
