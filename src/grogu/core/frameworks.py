"""RAG frameworks: what grogu needs from a framework's prompts and LLMs, given by that framework's integration.

grogu imports no integration. An integration package describes its framework as a :class:`FrameworkAdapter`.
It registers the adapter when it is imported (:func:`register_framework`). It also advertises the adapter
in the entry-point group ``grogu.frameworks``; the entry point's name is the start of its objects' module
names (``langchain``, ``llama_index``). :func:`adapter_for` finds the adapter of an object. It asks the
registered adapters first. Then it loads the advertised ones whose name starts the object's module name,
each once. An object of a known framework whose integration is missing is an ImportError that names the
package to install (:data:`INTEGRATIONS`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .prompts import PromptTemplate

#: the entry-point group where integration packages advertise their adapters
ENTRY_POINT_GROUP = "grogu.frameworks"

#: the start of a framework's module names -> (the framework's name, the pip package of its integration)
INTEGRATIONS = {
    "langchain": ("LangChain", "langchain-grogu"),
    "llama_index": ("LlamaIndex", "llama-index-postprocessor-grogu"),
}


@dataclass(frozen=True)
class FrameworkAdapter:
    """How grogu reads one framework's objects.

    name: the start of the framework's module names (``"langchain"``); also the entry point's name.
    owns(obj): whether ``obj`` belongs to the framework.
    prompt_template(qa_prompt, llm): the grogu ``PromptTemplate`` of what ``llm`` reads through ``qa_prompt``
    (``llm`` is None unless it belongs to the framework).
    resolve_engine(llm, device, dtype): the grogu target (engine or server) that scores for ``llm``.
    answer_budget(llm): the answer length ``llm`` sets itself, or None.
    """

    name: str
    owns: Callable[[Any], bool]
    prompt_template: Callable[[Any, Any], PromptTemplate]
    resolve_engine: Callable[[Any, str | None, str | None], Any]
    answer_budget: Callable[[Any], int | None]


_LOCK = threading.Lock()
_REGISTERED: dict[str, FrameworkAdapter] = {}
_ADVERTISED: list[metadata.EntryPoint] | None = None  # read on the first look-up that needs it
_LOADED: set[str] = set()  # entry points loaded (or found missing), by name


def register_framework(adapter: FrameworkAdapter) -> FrameworkAdapter:
    """Register ``adapter`` (an integration does on import). It replaces one of the same name."""
    if not isinstance(adapter, FrameworkAdapter):
        raise TypeError(f"register_framework takes a grogu FrameworkAdapter, got {type(adapter).__name__}")
    with _LOCK:
        _REGISTERED[adapter.name] = adapter
    return adapter


def registered_frameworks() -> dict[str, FrameworkAdapter]:
    """The adapters registered so far, by name."""
    with _LOCK:
        return dict(_REGISTERED)


def _module(obj: Any) -> str:
    return type(obj).__module__ or ""


def _owner(obj: Any) -> FrameworkAdapter | None:
    return next((a for a in registered_frameworks().values() if a.owns(obj)), None)


def _advertised() -> list[metadata.EntryPoint]:
    global _ADVERTISED
    if _ADVERTISED is None:
        found = metadata.entry_points(group=ENTRY_POINT_GROUP)
        _ADVERTISED = sorted({ep.name: ep for ep in found}.values(), key=lambda ep: ep.name)
    return _ADVERTISED


def _is_missing(exc: ModuleNotFoundError, target: str) -> bool:
    """The entry point's own module is not there (an uninstalled package whose metadata stayed)."""
    return exc.name is not None and (target == exc.name or target.startswith(exc.name + "."))


def _load_advertised(module: str) -> None:
    """Load, once each, the advertised adapters whose name is the start of ``module``, and register them."""
    for ep in _advertised():
        if ep.name in _LOADED or not module.startswith(ep.name):
            continue
        try:
            adapter = ep.load()
        except ImportError as exc:
            if not (isinstance(exc, ModuleNotFoundError) and _is_missing(exc, ep.module)):
                raise ImportError(
                    f"the grogu framework adapter {ep.name!r} ({ep.value}) failed to load: {exc}"
                ) from exc
            adapter = None  # not installed: the look-up says which package to install
        if adapter is not None:
            if not isinstance(adapter, FrameworkAdapter):
                raise TypeError(
                    f"the entry point {ep.name!r} ({ep.value}) in {ENTRY_POINT_GROUP!r} is a "
                    f"{type(adapter).__name__}, not a grogu FrameworkAdapter"
                )
            register_framework(adapter)
        _LOADED.add(ep.name)


def adapter_for(obj: Any, what: str = "object") -> FrameworkAdapter | None:
    """The adapter of the framework ``obj`` belongs to; None where it belongs to none that grogu knows.

    An object of a framework in :data:`INTEGRATIONS` whose integration is not installed is an ImportError:
    "a LangChain ``what`` needs langchain-grogu: pip install langchain-grogu".
    """
    found = _owner(obj)
    if found is None:
        _load_advertised(_module(obj))
        found = _owner(obj)
    if found is not None:
        return found
    known = next((v for k, v in INTEGRATIONS.items() if _module(obj).startswith(k)), None)
    if known is not None:
        framework, package = known
        raise ImportError(f"a {framework} {what} needs {package}: pip install {package}")
    return None


__all__ = [
    "FrameworkAdapter",
    "register_framework",
    "registered_frameworks",
    "adapter_for",
    "ENTRY_POINT_GROUP",
    "INTEGRATIONS",
]
