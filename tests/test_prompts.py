def test_rag_qa_template_is_llamaindex_chat_text_qa_prompt():
    """The prompt the LangChain integration scores without qa_prompt is LlamaIndex's default chat QA
    prompt, message for message."""
    from llama_index.core.prompts.chat_prompts import CHAT_TEXT_QA_PROMPT

    from grogu.core.prompts import RAG_QA_TEMPLATE

    context, query = "Canberra is the capital.", "What is the capital?"
    system, user = [m.content for m in CHAT_TEXT_QA_PROMPT.format_messages(context_str=context, query_str=query)]
    assert RAG_QA_TEMPLATE.system == system and RAG_QA_TEMPLATE.chat
    assert RAG_QA_TEMPLATE.grounded.format(context=context, query=query) == user
