"""``grogu tune`` validated: tune on 50 labelled questions, evaluate on 100 others, per QA prompt and data set.

The question this answers: does the setting ``grogu tune`` fits to a user's own prompt beat the retriever's
order, and the shipped default, on questions it was not fitted on?

``examples``: a fresh held-out sample per data set (SQuAD, NQ-open): 150 questions of the held-out split, in
a fixed permutation (seed 7) with every earlier held-out sample left out in code (``held_out.stable_draw``).
The first 50 tune, the next 100 evaluate. Each question's top 5 come from the packaged MiniLM over the data
set's passages (LlamaIndex's vector index). One examples file per prompt: the documents as that prompt's
pipeline shows them (LlamaIndex: the node's text with its title; LangChain: the page content).

``collect``: every candidate of every question answered once by SmolLM2-135M-Instruct (greedy, 48 tokens)
under the prompt, through ``grogu.apps.tune``'s own collection (the evaluation questions' records hold
every candidate, so each comparison is a replay).

``evaluate``: ``grogu.tune`` on the 50 (its own cross-validation and guard), then the tuned setting, the
shipped default and the retriever's order replayed on the 100, with the exact sign test. The decision rule
(``EVAL_RULE``) is committed before any evaluation record exists.

Prompts: ``llamaindex`` (LlamaIndex's chat QA prompt, through its synthesizer) and ``readme`` (the README's
LangChain prompt, "Answer the question using only the documents.").

    python benchmarks/tune_validation.py examples --data squad --data-file ...   # writes the examples files
    OMP_NUM_THREADS=1 python benchmarks/tune_validation.py collect --data squad --prompt llamaindex
    python benchmarks/tune_validation.py evaluate
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "tune_validation")
SEED, N_TUNE, N_EVAL, TOP_K, TOP_N, MAX_NEW_TOKENS = 7, 50, 100, 5, 3, 48
PROMPTS = ("llamaindex", "readme")
DATA = ("squad", "nq")
#: the evaluation's verdict, fixed before any evaluation record: on each (data set, prompt) the tuned
#: setting must not lose to the retriever's order (losses <= wins on the 100); pooled over all four, it
#: must do at least as well as the shipped default (wins >= losses), reported with the exact sign test.
EVAL_RULE = "per set: tuned losses <= wins against the retriever's order; pooled: tuned wins >= losses against the shipped default"


def sample_name(data: str) -> str:
    return f"{data}_tune_validation_seed{SEED}"


def earlier_held_ids(data: str, path: str | None) -> set[str]:
    """Every question an earlier held-out sample of ``data`` used: the frozen samples drawn before this one
    (``held_out.drawn_before``) and the draws ``entry_points.earlier_ids`` leaves out."""
    import entry_points
    import held_out
    from pipeline_accuracy import nq_questions, squad_questions

    draws = {
        "squad": lambda k, s, ex: squad_questions("held", k, s, ex),
        "nq": lambda k, s, ex: nq_questions("held", k, s, path, ex),
    }
    frozen = set().union(*(held_out.frozen(n) for n in held_out.drawn_before(data, f"tune_validation_seed{SEED}")))
    return frozen | entry_points.earlier_ids(data, draws[data])


def draw(data: str, path: str | None) -> tuple[list[dict], list[dict]]:
    """(pool, the 150 questions): a stable draw of the held-out split leaving every earlier sample out."""
    import held_out
    from pipeline_accuracy import nq_questions, squad_questions

    everything = 10**9
    pool, permuted = (
        squad_questions("held", everything, SEED) if data == "squad" else nq_questions("held", everything, SEED, path)
    )
    return pool, held_out.stable_draw(permuted, N_TUNE + N_EVAL, earlier_held_ids(data, path))


def examples(args) -> None:
    """The examples files of one data set (one per prompt), and its frozen sample."""
    warnings.filterwarnings("ignore")
    import held_out
    from llama_index.core.schema import MetadataMode
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from pipeline_accuracy import build_index

    from grogu.runtime.models import embedded_embedder_path

    pool, questions = draw(args.data, args.data_file)
    ids = [q["qid"] for q in questions]
    path = os.path.join(held_out.SAMPLES, f"{sample_name(args.data)}.txt")
    if held_out.has(sample_name(args.data)):
        if held_out.frozen(sample_name(args.data)) != ids:
            raise SystemExit(f"{path} is frozen and differs from this draw")
    else:
        with open(path, "w") as f:
            f.write(f"# tune_validation.py: seed {SEED}, held-out split, earlier samples left out\n")
            f.write("\n".join(ids) + "\n")
    embed = HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu")
    retriever = build_index(pool, embed, args.cache_dir, args.data).as_retriever(similarity_top_k=TOP_K)
    os.makedirs(OUT, exist_ok=True)
    files = {p: open(os.path.join(OUT, f"examples_{args.data}_{p}.jsonl"), "w") for p in PROMPTS}
    for i, q in enumerate(questions):
        nodes = retriever.retrieve(q["question"])
        for p, f in files.items():
            mode = MetadataMode.LLM if p == "llamaindex" else MetadataMode.NONE
            ex = {
                "id": q["qid"],
                "question": q["question"],
                "answers": q["answers"],
                "documents": [n.node.get_content(metadata_mode=mode) for n in nodes],
            }
            f.write(json.dumps({**ex, "split": "tune" if i < N_TUNE else "eval"}, ensure_ascii=False) + "\n")
    for f in files.values():
        f.close()
    print(f"{args.data}: {len(questions)} questions ({N_TUNE} tune, {N_EVAL} eval) -> {OUT}")


def template(prompt: str, model, tokenizer):
    """The grogu template that renders what the prompt's real pipeline sends SmolLM2."""
    if prompt == "llamaindex":
        from llama_index.core import get_response_synthesizer
        from llama_index.llms.huggingface import HuggingFaceLLM
        from llama_index.postprocessor.grogu import template_from_llama_index

        llm = HuggingFaceLLM(
            model=model,
            tokenizer=tokenizer,
            model_name="smollm2",
            context_window=8192,
            max_new_tokens=MAX_NEW_TOKENS,
            is_chat_model=True,
            generate_kwargs={"do_sample": False},
            stopping_ids=[tokenizer.convert_tokens_to_ids("<|im_end|>")],
        )
        return template_from_llama_index(get_response_synthesizer(llm=llm, response_mode="compact"), llm)
    from langchain_grogu import template_from_langchain
    from prompt_gate import chat_model, chat_prompt

    return template_from_langchain(chat_prompt(prompt), chat_model(model, tokenizer))


