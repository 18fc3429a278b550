"""A settings file written by ``grogu tune``: rerank settings fitted to one LLM and one QA prompt.

The file is JSON. It holds the :class:`ModeSettings` fields, and what they were fitted to: the model's
name (:func:`grogu.runtime.models.public_model_name`: no install path) and fingerprint
(:func:`model_fingerprint`), the dtype and device it ran in, a hash of the prompt (:func:`prompt_hash`),
``top_n`` and the answer budget. It also holds the
evidence: how many questions, the wins and losses on the cross-validation's held-out folds, the sign
test's p, and the decision: ``"tuned"`` (a setting that beat the shipped default), ``"default"`` (the
shipped default stays) or ``"keep"`` (the retriever's order).

Every front end takes the file where it takes settings (``settings="grogu-tuned.json"``):
``UtilityScorer.rerank``, ``GroguRerank``, ``GroguCompressor``, ``GroguRetriever``, ``RemoteScorer`` and
``grogu rerank --settings``. :func:`load_tuned` reads and checks it before any model loads. Used with
another model, prompt, ``top_n`` or answer budget than the ones it was fitted to, it warns
(:meth:`TunedSettings.check`). :meth:`TunedSettings.save` replaces a file whole: a write that fails leaves
the old file as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..core.prompts import PromptTemplate
from ..runtime.models import public_model_name
from .settings import ModeSettings

#: the ``format`` value of a tuned settings file
FORMAT = "grogu-tuned-settings"
#: the file format's version this code reads and writes
VERSION = 1
#: what a tuned file decides: the fitted settings, or the retriever's order kept
DECISIONS = ("tuned", "default", "keep")


class TunedSettingsWarning(UserWarning):
    """Tuned settings used with another model, prompt, top_n or answer budget than they were fitted to."""


def prompt_hash(template: PromptTemplate) -> str:
    """A short hash of everything a prompt template renders (``sha256:`` and 16 hex digits): two
    templates that give the LLM the same text have the same hash."""
    parts = [
        template.grounded,
        template.ungrounded,
        template.document,
        template.titled_document,
        template.separator,
        template.system,
        template.plain_suffix,
        template.chat,
    ]
    digest = hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()
    return f"sha256:{digest[:16]}"


#: values read from each weight tensor for the fingerprint's digest
DIGEST_VALUES = 64
_DIGESTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _weights_digest(model: Any) -> str | None:
    """12 hex digits of a hash of the weights: every tensor's shape and :data:`DIGEST_VALUES` values at an
    even stride, each rounded to bfloat16 (so float32 and bfloat16 copies of the same weights agree).
    None when the weights cannot be read (on the meta device)."""
    try:
        if model in _DIGESTS:
            return _DIGESTS[model]
    except TypeError:  # not weakly referable: computed each time
        pass
    import torch

    h, samples = hashlib.sha256(), []
    try:
        with torch.no_grad():
            for p in model.parameters():
                flat = p.detach().reshape(-1)
                samples.append(flat[:: max(1, flat.numel() // DIGEST_VALUES)][:DIGEST_VALUES].float())
                h.update(repr(tuple(p.shape)).encode())
            values = torch.cat(samples).to(torch.bfloat16).view(torch.int16).cpu()
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return None
    h.update(values.numpy().tobytes())
    out = h.hexdigest()[:12]
    try:
        _DIGESTS[model] = out
    except TypeError:
        pass
    return out


def model_fingerprint(target: Any) -> str | None:
    """What identifies a target's local model: its shape (type, layers, width, vocabulary), then ``+w:``
    and a digest of its weights (:func:`_weights_digest`), e.g. ``llama-30x576-v49152+w:0123456789ab``.
    None without a local model (a server's model).

    The same weights get the same fingerprint however they were loaded (an alias, a path, a framework's
    LLM) and in float32 or bfloat16. A base model and its instruct variant, or a fine-tune, get different
    ones. Float16 rounds some values apart from bfloat16, so it may give another digest. The digest reads a
    few values of each tensor once per model object: cheap, but weights changed in place are not seen."""
    model = getattr(target, "model", None)
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = getattr(config, "get_text_config", lambda: config)()
    parts = [getattr(text, k, None) for k in ("model_type", "num_hidden_layers", "hidden_size", "vocab_size")]
    if None in parts:
        return None
    shape = "{}-{}x{}-v{}".format(*parts)
    digest = _weights_digest(model) if hasattr(model, "parameters") else None
    return shape if digest is None else f"{shape}+w:{digest}"


def same_model(a: str, b: str) -> bool:
    """Whether two fingerprints name the same model. One without a weights digest (an older file's) is
    compared by shape only."""
    if "+w:" in a and "+w:" in b:
        return a == b
    return a.partition("+w:")[0] == b.partition("+w:")[0]


def target_dtype(target: Any) -> str | None:
    """The dtype a target's local model computes in (``"float32"``, ``"bfloat16"`` ...), or None."""
    dtype = getattr(target, "dtype", None)
    return None if dtype is None else str(dtype).removeprefix("torch.")


def target_device(target: Any) -> str | None:
    """The kind of device a target's local model runs on (``"cpu"``, ``"cuda"`` ...), or None."""
    device = getattr(target, "device", None)
    return None if device is None else str(getattr(device, "type", device)).split(":")[0]


@dataclass(frozen=True)
class TunedSettings:
    """The content of a tuned settings file (see the module docstring).

    settings: the rerank settings to use. model: the model's name it was fitted on (no install path:
    :func:`grogu.runtime.models.public_model_name`). prompt_hash: the hash of its QA prompt
    (:func:`prompt_hash`). top_n: documents kept. max_new_tokens: the answer budget. decision:
    ``"tuned"``, ``"default"`` or ``"keep"``. evidence: the tuning's figures (n, folds, wins, losses, p,
    cost), kept as written. fingerprint: :func:`model_fingerprint`. dtype, device: what the model ran in
    while tuned (recorded, not checked: the settings carry over)."""

    settings: ModeSettings
    model: str
    prompt_hash: str
    top_n: int | None
    max_new_tokens: int | None = None
    decision: str = "tuned"
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: str | None = None
    dtype: str | None = None
    device: str | None = None
    path: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The file's JSON content."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "decision": self.decision,
            "model": self.model,
            "model_fingerprint": self.fingerprint,
            "dtype": self.dtype,
            "device": self.device,
            "prompt_hash": self.prompt_hash,
            "top_n": self.top_n,
            "max_new_tokens": self.max_new_tokens,
            "settings": self.settings.as_dict(),
            "evidence": dict(self.evidence),
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the file whole: to a temporary file in the same folder, then renamed over ``path``
        (``os.replace``). A write that fails leaves the old file as it was, and no temporary file."""
        path = os.fspath(path)
        text = json.dumps(self.as_dict(), indent=2, ensure_ascii=False) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=".settings-", suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def mismatches(
        self,
        model: str | None = None,
        template: PromptTemplate | None = None,
        top_n: Any = "unknown",
        fingerprint: str | None = None,
        max_new_tokens: int | None = None,
    ) -> list[str]:
        """What differs from the set-up these settings were fitted to (an empty list: nothing). The model is
        compared by its fingerprint (:func:`model_fingerprint`, :func:`same_model`) where both sides have
        one, else by its public name. ``max_new_tokens``: the caller's answer budget (None: not known)."""
        out = []
        if fingerprint is not None and self.fingerprint is not None:
            if not same_model(fingerprint, self.fingerprint):
                out.append(f"model {model!r}, a {fingerprint} (tuned on {self.model!r}, a {self.fingerprint})")
        elif model is not None and public_model_name(model) != public_model_name(self.model):
            out.append(f"model {model!r} (tuned on {self.model!r})")
        if template is not None and prompt_hash(template) != self.prompt_hash:
            out.append(f"a QA prompt with hash {prompt_hash(template)} (tuned with {self.prompt_hash})")
        if top_n != "unknown" and top_n != self.top_n:
            out.append(f"top_n={top_n} (tuned with top_n={self.top_n})")
        if max_new_tokens is not None and self.max_new_tokens is not None and max_new_tokens != self.max_new_tokens:
            out.append(f"max_new_tokens={max_new_tokens} (tuned with max_new_tokens={self.max_new_tokens})")
        return out

    def check(
        self,
        model: str | None = None,
        template: PromptTemplate | None = None,
        top_n: Any = "unknown",
        fingerprint: str | None = None,
        max_new_tokens: int | None = None,
    ) -> None:
        """Warn (:class:`TunedSettingsWarning`) when used with another model, prompt, top_n or answer budget."""
        found = self.mismatches(model, template, top_n, fingerprint, max_new_tokens)
        if found:
            where = f" ({self.path})" if self.path else ""
            warnings.warn(
                f"tuned settings{where} used with {'; '.join(found)}: they were fitted to another set-up, "
                "so their measured gain may not hold; run grogu tune again for this one",
                TunedSettingsWarning,
                stacklevel=3,
            )


def from_dict(data: Any, where: str = "the tuned settings") -> TunedSettings:
    """A :class:`TunedSettings` from a file's parsed JSON; a ValueError naming what is wrong."""
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise ValueError(f'{where} is not a grogu tune settings file (no "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise ValueError(f"{where} has version {data.get('version')!r}; this grogu reads version {VERSION}")
    missing = [k for k in ("decision", "model", "prompt_hash", "settings", "top_n") if k not in data]
    if missing:
        raise ValueError(f"{where} lacks {missing}")
    if data["decision"] not in DECISIONS:
        raise ValueError(f"{where}: decision must be one of {DECISIONS}, got {data['decision']!r}")
    if not isinstance(data["model"], str) or not isinstance(data["prompt_hash"], str):
        raise ValueError(f"{where}: model and prompt_hash must be strings")
    top_n, budget = data["top_n"], data.get("max_new_tokens")
    for name, value in (("top_n", top_n), ("max_new_tokens", budget)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{where}: {name} must be a positive integer or null, got {value!r}")
    if not isinstance(data["settings"], Mapping):
        raise ValueError(f"{where}: settings must be an object of grogu.ModeSettings fields")
    try:
        settings = ModeSettings.build(dict(data["settings"]))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None
    evidence = data.get("evidence", {})
    if not isinstance(evidence, Mapping):
        raise ValueError(f"{where}: evidence must be an object")
    for name in ("model_fingerprint", "dtype", "device"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise ValueError(f"{where}: {name} must be a string or null")
    return TunedSettings(
        settings,
        data["model"],
        data["prompt_hash"],
        top_n,
        budget,
        data["decision"],
        evidence,
        data.get("model_fingerprint"),
        data.get("dtype"),
        data.get("device"),
    )


def load_tuned(path: str | os.PathLike) -> TunedSettings:
    """Read and check a tuned settings file (a clear ValueError for a missing, malformed or foreign one)."""
    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ValueError(
            f"no tuned settings file at {where!r} (grogu tune --out DIR writes DIR/settings.json)"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{where} is not JSON: {e}") from None
    tuned = from_dict(data, where)
    return TunedSettings(**{**vars(tuned), "path": where})


_LOADED: dict[tuple[str, int, int], TunedSettings] = {}


def tuned_of(settings: Any) -> TunedSettings | None:
    """``settings`` as tuned settings when it is a file path or :class:`TunedSettings`, else None. A file
    is read once while it is unchanged (its size and modification time)."""
    if isinstance(settings, TunedSettings):
        return settings
    if not isinstance(settings, (str, os.PathLike)):
        return None
    path = os.fspath(settings)
    try:
        st = os.stat(path)
    except OSError:
        return load_tuned(path)  # the clear error of a missing file
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    if key not in _LOADED:
        _LOADED[key] = load_tuned(path)
    return _LOADED[key]


def tuned_source(settings: Any) -> TunedSettings | None:
    """The :class:`TunedSettings` whose file ``settings`` were built from (:func:`build_settings`), or None."""
    return getattr(settings, "_tuned", None)


def build_settings(base: Any = None, **changes: Any) -> ModeSettings:
    """:meth:`ModeSettings.build`, where ``base`` may also be a ``grogu tune`` file (its path, or
    :class:`TunedSettings`). Settings from a file remember it (:func:`tuned_source`), so a scorer can warn
    when used with another model or prompt than the file was fitted to. Every front end builds its
    settings here: ``settings="tuned/settings.json"`` works wherever settings are taken."""
    tuned = tuned_of(base) or tuned_source(base)
    out = ModeSettings.build(tuned.settings if tuned is not None else base, **changes)
    if tuned is not None:
        object.__setattr__(out, "_tuned", tuned)  # not a field: equality, hashing and as_dict ignore it
    return out


def settings_from_arguments(arguments: Mapping[str, Any]) -> ModeSettings:
    """A command's settings: its ``settings`` file (None: the defaults) with the settings it names."""
    named = {name: arguments[name] for name in ModeSettings.names() if name in arguments}
    return build_settings(arguments.get("settings"), **named)


def call_settings(settings: Any, overrides: Mapping[str, Any], scorer: Any, top_n: Any) -> ModeSettings:
    """A rerank call's settings (``settings`` with ``overrides``; a ``grogu tune`` file too). Settings from a
    file warn when it was fitted to another model, prompt, top_n or answer budget than ``scorer``'s and the
    call's. Every front end reranks through a scorer, so each one passes its answer budget here."""
    out = build_settings(settings, **overrides)
    tuned = tuned_source(out)
    if tuned is not None:
        fingerprint = model_fingerprint(getattr(scorer, "target", None))
        budget = getattr(scorer, "max_new_tokens", None)
        tuned.check(scorer.model_name, scorer.template, top_n, fingerprint, budget)
    return out


__all__ = [
    "build_settings",
    "settings_from_arguments",
    "tuned_source",
    "call_settings",
    "TunedSettings",
    "TunedSettingsWarning",
    "prompt_hash",
    "model_fingerprint",
    "same_model",
    "target_dtype",
    "target_device",
    "load_tuned",
    "tuned_of",
    "from_dict",
    "FORMAT",
    "VERSION",
]
