"""What a server says about itself: its models (``/v1/models``), its context window, and so the API grogu
speaks to it (:meth:`ServedModels._resolve_api`, for ``api="auto"``)."""

from __future__ import annotations

from typing import Any

from ...core.target import ServerCapabilityError
from .apis import CHAT_APIS, check_chat_settings, choose_api, server_backend
from .http import ServerError, run
from .llama_server import auto_tokenizer
from .ollama import MIN_VERSION, parse_version


class ServedModels:
    """The target's mixin: the listing requests (the attributes used are the target's)."""

    def served_models(self) -> list[dict[str, Any]]:
        """The server's ``/v1/models`` entries."""
        if self._models is None:
            data = run(self.http.get("/models"))
            self._models = list(data.get("data", [])) if isinstance(data, dict) else []
        return self._models

    def _only_model(self) -> str:
        ids = [m.get("id") for m in self.served_models()]
        if len(ids) != 1:
            raise ValueError(f"the server at {self.base_url} serves {ids}; pass model= to choose one")
        return ids[0]

    def _context_window(self) -> int:
        try:
            entries = [] if self.hosted_openai else self.served_models()
        except ServerError:
            entries = []
        for m in entries:
            if m.get("id") == self.model_name and isinstance(m.get("max_model_len"), int):
                return m["max_model_len"]
        if self._served_meta("n_ctx"):  # llama-server's context per slot
            return self._served_meta("n_ctx")
        tok_max = getattr(self.tokenizer, "model_max_length", None)
        return int(tok_max) if isinstance(tok_max, int) and 0 < tok_max < 10**7 else 2048

    def _ollama_version(self) -> tuple[int, ...] | None:
        """Ollama's version from ``/api/version`` at the server root, or None when the server is not Ollama."""
        try:
            data = run(self.http.get("", url=self.base_url[: -len("/v1")] + "/api/version"))
        except ServerError:
            return None
        return parse_version(data.get("version")) if isinstance(data, dict) else None

    def _resolve_api(self, api: str, tokenizer: Any, context_window: Any, stop_token_ids: Any) -> tuple[str, Any]:
        """(api, tokenizer): the model checked against the listing, ``self.backend`` set, and ``"auto"``
        resolved (:func:`~grogu.runtime.inference_server.apis.choose_api`; ``"ollama"`` when ``/api/version``
        answers as Ollama does)."""
        if self.hosted_openai:  # no listing request (an unknown model is an error on first use)
            if api == "ollama":
                raise ValueError(f"api='ollama' needs an Ollama server, not the hosted OpenAI API at {self.base_url}")
            return api, tokenizer
        entries = self.served_models()
        served = [m.get("id") for m in entries]
        if self.model_name not in served:  # some servers (llama-cpp-python) answer for any name
            raise ValueError(
                f"the LLM server at {self.base_url} does not serve model {self.model_name!r}; it serves {served}"
            )
        owners = [str(m.get("owned_by", "")) for m in entries]
        self.backend = server_backend(owners)
        if api in ("auto", "ollama") and self.backend is None:
            version = self._ollama_version()
            if version is not None:
                self.backend = "ollama"
                if version < MIN_VERSION:
                    raise ServerCapabilityError(
                        f"the Ollama server at {self.base_url} is version {'.'.join(map(str, version))}, whose "
                        "/api/chat returns no log-probabilities; grogu needs 0.12.11 or later"
                    )
        if api == "ollama" and self.backend != "ollama":
            raise ValueError(f"api='ollama' needs an Ollama server; {self.base_url} did not answer /api/version as one")
        if api == "auto":
            api = "ollama" if self.backend == "ollama" else choose_api(self.base_url, owners)
            if api in ("llama-server", "sglang") and tokenizer is None:  # the name may name no tokenizer
                tokenizer = auto_tokenizer(self.model_name, api)
                api = api if tokenizer is not None else "chat"
            if api in CHAT_APIS:
                check_chat_settings(tokenizer, context_window, stop_token_ids)
        return api, tokenizer


__all__ = ["ServedModels"]
