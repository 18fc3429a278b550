"""grogu.core.prompts.template_from_messages: a pipeline's own chat QA prompt, rendered token for token."""

import pytest
from grogu_research.testing import embedded_tokenizer

from grogu import Document
from grogu.core.prompts import PromptBuilder, template_from_messages

C, Q = "<<C>>", "<<Q>>"


@pytest.fixture(scope="module")
def tokenizer():
    return embedded_tokenizer()


@pytest.mark.slow
def test_renders_the_pipeline_prompt_exactly(tokenizer):
    system = "You answer from {the} context."  # braces in the text are kept as they are
    user = f"Context:\n{C}\n---\nQuery: {Q}\nAnswer: "
    builder = PromptBuilder(
        tokenizer, 4096, 16, template_from_messages([("system", system), ("user", user)], context=C, query=Q)
    )
    docs = ["Prague lies on the Vltava.", "The {Charles} Bridge is old."]
    expected = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": system},
            {"role": "user", "content": user.replace(C, "\n\n".join(docs)).replace(Q, "Which river?")},
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert builder.grounded_ids("Which river?", [Document(d) for d in docs]) == tokenizer.encode(
        expected, add_special_tokens=False
    )
    # no documents: the same prompt with an empty context
    empty = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": system},
            {"role": "user", "content": user.replace(C, "").replace(Q, "Which river?")},
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert builder.ungrounded_ids("Which river?") == tokenizer.encode(empty, add_special_tokens=False)
    assert builder.grounded_ids("Which river?", []) == builder.ungrounded_ids("Which river?")


def test_plain_completion_prompt(tokenizer):
    template = template_from_messages([("user", f"Context: {C}\nQ: {Q}\nA:")], context=C, query=Q, chat=False)
    builder = PromptBuilder(tokenizer, 4096, 16, template)
    assert builder.grounded_ids("Why?", [Document("a"), Document("b")]) == tokenizer.encode(
        "Context: a\n\nb\nQ: Why?\nA:", add_special_tokens=True
    )


@pytest.mark.parametrize(
    "messages, match",
    [
        ([], "no messages"),
        ([("user", f"{C}")], "query exactly once"),
        ([("user", f"{C} {C} {Q}")], "context exactly once"),
        ([("system", f"{C}"), ("user", f"{C} {Q}")], "system message"),
        ([("user", f"{C} {Q}"), ("assistant", "ok")], "one user message"),
    ],
)
def test_prompts_grogu_cannot_score_are_clear_errors(messages, match):
    with pytest.raises(ValueError, match=match):
        template_from_messages(messages, context=C, query=Q)
