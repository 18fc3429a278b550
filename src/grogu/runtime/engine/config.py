"""The engine's settings: every tuned constant of batching, prefix sharing, drafting and kernels.

:class:`EngineConfig` holds them, validated when it is made (a bad value is a ``ValueError`` naming
the setting, as everywhere in :mod:`grogu.core.checks`). A setting left ``None`` takes its default for the
device the engine runs on (:data:`DEVICE_DEFAULTS`, applied by :meth:`EngineConfig.resolved`): a GPU
affords wider batches and pays less for drafted tokens than a CPU.

An EngineConfig is the one way to configure an engine: ``Engine(config=EngineConfig(...))``. The
Engine's keyword arguments (``max_batch_size=`` ...) are a convenience that builds one
(:func:`engine_config`), not together with ``config=`` (a ``TypeError``: a setting given twice would
leave it unclear which one counts). ``engine.config`` is the configuration in use, every ``None``
resolved; read a setting there (``engine.config.max_batch_size``) and change one by assigning a new
configuration (``engine.config = dataclasses.replace(engine.config, max_batch_size=8)``, validated).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...core.checks import check_choice, check_float, check_int, check_positive_int

#: values of ``cpu_linear`` (which kernels run a CPU model's linear layers: :mod:`.kernels`)
LINEAR_BACKENDS = ("auto", "onednn", "default")

#: the defaults of the device-dependent settings (those an EngineConfig leaves None), per device type
DEVICE_DEFAULTS: dict[str, dict[str, int | bool]] = {
    "cuda": dict(
        max_batch_size=64, max_batch_tokens=65536, group_overhead_tokens=256, prompt_lookup=0, cuda_graphs=True
    ),
    "cpu": dict(
        max_batch_size=32, max_batch_tokens=16384, group_overhead_tokens=32, prompt_lookup=0, cuda_graphs=False
    ),
}


@dataclass(frozen=True)
class EngineConfig:
    """The engine's settings (see the module docstring). ``None``: the default for the device.

    Attributes:
        max_batch_size: most prompts in one forward pass (64 on GPU, 32 on CPU).
        max_batch_tokens: most padded tokens in one forward pass (65,536 on GPU, 16,384 on CPU).
        logits_budget_mb: most memory (MiB) for the logits of one teacher-forced batch.
        min_shared_prefix: fewest prompt tokens a shared prefix must save to be worth encoding once.
        retain_prefix_tokens: most prompt tokens whose KV cache is kept after a batch is encoded for
            decoding, for later calls to continue (a doubtful query's other candidates continue its
            first answer's documents: about 10 % less time on such a query on a CPU). 0 keeps none, the
            default: a continued cache makes a call's numbers depend on earlier calls at float rounding
            (about 1e-6), so the same query could rank a near tie differently on a second run. Models
            whose caches cannot be stacked keep none.
        group_overhead_tokens: what one more prefix group costs (its extra forward calls), counted in
            tokens when a batch is split into groups (256 on GPU, 32 on CPU).
        min_batch_fill: a row shorter than this fraction of its batch's widest row starts a new batch
            (its padding would be waste); in [0, 1].
        prompt_lookup: most tokens drafted per greedy decode step by prompt lookup (0 turns it off, the
            default). Drafts are verified, so answers are unchanged. They measured no faster: on a CPU
            every extra token fed costs compute; on an H200 with CUDA graphs, 4 drafted tokens made a
            query of 10 documents 1.02 s against 0.73 s (7B shape) and 0.55 s against 0.53 s (SmolLM2),
            as a batch decodes until its longest answer ends whatever its rows accept.
        prompt_lookup_ngram: longest n-gram matched to find a draft.
        prompt_lookup_min_ngram: shortest n-gram matched (1-gram matches draft mostly noise).
        entropy_chunk_rows: logit rows turned into float32 entropies at a time (bounds the float32 copy).
        cuda_graphs: on a CUDA device, decode steps are captured as CUDA graphs and replayed: a
            step then costs the GPU's time rather than the host's launches of a forward pass (True on
            GPU; meaningless on a CPU). Graphs are kept for later batches, one per bucket of rows, over
            buffers the engine keeps (:mod:`grogu.runtime.engine.graphs`; ``engine.decoder.release_graphs()``
            lets them go). A capture that fails is counted and logged; its batch decodes eagerly and a
            later batch captures again (``engine.graph_stats()`` counts it all).
        cpu_linear: kernels of the linear layers on a CPU (:mod:`grogu.runtime.engine.kernels`): 'auto', 'onednn'
            or 'default'; ignored on a GPU. Read when the engine is built.
        cpu_linear_pack_limit_mb: oneDNN weights are re-laid-out once (a copy beside the model's) when
            the linear weights take at most this many MiB. Read when the engine is built.
    """

    max_batch_size: int | None = None
    max_batch_tokens: int | None = None
    logits_budget_mb: int = 256
    min_shared_prefix: int = 8
    retain_prefix_tokens: int = 0
    group_overhead_tokens: int | None = None
    min_batch_fill: float = 0.5
    prompt_lookup: int | None = None
    prompt_lookup_ngram: int = 3
    prompt_lookup_min_ngram: int = 2
    entropy_chunk_rows: int = 64
    cuda_graphs: bool | None = None
    cpu_linear: str = "auto"
    cpu_linear_pack_limit_mb: int = 2048

    def __post_init__(self) -> None:
        for name, value in _validated(self).items():  # canonical values (an int, a float)
            object.__setattr__(self, name, value)

    def resolved(self, device: Any) -> "EngineConfig":
        """This configuration with every ``None`` setting replaced by its default on ``device`` (a
        ``torch.device`` or its name; a CUDA device gets the GPU defaults, any other the CPU ones)."""
        kind = "cuda" if str(getattr(device, "type", device)).startswith("cuda") else "cpu"
        unset = {k: v for k, v in DEVICE_DEFAULTS[kind].items() if getattr(self, k) is None}
        return dataclasses.replace(self, **unset) if unset else self


def _validated(c: EngineConfig) -> dict[str, Any]:
    """The settings in canonical form; a ValueError naming the first one out of range."""
    out: dict[str, Any] = {}
    for name in ("max_batch_size", "max_batch_tokens"):
        if getattr(c, name) is not None:
            out[name] = check_positive_int(name, getattr(c, name))
    out["logits_budget_mb"] = check_positive_int("logits_budget_mb", c.logits_budget_mb)
    out["min_shared_prefix"] = check_int("min_shared_prefix", c.min_shared_prefix, minimum=0)
    out["retain_prefix_tokens"] = check_int("retain_prefix_tokens", c.retain_prefix_tokens, minimum=0)
    if c.prompt_lookup is not None:
        out["prompt_lookup"] = check_int("prompt_lookup", c.prompt_lookup, minimum=0)
    out["prompt_lookup_min_ngram"] = check_int("prompt_lookup_min_ngram", c.prompt_lookup_min_ngram, minimum=1)
    out["prompt_lookup_ngram"] = check_int(
        "prompt_lookup_ngram", c.prompt_lookup_ngram, minimum=max(2, out["prompt_lookup_min_ngram"])
    )
    out["cpu_linear"] = check_choice("cpu_linear", c.cpu_linear, LINEAR_BACKENDS)
    if c.group_overhead_tokens is not None:
        out["group_overhead_tokens"] = check_int("group_overhead_tokens", c.group_overhead_tokens, minimum=0)
    out["min_batch_fill"] = check_float("min_batch_fill", c.min_batch_fill, minimum=0.0, maximum=1.0)
    out["entropy_chunk_rows"] = check_positive_int("entropy_chunk_rows", c.entropy_chunk_rows)
    if c.cuda_graphs is not None:
        if not isinstance(c.cuda_graphs, bool):
            raise ValueError(f"cuda_graphs must be True, False or None, got {c.cuda_graphs!r}")
        out["cuda_graphs"] = c.cuda_graphs
    out["cpu_linear_pack_limit_mb"] = check_int("cpu_linear_pack_limit_mb", c.cpu_linear_pack_limit_mb, minimum=0)
    return out


class _Default:
    """The default of an Engine keyword argument that belongs to :class:`EngineConfig`: not given."""

    def __repr__(self) -> str:
        return "<EngineConfig default>"


#: the default of the Engine's setting arguments: ``Engine`` tells a setting given from one left out
NOT_GIVEN: Any = _Default()


def engine_config(config: EngineConfig | None, **settings: Any) -> EngineConfig:
    """The configuration of an Engine built with ``config=`` and setting keyword arguments (those not
    :data:`NOT_GIVEN`): one or the other, a TypeError for both."""
    given = {k: v for k, v in settings.items() if v is not NOT_GIVEN}
    if config is None:
        return EngineConfig(**given)
    if not isinstance(config, EngineConfig):
        raise TypeError(f"config must be an EngineConfig, got {type(config).__name__}")
    if given:
        raise TypeError(
            f"pass the engine's settings either in config= or as keyword arguments, not both "
            f"(got config= and {', '.join(f'{k}=' for k in given)})"
        )
    return config


#: the names of the settings, which an engine holds in ``engine.config`` only
_SETTING_NAMES = frozenset(f.name for f in dataclasses.fields(EngineConfig))


class Configured:
    """Engine part: ``engine.config``, the settings in use (resolved for ``engine.device``); assigning
    it takes a validated :class:`EngineConfig`. A setting is not an attribute of the engine: reading one
    there (``engine.max_batch_size``) is an AttributeError, and so is assigning one (which would
    otherwise change nothing)."""

    device: Any
    _config: EngineConfig

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SETTING_NAMES:
            raise AttributeError(
                f"{name} is a setting of {type(self).__name__}.config: "
                f"assign config = dataclasses.replace(config, {name}=...)"
            )
        super().__setattr__(name, value)

    @property
    def config(self) -> EngineConfig:
        return self._config

    @config.setter
    def config(self, config: EngineConfig) -> None:
        if not isinstance(config, EngineConfig):
            raise TypeError(f"config must be an EngineConfig, got {type(config).__name__}")
        self._config = config.resolved(self.device)

    @property
    def logits_budget_bytes(self) -> int:
        """``config.logits_budget_mb`` in bytes."""
        return self.config.logits_budget_mb * 2**20


def configure_engine(engine: Any, *, batch_size: int | None = None, config: EngineConfig | None = None) -> None:
    """Apply an integration's batch/memory settings to ``engine`` (an :class:`~grogu.runtime.engine.Engine`):
    ``batch_size`` sets ``config.max_batch_size`` (most prompts in one forward pass), ``config`` replaces the
    whole configuration (``max_batch_tokens``, ``logits_budget_mb``: the memory a forward pass may
    take). One or the other (a TypeError for both, as for the Engine); neither leaves the engine as it
    is. The engine is the process-wide one of its model (:func:`grogu.get_engine`), so the settings
    hold for every component that scores with that model in this process."""
    if batch_size is not None and config is not None:
        raise TypeError("pass batch_size or engine_config (which holds max_batch_size), not both")
    if batch_size is not None:
        engine.config = dataclasses.replace(engine.config, max_batch_size=check_positive_int("batch_size", batch_size))
    elif config is not None:
        if not isinstance(config, EngineConfig):
            raise TypeError(f"engine_config must be a grogu.EngineConfig, got {type(config).__name__}")
        engine.config = config