def read_examples(data: str, prompt: str, split: str) -> list[dict]:
    rows = [json.loads(line) for line in open(os.path.join(OUT, f"examples_{data}_{prompt}.jsonl"))]
    return [{k: v for k, v in r.items() if k != "split"} for r in rows if r["split"] == split]


def collect(args) -> None:
    """Every candidate of the data set's 150 questions under one prompt (tune and eval records apart)."""
    warnings.filterwarnings("ignore")
    import torch

    import grogu
    from grogu.apps.tune import collect_records

    torch.set_num_threads(1)
    model, tokenizer = grogu.load_model(grogu.DEFAULT_MODEL, device="cpu")
    engine = grogu.get_engine((model, tokenizer))
    tpl = template(args.prompt, model, tokenizer)
    for split in ("tune", "eval"):
        path = os.path.join(OUT, f"records_{args.data}_{args.prompt}_{split}.jsonl")
        collect_records(
            read_examples(args.data, args.prompt, split),
            engine,
            tpl,
            top_n=TOP_N,
            max_new_tokens=MAX_NEW_TOKENS,
            records=path,
            batch=args.batch,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("examples")
    e.add_argument("--data", choices=DATA, required=True)
    e.add_argument("--data-file", default=None, help="NQ-open: nq-open-oracle.jsonl.gz")
    e.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "grogu-bench"))
    c = sub.add_parser("collect")
    c.add_argument("--data", choices=DATA, required=True)
    c.add_argument("--prompt", choices=PROMPTS, required=True)
    c.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    {"examples": examples, "collect": collect}[args.cmd](args)


if __name__ == "__main__":
    main()
