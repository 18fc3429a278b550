"""Grounded and ungrounded prompts, rendered through the tokenizer's chat template.

A grounded prompt holds the query and one document or an ordered list of documents (with titles when
given); the ungrounded prompt holds the query alone. Templates are plain ``str.format`` strings a user
can override. Documents that do not fit the model's context window (minus the answer budget) are
truncated, longest first, with a :class:`TruncationWarning` that says how many were cut.

A target that applies its own chat template (``ServerTarget(api="chat")``, which sends chat messages to
a chat API) takes :class:`ChatPrompt` messages instead of token ids: :meth:`PromptBuilder.for_target`
renders the same template text as messages for it. Without a tokenizer there is nothing to count tokens
with, so documents are not truncated there (the server refuses a prompt that does not fit).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


class TruncationWarning(UserWarning):
    """Documents were cut to fit the model's context window."""


@dataclass(frozen=True)
class Document:
    """A retrieved document: its text, an optional title, and free metadata carried through."""

    text: str
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)


def check_text(name: str, value: str) -> str:
    """A str that encodes as UTF-8: a lone surrogate (e.g. a JSON "\\ud800" escape) is a ValueError
    naming its position, instead of a tokenizer's error."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} is not valid UTF-8 text: a lone surrogate {value[exc.start]!a} at character "
            f"{exc.start}; send text without unpaired surrogates"
        ) from None
    return value


def _utf8(doc: Document, where: str) -> Document:
    """The document, once its text and title are known to encode as UTF-8 (no lone surrogate)."""
    check_text(where, doc.text)
    if doc.title is not None:
        check_text(f"{where}'s title", doc.title)
    return doc


def as_document(doc: Any, position: int | None = None) -> Document:
    """Coerce a str, a :class:`Document` or a mapping with ``text`` (or ``page_content``) and optional
    ``title`` into a :class:`Document`. Anything else is a TypeError naming the position."""
    where = f"document {position}" if position is not None else "document"
    if isinstance(doc, Document):
        return _utf8(doc, where)
    if isinstance(doc, str):
        return _utf8(Document(doc), where)
    if isinstance(doc, Mapping):
        text = doc.get("text", doc.get("page_content"))
        if not isinstance(text, str):
            raise TypeError(f"{where} is a mapping without a string 'text' (or 'page_content') field")
        title = doc.get("title")
        if title is not None and not isinstance(title, str):
            raise TypeError(f"{where} has a non-string title ({type(title).__name__})")
        meta = {k: v for k, v in doc.items() if k not in ("text", "page_content", "title")}
        return _utf8(Document(text, title, meta), where)
    raise TypeError(f"{where} must be a str, a grogu.Document or a mapping with 'text', got {type(doc).__name__}")


@dataclass(frozen=True)
class PromptTemplate:
    """User-overridable prompt text. ``{context}`` receives the rendered documents joined by
    ``separator``; each document is rendered with ``document`` (or ``titled_document`` when it has a
    title). ``system`` (optional) becomes a system message when the chat template has one."""

    grounded: str = "Answer the question based on the given document.\n\n{context}\n\nQuestion: {query}"
    ungrounded: str = "Answer the question.\n\nQuestion: {query}"
    document: str = "Document: {text}"
    titled_document: str = "Document ({title}): {text}"
    separator: str = "\n\n"
    system: str | None = None
    plain_suffix: str = "\nAnswer:"  # appended when the tokenizer has no chat template
    chat: bool = True  # False: the text as it is, without the chat template (a completion LLM's prompt)

    def render_context(self, docs: Sequence[Document]) -> str:
        return self.separator.join(
            (self.titled_document if d.title else self.document).format(text=d.text, title=d.title) for d in docs
        )


def template_from_messages(
    messages: Sequence[tuple[str, str]],
    *,
    context: str,
    query: str,
    document: str = "{text}",
    separator: str = "\n\n",
    chat: bool = True,
) -> PromptTemplate:
    """A :class:`PromptTemplate` that renders exactly a pipeline's own chat QA prompt.

    ``messages`` are the pipeline's (role, content) messages with the two placeholder strings
    ``context`` and ``query`` standing where the documents and the question go: an optional system
    message, then one user message holding both (LlamaIndex's ``text_qa_template``, a LangChain
    ``ChatPromptTemplate``). Documents are rendered with ``document`` and joined with ``separator``
    (LlamaIndex's compact synthesizer: each node's LLM text, blank-line separated). The ungrounded
    prompt is the same user message with no documents: what the LLM reads when nothing is retrieved.
    ``chat=False``: one message whose text the LLM reads as it is (a completion model's prompt).
    """
    if not messages:
        raise ValueError("the pipeline prompt has no messages")
    roles = [role for role, _ in messages]
    system = None
    if roles[0] == "system":
        system, messages = messages[0][1], messages[1:]
    if [role for role, _ in messages] != ["user"]:
        raise ValueError(
            f"grogu can score a QA prompt of an optional system message and one user message; got roles {roles}"
        )
    user = messages[0][1]
    for name, mark in (("context", context), ("query", query)):
        if user.count(mark) != 1:
            raise ValueError(f"the pipeline prompt's user message must hold the {name} exactly once")
    if system is not None and (context in system or query in system):
        raise ValueError(
            "grogu cannot score a pipeline prompt that puts the context or the query in the system message"
        )
    escaped = user.replace("{", "{{").replace("}", "}}")
    grounded = escaped.replace(context, "{context}").replace(query, "{query}")
    return PromptTemplate(
        grounded=grounded,
        ungrounded=grounded.replace("{context}", ""),
        document=document,
        titled_document=document,
        separator=separator,
        system=system,
        plain_suffix="",
        chat=chat,
    )


#: stand-ins for the slots while a prompt's text is escaped (never in real text)
_MARKS = ("\x00context\x00", "\x00question\x00")


def template_from_text(user: str, system: str | None = None) -> PromptTemplate:
    """A grogu template from a QA prompt's text: ``user`` holds ``{context}`` and ``{question}`` once each
    (other braces are literal); ``system`` (optional) is the system message."""
    if not isinstance(user, str) or (system is not None and not isinstance(system, str)):
        raise TypeError("a QA prompt's text must be a string (and its system part a string or None)")
    for key in ("{context}", "{question}"):
        if user.count(key) != 1:
            raise ValueError(f"the QA prompt must hold {key} exactly once (it holds it {user.count(key)} times)")
    text = user.replace("{context}", _MARKS[0]).replace("{question}", _MARKS[1])
    messages = ([("system", system)] if system else []) + [("user", text)]
    return template_from_messages(messages, context=_MARKS[0], query=_MARKS[1])


def read_prompt_file(path: Any) -> PromptTemplate:
    """A QA prompt from a file: a ``.json`` object ``{"system": ..., "user": ...}`` (system optional), or
    any other file's whole text as the user message. ``{context}`` and ``{question}`` mark the slots."""
    import json
    import os

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no prompt file at {path!r}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not path.endswith(".json"):
        return template_from_text(text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON: {e}") from None
    if not isinstance(data, dict) or "user" not in data or set(data) - {"system", "user"}:
        raise ValueError(f'{path} must be an object {{"system": ..., "user": ...}} (system optional)')
    return template_from_text(data["user"], data.get("system"))


#: Short-answer prompting (``UtilityScorer(answer_style="short")``): small models otherwise answer with a
#: sentence or two copied from whatever passage they get, and copying is confident whether or not the
#: passage helps. Asking for a few words keeps the scored answer on the tokens that answer the question.
SHORT_ANSWER_TEMPLATE = PromptTemplate(
    grounded="Answer the question based on the given document. Reply with the answer only, in a few words.\n\n"
    "{context}\n\nQuestion: {query}",
    ungrounded="Answer the question. Reply with the answer only, in a few words.\n\nQuestion: {query}",
)


#: The QA prompt the context mode's gate was tuned on: LlamaIndex's default chat QA prompt
#: (llama_index.core.prompts.chat_prompts.CHAT_TEXT_QA_PROMPT, MIT), as its synthesizer renders it. The
#: LangChain integration scores with it when the chain's own prompt (``qa_prompt``) is not given.
RAG_QA_TEMPLATE = template_from_messages(
    [
        (
            "system",
            "You are an expert Q&A system that is trusted around the world.\nAlways answer the query using the "
            "provided context information, and not prior knowledge.\nSome rules to follow:\n1. Never directly "
            "reference the given context in your answer.\n2. Avoid statements like 'Based on the context, ...' or "
            "'The context information ...' or anything along those lines.",
        ),
        (
            "user",
            "Context information is below.\n---------------------\n\x00c\x00\n---------------------\nGiven the "
            "context information and not prior knowledge, answer the query.\nQuery: \x00q\x00\nAnswer: ",
        ),
    ],
    context="\x00c\x00",
    query="\x00q\x00",
)


def chat_messages(user_text: str, system: str | None = None) -> list[dict[str, str]]:
    """The chat messages of a prompt: ``system`` (when given) and one user message."""
    messages = [{"role": "user", "content": user_text}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return messages


@dataclass(frozen=True)
class ChatPrompt:
    """A prompt as chat messages (an optional system message and one user message) for a target that
    applies its own chat template, such as ``ServerTarget(api="chat")``."""

    user: str
    system: str | None = None

    def messages(self) -> list[dict[str, str]]:
        return chat_messages(self.user, self.system)


def chat_ids(
    tokenizer: Any, user_text: str, *, plain_suffix: str, system: str | None = None, chat: bool = True
) -> list[int]:
    """Token ids of ``user_text`` as the user turn of the tokenizer's chat template (after ``system``,
    when given), ready for the assistant's reply; without a chat template (or with ``chat=False``),
    the plain text followed by ``plain_suffix``, with the tokenizer's special tokens. The one place
    grogu renders a chat prompt to token ids: the scoring prompts, ACU and the rewrite candidates use
    it (:class:`ChatPrompt` holds the same messages for a target that renders them itself)."""
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            chat_messages(user_text, system), add_generation_prompt=True, tokenize=False
        )
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(user_text + plain_suffix, add_special_tokens=True)


class PromptBuilder:
    """Renders prompts to token ids for one tokenizer and context window.

    ``max_context_tokens`` is the model's window; ``max_new_tokens`` is kept free for the answer.
    ``messages=True``: prompts are :class:`ChatPrompt` messages for a target that applies its own chat
    template (the template's text, unchanged); ``tokenizer`` may then be None, and documents are then
    not cut to the window.
    """

    def __init__(
        self,
        tokenizer: Any,
        max_context_tokens: int | None,
        max_new_tokens: int,
        template: PromptTemplate | None = None,
        *,
        messages: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.template = template or PromptTemplate()
        self.max_context_tokens = max_context_tokens
        self.max_new_tokens = max_new_tokens
        self.messages = bool(messages)
        if self.messages and not self.template.chat:
            raise ValueError(
                "this target takes chat messages (it applies its own chat template); a template "
                "with chat=False (a completion LLM's plain prompt) cannot be sent as messages: use the "
                "pipeline's chat LLM (LangChain ChatOpenAI, LlamaIndex is_chat_model=True) or a "
                "template with chat=True"
            )
        if not self.messages and tokenizer is None:
            raise ValueError("rendering prompts to token ids needs the model's tokenizer")
        self.use_chat = self.template.chat and bool(getattr(tokenizer, "chat_template", None))

    @classmethod
    def for_target(cls, engine: Any, max_new_tokens: int, template: PromptTemplate | None = None) -> "PromptBuilder":
        """The builder for a target LLM: token ids, or :class:`ChatPrompt` messages when the target says
        it takes them (``engine.takes_messages``)."""
        return cls(
            engine.tokenizer,
            engine.max_context_tokens,
            max_new_tokens,
            template,
            messages=engine.takes_messages,
        )

    # -- text -> prompt
    def _ids(self, user_text: str) -> list[int]:
        return chat_ids(
            self.tokenizer,
            user_text,
            plain_suffix=self.template.plain_suffix,
            system=self.template.system,
            chat=self.use_chat or self.messages,
        )

    def _wrap(self, user_text: str) -> Any:
        if self.messages:
            return ChatPrompt(user_text, self.template.system or None)
        return self._ids(user_text)

    @property
    def _counts(self) -> bool:
        """Whether prompt lengths can be counted (and documents cut to the window)."""
        return self.tokenizer is not None and self.max_context_tokens is not None

    def ungrounded_ids(self, query: str) -> Any:
        """The ungrounded prompt: token ids (a :class:`ChatPrompt` with ``messages=True``)."""
        text = self.template.ungrounded.format(query=query)
        prompt = self._wrap(text)
        if self._counts:
            n = len(prompt if isinstance(prompt, list) else self._ids(text))
            if n + self.max_new_tokens > self.max_context_tokens:
                raise ValueError(
                    f"the query alone takes {n} tokens; with {self.max_new_tokens} answer tokens "
                    f"it does not fit the {self.max_context_tokens}-token context window"
                )
        return prompt

    def grounded_ids(self, query: str, docs: Sequence[Document]) -> Any:
        """The grounded prompt: token ids (a :class:`ChatPrompt` with ``messages=True``); documents are
        truncated (with a warning) to fit."""
        docs = self.fit(query, docs)
        text = self.template.grounded.format(query=query, context=self.template.render_context(docs))
        prompt = self._wrap(text)
        if self._counts:  # a template may repeat {text} or {context}: the filled prompt is what counts
            n = len(prompt if isinstance(prompt, list) else self._ids(text))
            if n + self.max_new_tokens > self.max_context_tokens:
                raise ValueError(
                    f"the grounded prompt takes {n} tokens once the template is filled; with "
                    f"{self.max_new_tokens} answer tokens it does not fit the model's "
                    f"{self.max_context_tokens}-token context window (does the template repeat "
                    f"{{text}} or {{context}}?)"
                )
        return prompt

    def fit(self, query: str, docs: Sequence[Document]) -> list[Document]:
        """The documents, the longest ones cut (token-wise) so the grounded prompt fits the window (as
        they are when there is no tokenizer to count with)."""
        if not self._counts:
            return list(docs)
        empty = [Document("", d.title) for d in docs]
        overhead = len(
            self._ids(self.template.grounded.format(query=query, context=self.template.render_context(empty)))
        )
        margin = 4 * len(docs)  # re-tokenising joined text can add a token or two per boundary
        budget = self.max_context_tokens - self.max_new_tokens - overhead - margin
        if budget < 0:
            raise ValueError(
                f"the query and prompt take {overhead} tokens; with {self.max_new_tokens} answer tokens "
                f"no document fits the {self.max_context_tokens}-token context window"
            )
        ids = [self.tokenizer.encode(d.text, add_special_tokens=False) for d in docs]
        total = sum(len(i) for i in ids)
        if total <= budget:
            return list(docs)
        cap = _water_level([len(i) for i in ids], budget)
        out, cut, removed = [], 0, 0
        for d, i in zip(docs, ids):
            if len(i) > cap:
                cut += 1
                removed += len(i) - cap
                d = Document(self.tokenizer.decode(i[:cap]), d.title, d.metadata)
            out.append(d)
        warnings.warn(
            f"grogu: truncated {cut} of {len(docs)} document(s) by {removed} tokens in total "
            f"({total} document tokens, {budget} fit the {self.max_context_tokens}-token window "
            f"with {self.max_new_tokens} answer tokens)",
            TruncationWarning,
            stacklevel=3,
        )
        return out


def _water_level(lengths: Sequence[int], budget: int) -> int:
    """Largest cap c with sum(min(l, c)) <= budget (documents shorter than c stay whole)."""
    lo, hi = 0, max(lengths)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(l, mid) for l in lengths) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo
