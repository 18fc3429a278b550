"""Does reranking make a real RAG pipeline answer better? Every rerank mode against the retriever's order.

Pipeline: all paragraphs of a data set indexed with the packaged all-MiniLM-L6-v2 in a LlamaIndex
``VectorStoreIndex``; the top-k (5 or 10) retrieved for each question; 3 of them handed to the packaged
SmolLM2-135M-Instruct through LlamaIndex's response synthesizer (``compact``, its default chat QA prompt,
greedy, 48 answer tokens). A question counts as answered when a gold answer string (SQuAD normalisation)
occurs in the answer.

The benchmark has two steps, so that every setting is chosen on tuning data and reported on data it
was not tuned on:

``collect``: for each question, everything a mode can base its choice on, scored with the pipeline's own
QA prompt (so the answer generated while scoring a context *is* the answer the pipeline gives for it;
``agree`` checks that against the real synthesizer on the retriever's context):
  - the retriever's top-k with its similarity scores;
  - each document alone (GROGU variants, answer), under the pipeline's prompt and (top-5) under grogu's
    own scoring prompt; no document at all (the pipeline prompt with an empty context);
  - every context some mode can choose (``pipeline_modes.needed_contexts``): over the whole tuning grid,
    or with ``--settings`` only for those settings (a lean held-out pass), each scored as one context.
``report``: replays the modes on the collected records (``--tune`` picks each mode's settings on the
tuning split; ``--settings`` applies fixed ones) and prints, per mode, accuracy against the retriever's
order with discordant counts and an exact two-sided sign test, and how often the answering paragraph is
given / given first.
``latency``: each mode's GroguRerank in a real query engine, timed; a whole query with and without
GroguSynthesizer. ``langchain``: a real LCEL chain with and without GroguRetriever.

Data: SQuAD v1.1 dev split by article (every fourth article is the tuning split, the rest held out;
the first question of each sampled paragraph), the MuSiQue sample (pool = its 1,890 paragraphs), NQ-open
(``--data nq``) and, for evaluation only, HippoRAG's HotpotQA sample (``--data hotpotqa --data-file
hotpotqa_train.json``; pool = its 994 paragraphs).

    OMP_NUM_THREADS=1 python benchmarks/pipeline_accuracy.py collect --data squad --split tune --questions 100 \
        --out runs/pipeline/squad_tune.jsonl --shard 0/2
    python benchmarks/pipeline_accuracy.py report --tune runs/pipeline/squad_tune.jsonl \
        --eval runs/pipeline/squad_held.jsonl

Another target LLM (``--model``: a path, a ``.gguf`` or a hub id; a model without a chat template reads
LlamaIndex's completion QA prompt), scoring only the contexts the default mode can choose:

    echo '{"retriever@5": {"k": 5}, "context@5": {"k": 5, "family": "swap", "metric": "key_entropy",
          "margin": 0.0}}' > runs/pipeline/settings_context.json
    OMP_NUM_THREADS=1 python benchmarks/pipeline_accuracy.py collect --data squad --split held --questions 300 \
        --shard 0/2 --model gemma-3-270m-q4_k_m.gguf --settings runs/pipeline/settings_context.json --verify 10 \
        --out runs/pipeline/gemma_held_0.jsonl
    python benchmarks/pipeline_accuracy.py report --eval runs/pipeline/gemma_held_*.jsonl \
        --settings runs/pipeline/settings_context.json --ks 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import socket
import sys
import time
import warnings

import torch

from grogu.runtime.models import DEFAULT_MODEL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from judging import answer_f1, answered, answered_words, judgeable, normalize, sign_test  # noqa: E402, F401
from record_meta import meta, write_sidecar  # noqa: E402

CUTS = "\x00CONTEXT\x00", "\x00QUERY\x00"


# ---------------------------------------------------------------------------------------------- data
def excluded_ids(paths: list[str]) -> set[str]:
    """The question ids of earlier samples: each file a JSONL of records with a ``qid``, or one id a line
    (lines starting with '#' are comments). A fresh sample leaves them all out before it is drawn."""
    ids: set[str] = set()
    for path in paths:
        for line in open(path):
            line = line.strip()
            if line and not line.startswith("#"):
                ids.add(json.loads(line)["qid"] if line.startswith("{") else line)
    return ids


def draw(questions: list[dict], n: int, seed: int, exclude: set[str] | None = None) -> list[dict]:
    """n questions drawn with ``seed`` from those not in ``exclude``."""
    left = [q for q in questions if q["qid"] not in (exclude or set())]
    return random.Random(seed).sample(left, min(n, len(left)))


def squad_questions(split: str, n: int, seed: int, exclude: set[str] | None = None) -> tuple[list[dict], list[dict]]:
    """(pool of all paragraphs, n questions of the split): first question of n sampled paragraphs."""
    from grogu_research.testing import shared_data_path

    data = json.load(open(shared_data_path("squad-v1.1-dev", "dev-v1.1.json")))["data"]
    pool, questions = [], []
    for a_i, article in enumerate(data):
        in_split = (a_i % 4 == 0) == (split == "tune")
        for p in article["paragraphs"]:
            pid = f"squad-{len(pool)}"
            pool.append({"id": pid, "title": article["title"].replace("_", " "), "text": p["context"]})
            if in_split:
                qa = p["qas"][0]
                questions.append(
                    {
                        "qid": qa["id"],
                        "question": qa["question"],
                        "article": a_i,
                        "answers": [x["text"] for x in qa["answers"]],
                        "gold": [pid],
                    }
                )
    return pool, draw(questions, n, seed, exclude)


def musique_questions(split: str, n: int) -> tuple[list[dict], list[dict]]:
    """The MuSiQue sample's questions (pool = its 1,890 paragraphs): ``tune`` the questions whose position
    is 0 or 1 mod 5 (40), ``held`` the other 60, ``all`` all 100; the first n of the split."""
    from grogu_research.testing import shared_data_path

    corpus = json.load(open(shared_data_path("musique-sample", "musique_train_100_corpus_hipporag.json")))
    items = json.load(open(shared_data_path("musique-sample", "musique_train_100_hipporag.json")))
    pool = [{"id": f"musique-{i}", "title": c["title"], "text": c["text"]} for i, c in enumerate(corpus)]
    where = {(p["title"], p["text"]): p["id"] for p in pool}
    questions = []
    for i, it in enumerate(items):
        if split != "all" and (i % 5 < 2) != (split == "tune"):
            continue
        gold = [
            where[(p["title"], p["paragraph_text"])]
            for p in it["paragraphs"]
            if p["is_supporting"] and (p["title"], p["paragraph_text"]) in where
        ]
        questions.append(
            {
                "qid": it["id"],
                "question": it["question"],
                "article": None,
                "answers": [it["answer"], *it.get("answer_aliases", [])],
                "gold": gold,
            }
        )
    return pool, questions[:n]


#: NQ-open with its gold Wikipedia passage per question (``qa_data/nq-open-oracle.jsonl.gz`` of
#: github.com/nelson-liu/lost-in-the-middle, MIT; Natural Questions CC BY-SA 3.0), looked up in
#: ../shared/data/nq-open-oracle/ and then at ``--data-file``
NQ_FILE = "nq-open-oracle.jsonl.gz"


def nq_questions(
    split: str, n: int, seed: int, path: str | None, exclude: set[str] | None = None
) -> tuple[list[dict], list[dict]]:
    """NQ-open (2,655 questions, real search queries; answers are short spans): the pool is every
    question's gold 100-word Wikipedia passage (deduplicated), so the other questions' passages are the
    distractors. ``tune`` = questions whose position is 0 mod 4, ``held`` = the rest; n sampled with ``seed``."""
    import gzip

    from grogu_research.testing import shared_data_path

    if path is None:
        path = shared_data_path("nq-open-oracle", NQ_FILE)
    rows = [json.loads(line) for line in gzip.open(path, "rt")]
    pool, ids, questions = [], {}, []
    for i, r in enumerate(rows):
        ctx = r["ctxs"][0]
        k = (ctx["title"], ctx["text"])
        if k not in ids:
            ids[k] = f"nq-{len(pool)}"
            pool.append({"id": ids[k], "title": ctx["title"], "text": ctx["text"]})
        if (i % 4 == 0) == (split == "tune"):
            questions.append(
                {
                    "qid": f"nq-{i}",
                    "question": r["question"],
                    "article": None,
                    "answers": list(r["answers"]),
                    "gold": [ids[k]],
                }
            )
    return pool, draw(questions, n, seed, exclude)


#: HotpotQA (distractor setting; CC BY-SA 4.0): the 100-question sample of github.com/OSU-NLP-Group/HippoRAG
#: (MIT), ``data/hotpotqa_train.json`` with ``data/hotpotqa_train_corpus.json`` beside it (commit 3d95d25),
#: passed with ``--data-file``. No setting was chosen on it: every question is held out.
HOTPOTQA_FILE = "hotpotqa_train.json"


def hotpotqa_questions(split: str, n: int, path: str | None) -> tuple[list[dict], list[dict]]:
    """HotpotQA questions (multi-hop: bridge and comparison questions over Wikipedia paragraphs; pool =
    the sample's 994 paragraphs, each question's 2 supporting and 8 distractor paragraphs among them).
    Evaluation only (``held`` or ``all``: the whole sample). Questions answered yes or no are left out:
    the answer check (a gold string inside the answer) cannot tell "no" from "not" or "know"."""
    if split == "tune":
        raise SystemExit("hotpotqa is evaluation data only: --split held")
    if path is None:
        raise SystemExit(f"hotpotqa: pass the path of {HOTPOTQA_FILE} with --data-file (its *_corpus.json beside it)")
    items = json.load(open(path))
    corpus = json.load(open(os.path.splitext(path)[0] + "_corpus.json"))
    pool = [
        {"id": f"hotpotqa-{i}", "title": title, "text": "".join(sentences).strip()}
        for i, (title, sentences) in enumerate(corpus.items())
    ]
    ids = {p["title"]: p["id"] for p in pool}
    questions = [
        {
            "qid": it["_id"],
            "question": it["question"],
            "article": None,
            "answers": [it["answer"]],
            "gold": sorted({ids[t] for t, _ in it["supporting_facts"] if t in ids}),
        }
        for it in items
        if normalize(it["answer"]) not in ("yes", "no")
    ]
    return pool, questions[:n]


#: HotpotQA dev (distractor setting; CC BY-SA 4.0): IRCoT's 500-question sample as kept in
#: github.com/xindili-cmu/anlp-project-multihop (Apache-2.0), ``processed_data/hotpotqa/dev_subsampled.jsonl``
#: (commit 11ba729), passed with ``--data-file``. Not HippoRAG's train sample above: no question is shared.
HOTPOTQA_DEV_FILE = "dev_subsampled.jsonl"


def hotpotqa_dev_questions(
    split: str, n: int, seed: int, path: str | None, exclude: set[str] | None = None
) -> tuple[list[dict], list[dict]]:
    """HotpotQA dev questions, each with its 10 paragraphs (2 supporting); the pool is every question's
    paragraphs (4,858 distinct), so the other questions' paragraphs are distractors. Evaluation only.
    Yes/no questions are left out (80 of 500); n drawn with ``seed``."""
    if split == "tune":
        raise SystemExit("hotpotqa-dev is evaluation data only: --split held")
    if path is None:
        raise SystemExit(f"hotpotqa-dev: pass the path of {HOTPOTQA_DEV_FILE} with --data-file")
    pool, ids, questions = [], {}, []
    for line in open(path, encoding="utf-8"):
        rec = json.loads(line)
        gold = []
        for ctx in rec["contexts"]:
            k = (ctx["title"].strip(), " ".join(ctx["paragraph_text"].split()))
            if k not in ids:
                ids[k] = f"hotpotdev-{len(pool)}"
                pool.append({"id": ids[k], "title": k[0], "text": k[1]})
            if ctx.get("is_supporting") and ids[k] not in gold:
                gold.append(ids[k])
        answers = [a for obj in rec["answers_objects"] for a in obj["spans"] if a.strip()]
        if answers and judgeable(answers):
            questions.append(
                {
                    "qid": rec["question_id"],
                    "question": rec["question_text"],
                    "article": None,
                    "answers": answers,
                    "gold": gold,
                }
            )
    return pool, draw(questions, n, seed, exclude)


def load_data(args) -> tuple[list[dict], list[dict]]:
    """(pool, questions) of ``--data`` / ``--split`` / ``--questions`` / ``--seed`` / ``--data-file`` /
    ``--exclude``."""
    exclude = excluded_ids(getattr(args, "exclude", []))
    if exclude and args.data not in ("squad", "nq", "hotpotqa-dev"):
        raise SystemExit(f"--exclude: {args.data} is not sampled (its questions are taken in order)")
    if args.data == "squad":
        return squad_questions(args.split, args.questions, args.seed, exclude)
    if args.data == "nq":
        return nq_questions(args.split, args.questions, args.seed, args.data_file, exclude)
    if args.data == "hotpotqa-dev":
        return hotpotqa_dev_questions(args.split, args.questions, args.seed, args.data_file, exclude)
    if args.data == "hotpotqa":
        return hotpotqa_questions(args.split, args.questions, args.data_file)
    return musique_questions(args.split, args.questions)


def build_index(pool: list[dict], embed_model, cache_dir: str, name: str):
    """VectorStoreIndex over the pool (title as LLM-visible metadata, as the LlamaIndex benchmark did);
    embeddings computed once and cached."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import TextNode

    nodes = [
        TextNode(text=p["text"], id_=p["id"], metadata={"title": p["title"]}, excluded_embed_metadata_keys=["title"])
        for p in pool
    ]
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"{name}_{len(nodes)}_minilm.pt")
    if os.path.exists(path):
        vectors = torch.load(path)
    else:
        vectors = torch.tensor(
            embed_model.get_text_embedding_batch(
                [n.get_content(metadata_mode="embed") for n in nodes], show_progress=False
            )
        )
        torch.save(vectors, path)
    for n, v in zip(nodes, vectors.tolist()):
        n.embedding = v
    return VectorStoreIndex(nodes, embed_model=embed_model)


# ---------------------------------------------------------------------------------------------- collect


def result_row(r, golds) -> dict:
    return {
        "variants": {k: round(float(v), 6) for k, v in r.variants.items()},
        "answer": r.answer,
        "correct": answered(r.answer, golds),
        "n_tokens": r.n_tokens,
    }


def served_llm(args):
    """The pipeline's LLM as an ``OpenAILike`` on the server at ``--server`` (greedy and plain: temperature 0
    and, for llama-cpp-python's server, no repeat penalty), answering with the chat endpoint."""
    from llama_index.llms.openai_like import OpenAILike

    import grogu

    name = args.served_model or grogu.ServerTarget(args.server, tokenizer=args.model).model_name
    base = args.server.rstrip("/")
    return OpenAILike(
        api_base=base if base.endswith("/v1") else base + "/v1",
        model=name,
        api_key=os.environ.get("OPENAI_API_KEY", "none"),
        is_chat_model=True,
        temperature=0.0,
        max_tokens=args.max_new_tokens,
        context_window=8192,
        additional_kwargs={"extra_body": {"repeat_penalty": 1.0}},
    )


def collect(args) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from llama_index.core import get_response_synthesizer
    from llama_index.core.schema import MetadataMode
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.llms.huggingface import HuggingFaceLLM
    from llama_index.postprocessor.grogu import template_from_llama_index
    from pipeline_modes import (
        context_settings,
        key,
        mode_retriever,
        needed_contexts,
        needs_own_prompt,
        needs_pipe_prompt,
        wide_contexts,
    )

    import grogu
    from grogu.rerank import doubt
    from grogu.runtime.inference_server import target_from_llm
    from grogu.runtime.models import embedded_embedder_path

    pool, questions = load_data(args)
    questions = questions[: args.limit] if args.limit else questions
    shard, shards = map(int, args.shard.split("/"))
    questions = questions[shard::shards]
    embed_model = HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu")
    index = build_index(pool, embed_model, args.cache_dir, args.data)
    retriever = index.as_retriever(similarity_top_k=args.top_k)

    if args.server:  # the target LLM behind an OpenAI-compatible server: nothing is loaded here
        llm = served_llm(args)
        engine = target_from_llm(llm, tokenizer=args.model, top_logprobs=args.top_logprobs)
    else:
        model, tokenizer = grogu.load_model(args.model, device="cpu")
        stop = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        chat = bool(
            getattr(tokenizer, "chat_template", None)
        )  # a base model (no chat template) reads the completion prompt
        llm = HuggingFaceLLM(
            model=model,
            tokenizer=tokenizer,
            model_name=str(args.model),
            context_window=8192,
            max_new_tokens=args.max_new_tokens,
            is_chat_model=chat,
            generate_kwargs={"do_sample": False},
            stopping_ids=[stop] if stop is not None else [],
        )
        engine = grogu.get_engine((model, tokenizer))
    synthesizer = get_response_synthesizer(llm=llm, response_mode="compact")
    template = template_from_llama_index(synthesizer, llm)
    settings = json.load(open(args.settings)) if args.settings else None
    pipe = grogu.UtilityScorer(engine, max_new_tokens=args.max_new_tokens, template=template)
    own = grogu.UtilityScorer(engine)

    # grogu's own prompt scores the first 5 documents, or as many as a given setting ranks
    own_k = max([5] + [s["k"] for s in (settings or {}).values() if s.get("prompt") == "own"])
    done = set()
    if os.path.exists(args.out):
        done = {json.loads(line)["qid"] for line in open(args.out)}
    for n_q, q in enumerate(questions, 1):
        if q["qid"] in done:
            continue
        retrieved = retriever.retrieve(q["question"])
        texts = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in retrieved]
        row = dict(
            q,
            data=args.data,
            split=args.split,
            top_k=args.top_k,
            texts=texts,
            retrieved=[{"id": n.node.node_id, "score": float(n.score)} for n in retrieved],
        )
        t0 = time.perf_counter()
        row["docs"] = (
            [result_row(r, q["answers"]) for r in pipe.score(q["question"], texts)]
            if needs_pipe_prompt(settings)
            else None
        )
        row["docs_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        row["docs_own"] = (
            [result_row(r, q["answers"]) for r in own.score(q["question"], texts[:own_k])]
            if needs_own_prompt(settings)
            else None
        )
        row["docs_own_s"] = time.perf_counter() - t0
        row["none"] = (
            result_row(pipe.score_context(q["question"], []), q["answers"]) if needs_pipe_prompt(settings) else None
        )
        orders = []
        for k in sorted({min(5, len(texts)), len(texts)}):
            orders += [o for o in needed_contexts(row, k, settings) if o not in orders]
        if args.contexts == "wide":
            orders += [o for o in wide_contexts(min(5, len(texts))) if o not in orders]
        t0 = time.perf_counter()
        if args.contexts == "gated":  # the retriever's context first; the others only if a gate is in doubt
            first = mode_retriever(row, {"k": 5})
            [r0] = pipe.score_contexts(q["question"], [[texts[i] for i in first]])
            row["doubt"] = any(
                doubt(context_settings(s), r0, texts, first) for s in settings.values() if s.get("gate") == "doubt"
            )
            orders = [first] + ([o for o in orders if o != first] if row["doubt"] else [])
            scored = [r0, *pipe.score_contexts(q["question"], [[texts[i] for i in o] for o in orders[1:]])]
        else:
            scored = pipe.score_contexts(q["question"], [[texts[i] for i in o] for o in orders])
        row["contexts_s"] = time.perf_counter() - t0
        row["contexts"] = {key(o): result_row(r, q["answers"]) for o, r in zip(orders, scored)}
        if args.verify is None or n_q <= args.verify:
            t0 = time.perf_counter()
            base = str(synthesizer.synthesize(q["question"], retrieved[:3]))
            row["pipeline_answer_s"] = time.perf_counter() - t0
            row["pipeline_answer"] = base
            row["pipeline_correct"] = answered(base, q["answers"])
            row["agree"] = base.strip() == row["contexts"]["0,1,2"]["answer"].strip()
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(
            f"{n_q}/{len(questions)} {q['qid']} docs {row['docs_s']:.1f}s ctx {row['contexts_s']:.1f}s "
            f"agree={row.get('agree')}",
            file=sys.stderr,
            flush=True,
        )


def latency(args) -> None:
    """Each mode's GroguRerank in a real LlamaIndex query engine, timed per query (postprocess only), and
    the whole query with GroguSynthesizer (context mode) against the plain synthesizer.

    ``--via service``: grogu scores through a local ``grogu serve`` app (one replica of one CPU), the
    pipeline's LLM in process. ``--via llama-cpp-server``: the pipeline's LLM and grogu's scoring both
    go to llama-cpp-python's server (one thread) serving the embedded GGUF. ``--via llama-server``: the
    same on llama.cpp's own llama-server (``--llama-server-binary``; ``--llama-server-slots`` slots of 4,096
    tokens, one thread, its defaults otherwise)."""
    import contextlib

    with contextlib.ExitStack() as stack:
        if args.via == "llama-cpp-server":
            from grogu_research.testing import LlamaCppServer

            args.server = stack.enter_context(LlamaCppServer(n_ctx=4096)).url
        if args.via == "llama-server":
            from grogu_research.llama_server_binary import LlamaServerBinary

            from grogu.runtime.models import embedded_path

            gguf = embedded_path(DEFAULT_MODEL)
            # --cache-ram 0: no prompt states kept in memory between requests, so that each timed query
            # starts cold (by default 8 GiB of them are kept: the plain query's prompt then served grogu's)
            srv = LlamaServerBinary(
                gguf,
                binary=args.llama_server_binary,
                n_ctx=4096 * args.llama_server_slots,
                slots=args.llama_server_slots,
                extra=["--cache-ram", "0"],
            )
            args.server = stack.enter_context(srv).url
        _latency(args, stack)


def SavedRetriever(pool: list[dict], saved: dict, top_k: int):
    """A LlamaIndex retriever that returns, per question, the nodes an earlier run retrieved (``saved``:
    question -> [[node id, score], ...], from ``latency --save-retrieved``), built from the pool as
    :func:`build_index` builds them."""
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    by_id = {p["id"]: p for p in pool}

    class _Saved(BaseRetriever):
        def _retrieve(self, query_bundle):
            hits = saved[query_bundle.query_str][:top_k]
            return [
                NodeWithScore(
                    node=TextNode(
                        text=by_id[i]["text"],
                        id_=i,
                        metadata={"title": by_id[i]["title"]},
                        excluded_embed_metadata_keys=["title"],
                    ),
                    score=score,
                )
                for i, score in hits
            ]

    retriever = _Saved()
    retriever.saved = saved
    return retriever


def local_service(stack) -> str:
    """A local grogu service (Ray Serve, one replica of one CPU) on the default model; its URL."""
    import ray
    from ray import serve

    from grogu.apps.serve.service import ServeConfig, build_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    stack.callback(ray.shutdown)
    stack.callback(serve.shutdown)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(ServeConfig(model=DEFAULT_MODEL, device="cpu"), num_replicas=1, num_cpus=1), route_prefix="/")
    return f"http://127.0.0.1:{port}"


def _latency(args, stack) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    import statistics

    from llama_index.core import get_response_synthesizer
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.schema import MetadataMode, NodeWithScore
    from llama_index.llms.huggingface import HuggingFaceLLM
    from llama_index.postprocessor.grogu import GroguRerank, GroguSynthesizer

    import grogu
    from grogu.rerank.selection import context_candidates
    from grogu.runtime.models import embedded_embedder_path

    args.split, args.questions = "held", args.questions + args.skip
    pool, questions = load_data(args)
    questions = questions[args.skip :]
    if args.retrieved:  # retrieval done beforehand (an offline GPU machine runs no embedder)
        retriever = SavedRetriever(pool, json.load(open(args.retrieved)), args.top_k)
        plain_retriever = SavedRetriever(pool, retriever.saved, 3)
    else:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding

        embed_model = HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu")
        index = build_index(pool, embed_model, args.cache_dir, args.data)
        retriever = index.as_retriever(similarity_top_k=args.top_k)
        plain_retriever = index.as_retriever(similarity_top_k=3)
    if args.save_retrieved:
        saved = {
            q["question"]: [[n.node.node_id, n.score] for n in retriever.retrieve(q["question"])] for q in questions
        }
        json.dump(saved, open(args.save_retrieved, "w"))
        print(f"{len(saved)} questions' retrieved nodes written to {args.save_retrieved}")
        return
    if args.server:
        llm = served_llm(args)
    else:
        model, tokenizer = grogu.load_model(args.model, device=args.device, dtype=args.dtype)
        from llama_index.core import Settings

        # LlamaIndex counts prompt tokens with tiktoken by default, which fetches its encoding over the network
        Settings.tokenizer = tokenizer.encode
        llm = HuggingFaceLLM(
            model=model,
            tokenizer=tokenizer,
            model_name=str(args.model),
            context_window=8192,
            max_new_tokens=args.max_new_tokens,
            is_chat_model=True,
            generate_kwargs={"do_sample": False},
            stopping_ids=[tokenizer.convert_tokens_to_ids("<|im_end|>")],
        )
    synth = get_response_synthesizer(llm=llm, response_mode="compact")
    # the plain pipeline: the retriever's top-3 straight to the synthesizer
    plain_engine = RetrieverQueryEngine.from_args(plain_retriever, llm=llm, response_synthesizer=synth)
    settings = json.load(open(args.settings))
    reranks, service_url = {}, None
    for name, s in settings.items():
        mode, k = name.split("@")
        if int(k) != args.top_k or mode == "retriever":
            continue
        mode = {
            "paper": "document",
            "former": "context",
            "four": "context",
            "confidence": "context",
            "selective": "context",
        }.get(mode, mode)
        kw = {key: v for key, v in s.items() if key in grogu.ModeSettings.names() and key != "mode"}
        if s.get("metric") and mode == "context":
            kw["context_metric"] = s["metric"]  # the context mode compares candidates by this metric
        elif s.get("metric"):
            kw["metric"] = s["metric"]
        qa = synth if s.get("prompt", "pipe") == "pipe" else None
        if args.via == "service" and service_url is None:
            service_url = local_service(stack)
        reranks[name] = GroguRerank(
            top_n=3,
            model=service_url if args.via == "service" else llm,
            mode=mode,
            qa_template=qa,
            max_new_tokens=args.max_new_tokens if qa is not None else 64,
            **kw,
        )
    for r in reranks.values():  # prompts kept between calls: an engine setting, off by default
        target = getattr(r.scorer, "target", None)
        if isinstance(target, grogu.Engine):
            target.config = dataclasses.replace(target.config, retain_prefix_tokens=args.retain_prefix_tokens)
    if args.whole_only:
        return whole_query_cost(args, questions, retriever, llm, synth, plain_engine, reranks)
    times: dict[str, list[float]] = {name: [] for name in reranks}
    plain_a, plain_query, plain_tokens = [], [], []
    # each context-mode setting's whole query with GroguSynthesizer (the chosen context's answer reused), and
    # the prompt tokens the engine encoded for its candidates; the default's whole query with the plain
    # synthesizer too (the answer generated a second time)
    contexts = {n: r for n, r in reranks.items() if r.mode == "context"}
    reuse_q: dict[str, list[float]] = {n: [] for n in contexts}
    encoded: dict[str, list[int]] = {n: [] for n in contexts}
    plain_q: list[float] = []
    default = next((n for n in contexts if n.startswith("context")), None)
    for q in questions:
        retrieved = retriever.retrieve(q["question"])
        for name, rr in reranks.items():
            t0 = time.perf_counter()
            rr.postprocess_nodes(
                [NodeWithScore(node=n.node, score=n.score) for n in retrieved], query_str=q["question"]
            )
            times[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        synth.synthesize(q["question"], retrieved[:3])
        plain_a.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        plain_engine.query(q["question"])
        plain_query.append(time.perf_counter() - t0)
        texts = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in retrieved[:3]]
        for name, rr in contexts.items():
            scoring = getattr(rr.scorer, "engine", None)
            engine = RetrieverQueryEngine.from_args(
                retriever, llm=llm, node_postprocessors=[rr], response_synthesizer=GroguSynthesizer(synth)
            )
            before = getattr(scoring, "prefill_tokens", None)
            t0 = time.perf_counter()
            engine.query(q["question"])
            reuse_q[name].append(time.perf_counter() - t0)
            if before is not None:
                encoded[name].append(scoring.prefill_tokens - before)
            if name == default:
                plain_tokens.append(
                    len(rr.scorer.prompts.grounded_ids(q["question"], [grogu.Document(t) for t in texts]))
                )
                engine = RetrieverQueryEngine.from_args(
                    retriever, llm=llm, node_postprocessors=[rr], response_synthesizer=synth
                )
                t0 = time.perf_counter()
                engine.query(q["question"])
                plain_q.append(time.perf_counter() - t0)
        print(
            q["qid"],
            {n: round(t[-1], 2) for n, t in times.items()},
            "answer",
            round(plain_a[-1], 2),
            "plain query",
            round(plain_query[-1], 2),
            "queries",
            {n: round(t[-1], 2) for n, t in reuse_q.items()},
            file=sys.stderr,
            flush=True,
        )

    def stats(xs):
        xs = sorted(xs)
        return {"mean": round(statistics.mean(xs), 3), "p90": round(xs[int(0.9 * (len(xs) - 1))], 3)}

    out = {
        "questions": len(questions),
        "top_k": args.top_k,
        "postprocess_s": {n: stats(t) for n, t in times.items()},
        "answer_s (synthesizer, retriever top-3)": stats(plain_a),
        "query_s plain query engine (top-3 retrieved)": stats(plain_query),
    }
    for name in contexts:
        candidates = len(
            context_candidates(args.top_k, 3, contexts[name].settings.family, contexts[name].settings.swaps)
        )
        out[f"{name} ({candidates} candidates)"] = {
            "query_s with GroguSynthesizer": stats(reuse_q[name]),
            "ratio to the plain query (means)": round(statistics.mean(reuse_q[name]) / statistics.mean(plain_query), 3),
            "prompt tokens encoded per query (candidates and ungrounded prompts)": stats(encoded[name])
            if encoded[name]
            else None,
        }
    if default is not None:
        out[f"{default}: query_s with the plain synthesizer answering again"] = stats(plain_q)
        out["prompt tokens of the retriever's top-3 prompt"] = stats(plain_tokens)
    print(json.dumps(out, indent=1))


def whole_query_cost(args, questions, retriever, llm, synth, plain_engine, reranks) -> None:
    """Each context-mode setting's whole query (GroguRerank, then GroguSynthesizer reusing the chosen
    context's answer) against the plain query engine (the retriever's top-3 to the synthesizer), one
    question after the other, one thread, the plain query timed in the same run.

    Per setting, a report that cannot flatter: the median of the per-question ratios, the ratio of means,
    the 90th percentile of the per-question ratios and the share of queries the gate found in doubt; the
    ratio of means over calm and over doubtful queries apart. Where the time goes, per query: the scoring
    engine's answering (the first candidate, then the others in doubt), its teacher forcing, and the rest
    (retrieval, LlamaIndex, the gate's reading); prompt tokens encoded and decode steps. ``--records``
    writes one JSON line per question with all of it."""

    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.postprocessor.grogu import GroguSynthesizer

    tokenizer = llm._tokenizer if hasattr(llm, "_tokenizer") else None
    plain, plain_answer_tokens = [], []
    runs = {n: [] for n, r in reranks.items() if r.mode == "context"}
    engines = {
        n: RetrieverQueryEngine.from_args(
            retriever, llm=llm, node_postprocessors=[reranks[n]], response_synthesizer=GroguSynthesizer(synth)
        )
        for n in runs
    }
    clock: dict[str, list[float]] = {"answer": [], "force": []}  # seconds of each engine call, this query

    def timed(kind, method):
        def run(*a, **kw):
            t0 = time.perf_counter()
            try:
                return method(*a, **kw)
            finally:
                clock[kind].append(time.perf_counter() - t0)

        return run

    for name in runs:  # in process: the engine calls are timed; through the service the whole query only
        scorer = reranks[name].scorer
        if hasattr(scorer, "answer_contexts"):
            scorer.answer_contexts = timed("answer", scorer.answer_contexts)
            scorer.force_answers = timed("force", scorer.force_answers)
    records = open(args.records, "w") if args.records else None
    if records is not None:  # its meta as it opens: a run stopped at its limit keeps its rows
        write_sidecar(args.records, args.meta_settings)

    def cold() -> None:
        """Each timed query starts cold: no prompt of another arm's query kept by grogu's engine, and
        llama-cpp-python's server (which continues its last prompt) sent an unrelated one."""
        for r in reranks.values():
            drop = getattr(getattr(r.scorer, "target", None), "drop_kept_prompts", None)
            if drop is not None:
                drop()
        if args.server:
            llm.complete("Say hello.")

    if args.via != "process":  # a service builds its scorer and a server warms up on the first request
        for engine in [plain_engine, *engines.values()]:
            engine.query(questions[0]["question"])
    for q in questions:
        cold()
        t0 = time.perf_counter()
        answer = str(plain_engine.query(q["question"]))
        plain.append(time.perf_counter() - t0)
        row = {"qid": q["qid"], "plain_s": round(plain[-1], 4)}
        if tokenizer is not None:
            plain_answer_tokens.append(len(tokenizer(answer, add_special_tokens=False)["input_ids"]) + 1)
            row["plain_answer_tokens"] = plain_answer_tokens[-1]
        for name, engine in engines.items():
            scoring = getattr(reranks[name].scorer, "target", None)
            counted = hasattr(scoring, "prefill_tokens")  # an in-process engine counts its work
            before = (scoring.prefill_tokens, scoring.lookup_steps) if counted else (0, 0)
            clock["answer"].clear()
            clock["force"].clear()
            cold()
            t0 = time.perf_counter()
            response = engine.query(q["question"])
            s = time.perf_counter() - t0
            answers = list(clock["answer"])
            gate = response.source_nodes[0].node.metadata["grogu"]["context"].get("gate") or {}
            run = {
                "s": round(s, 4),
                "ratio": round(s / plain[-1], 4),
                # in doubt: the other candidates were answered after the first (in process: a second answer call)
                "doubt": len(answers) > 1
                if counted
                else bool(gate.get("in_doubt")) and reranks[name].settings.gate == "doubt",
                "answer_first_s": round(answers[0], 4) if answers else 0.0,
                "answer_rest_s": round(sum(answers[1:]), 4),
                "force_s": round(sum(clock["force"]), 4),
                "encoded": scoring.prefill_tokens - before[0] if counted else None,
                "steps": scoring.lookup_steps - before[1] if counted else None,
            }
            run["other_s"] = round(s - run["answer_first_s"] - run["answer_rest_s"] - run["force_s"], 4)
            runs[name].append(run)
            row[name] = run
        if records is not None:
            records.write(json.dumps(row) + "\n")
            records.flush()
        print(q["qid"], "plain", round(plain[-1], 2), {n: r[-1]["s"] for n, r in runs.items()}, file=sys.stderr)
    out = latency_summary(args.data, plain, plain_answer_tokens, runs)
    graphs = {}
    for name in runs:  # what the scoring engine's CUDA graphs did (in process)
        target = getattr(reranks[name].scorer, "target", None)
        if hasattr(target, "graph_stats"):
            out[name]["graphs"] = graphs[name] = target.graph_stats()
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**out, "meta": meta(settings=args.meta_settings)}, f, indent=1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from graph_counts import verdict

    for name, g in graphs.items():  # on a GPU: exit 3 if a capture failed or a step ran eagerly
        verdict(g, args.device, what=name)


def latency_summary(data: str, plain: list[float], plain_answer_tokens: list[int], runs: dict[str, list[dict]]) -> dict:
    """The whole-query summary from per-question rows (what ``--records`` holds): per arm the median of
    the per-question ratios, the ratio of means, their 90th percentile, the queries in doubt and the
    ratio of means over calm and doubtful queries apart, where the time went, prompt tokens and steps."""
    import statistics

    med, mean = statistics.median, statistics.mean

    def p90(xs):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)]

    def ratio_of_means(rs, ps):
        return round(mean(rs) / mean(ps), 3) if rs else None

    out = {
        "data": data,
        "questions": len(plain),
        "plain query s (median)": round(med(plain), 3),
        "plain query s (mean)": round(mean(plain), 3),
        "plain answer tokens (median)": med(plain_answer_tokens) if plain_answer_tokens else None,
    }
    for name, r in runs.items():
        calm = [i for i, x in enumerate(r) if not x["doubt"]]
        doubt = [i for i, x in enumerate(r) if x["doubt"]]
        out[name] = {
            "ratio (median of per-question ratios)": round(med(x["ratio"] for x in r), 3),
            "ratio of means": ratio_of_means([x["s"] for x in r], plain),
            "ratio p90 (per-question ratios)": round(p90([x["ratio"] for x in r]), 3),
            "in doubt": f"{len(doubt)} / {len(r)}",
            "ratio of means, calm": ratio_of_means([r[i]["s"] for i in calm], [plain[i] for i in calm]),
            "ratio of means, in doubt": ratio_of_means([r[i]["s"] for i in doubt], [plain[i] for i in doubt]),
            "mean s: first answer / other answers / teacher forcing / rest": [
                round(mean(x[k] for x in r), 3) for k in ("answer_first_s", "answer_rest_s", "force_s", "other_s")
            ],
        }
        if r and r[0]["encoded"] is not None:
            out[name]["prompt tokens encoded, median (mean)"] = [
                med(x["encoded"] for x in r),
                round(mean(x["encoded"] for x in r)),
            ]
            out[name]["decode steps, median (mean)"] = [
                med(x["steps"] for x in r),
                round(mean(x["steps"] for x in r), 1),
            ]
    return out


def latency_summary_from_records(args) -> None:
    """``latency-summary``: :func:`latency_summary` of a ``--records`` file (a run stopped at its limit
    has its rows but no summary), written to ``--json``."""
    rows = [json.loads(line) for line in open(args.records)]
    arms = [k for k in rows[0] if isinstance(rows[0][k], dict)]
    out = latency_summary(
        args.data,
        [r["plain_s"] for r in rows],
        [r["plain_answer_tokens"] for r in rows if "plain_answer_tokens" in r],
        {a: [r[a] for r in rows] for a in arms},
    )
    out["records"] = os.path.basename(args.records)
    print(json.dumps(out, indent=1))
    if args.json:
        here = meta(settings=args.meta_settings)
        for beside in (args.records + ".meta.json", os.path.join(os.path.dirname(args.records), "meta.json")):
            if os.path.exists(beside):  # the figures are the run's that wrote the records: its commit
                run = json.load(open(beside))
                here |= {"commit": run.get("commit", here["commit"]), "dirty": run.get("dirty"), "records_meta": run}
                break
        with open(args.json, "w") as f:
            json.dump({**out, "meta": here}, f, indent=1)


def cost_table(args) -> None:
    """A Markdown table from ``latency --whole-only --records`` files: per file, calm and doubtful queries
    apart, mean seconds of the plain query and of each part of the arm's query, its ratio of means,
    and the mean prompt tokens encoded and decode steps (in process only)."""
    import statistics

    print(
        "| records | queries | plain | first answer | other answers | teacher forcing | rest | ratio of means "
        "| prompt tokens encoded | decode steps |\n|" + "---|" * 10
    )
    for path in args.records:
        rows = [json.loads(line) for line in open(path)]
        for doubt in (False, True):
            part = [r for r in rows if r[args.arm]["doubt"] == doubt]
            if not part:
                continue
            arm = [r[args.arm] for r in part]

            def mean(key, xs=arm):
                vals = [x[key] for x in xs if x.get(key) is not None]
                return statistics.mean(vals) if vals else None

            plain = statistics.mean(r["plain_s"] for r in part)
            remote = all(x.get("encoded") is None for x in arm)  # through a service or server: the whole query only
            keys = ("answer_first_s", "answer_rest_s", "force_s", "other_s")
            cells = [None] * 4 if remote and not any(mean(k) for k in keys[:3]) else [mean(k) for k in keys]
            enc, steps = mean("encoded"), mean("steps")
            print(
                f"| {os.path.basename(path)} | {'in doubt' if doubt else 'calm'} ({len(part)}) | {plain:.2f} | "
                + " | ".join(
                    "–" if c is None or (doubt is False and i == 1) else f"{c:.2f}" for i, c in enumerate(cells)
                )
                + f" | {mean('s') / plain:.2f}× | {'–' if enc is None else f'{enc:,.0f}'} | "
                f"{'–' if steps is None else f'{steps:.1f}'} |"
            )


def langchain_arm(args) -> None:
    """A real LangChain chain (InMemoryVectorStore over the pool, ChatHuggingFace on SmolLM2, the chain's own
    prompt) with the base retriever against GroguRetriever(mode="context", qa_prompt=...), held-out SQuAD."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_grogu import GroguRetriever
    from langchain_huggingface import ChatHuggingFace, HuggingFaceEmbeddings, HuggingFacePipeline
    from transformers import pipeline

    import grogu
    from grogu.runtime.models import embedded_embedder_path

    pool, questions = squad_questions("held", args.questions + args.skip, args.seed)
    questions = questions[args.skip :]
    embeddings = HuggingFaceEmbeddings(model_name=embedded_embedder_path())
    path = os.path.join(args.cache_dir, f"squad_{len(pool)}_minilm.pt")
    vectors = (
        torch.load(path).tolist() if os.path.exists(path) else embeddings.embed_documents([p["text"] for p in pool])
    )
    store = InMemoryVectorStore(embeddings)
    store.store = {
        p["id"]: {"id": p["id"], "vector": v, "text": p["text"], "metadata": {"title": p["title"]}}
        for p, v in zip(pool, vectors)
    }  # the same MiniLM vectors the LlamaIndex arm indexes
    base = store.as_retriever(search_kwargs={"k": args.top_k})
    model, tokenizer = grogu.load_model(args.model, device="cpu")
    pipe = pipeline(
        "text-generation",
        model=model,
        tokenizer=tokenizer,
        max_new_tokens=args.max_new_tokens,
        do_sample=False,
        return_full_text=False,
    )
    chat = ChatHuggingFace(llm=HuggingFacePipeline(pipeline=pipe), tokenizer=tokenizer, model_id=str(args.model))
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "Answer the question using the context. Reply briefly."),
            ("human", "Context:\n{context}\n\nQuestion: {question}"),
        ]
    )

    def fmt(docs):
        return "\n\n".join(d.page_content for d in docs)

    grogu_retriever = GroguRetriever(
        base_retriever=base, model=chat, top_n=3, mode="context", qa_prompt=prompt, max_new_tokens=args.max_new_tokens
    )
    top3 = base | (lambda docs: docs[:3])
    chains = {
        "retriever": {"context": top3 | fmt, "question": RunnablePassthrough()} | prompt | chat | StrOutputParser(),
        "grogu": {"context": grogu_retriever | fmt, "question": RunnablePassthrough()}
        | prompt
        | chat
        | StrOutputParser(),
    }
    qa = grogu_retriever.as_qa_chain()
    rows = []
    for q in questions:
        row = {"qid": q["qid"]}
        for name, chain in chains.items():
            t0 = time.perf_counter()
            row[name] = answered(chain.invoke(q["question"]), q["answers"])
            row[name + "_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        reused = qa.invoke(q["question"])
        row["qa_chain_s"] = time.perf_counter() - t0
        row["qa_chain"] = answered(reused["answer"], q["answers"])
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    wins = sum(r["grogu"] and not r["retriever"] for r in rows)
    losses = sum(r["retriever"] and not r["grogu"] for r in rows)
    n = len(rows)
    print(
        json.dumps(
            {
                "questions": n,
                "retriever_accuracy": sum(r["retriever"] for r in rows) / n,
                "grogu_accuracy": sum(r["grogu"] for r in rows) / n,
                "wins": wins,
                "losses": losses,
                "sign_p": sign_test(wins, losses),
                "qa_chain_equals_chain": sum(r["qa_chain"] == r["grogu"] for r in rows),
                "chain_s": {k: sum(r[k + "_s"] for r in rows) / n for k in ("retriever", "grogu", "qa_chain")},
            },
            indent=1,
        )
    )


def pipeline_args(p: argparse.ArgumentParser, questions: int) -> None:
    """Options of the steps that run a pipeline on held-out SQuAD questions (latency, langchain)."""
    p.add_argument("--questions", type=int, default=questions)
    p.add_argument("--skip", type=int, default=0, help="start after this many held-out questions")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="the target LLM's device (latency: 'cuda' on a GPU)")
    p.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "grogu-bench"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--data", choices=["squad", "nq", "musique", "hotpotqa", "hotpotqa-dev"], default="squad")
    c.add_argument(
        "--data-file",
        default=None,
        help=f"nq: the path of {NQ_FILE} when it is not in ../shared/data; "
        f"hotpotqa: the path of {HOTPOTQA_FILE}; "
        f"hotpotqa-dev: the path of {HOTPOTQA_DEV_FILE}",
    )
    c.add_argument(
        "--split",
        choices=["tune", "held", "all"],
        default="tune",
        help="all: musique and hotpotqa only; hotpotqa-dev: held",
    )
    c.add_argument(
        "--contexts",
        choices=["settings", "wide", "gated"],
        default="settings",
        help="wide: also every context of pipeline_modes.wide_contexts (each selection rule replayed); "
        "gated: the retriever's context, and the settings' candidates only where a gated "
        "setting (gate 'doubt') finds it in doubt",
    )
    c.add_argument("--questions", type=int, default=100)
    c.add_argument(
        "--exclude",
        nargs="*",
        default=[],
        help="files of earlier samples (records, or one question id a line): left out before the draw",
    )
    c.add_argument("--limit", type=int, default=None, help="only the first N of the sampled questions")
    c.add_argument(
        "--top-k", type=int, default=5, help="retrieved (with 10, the report also replays the top-5 of them)"
    )
    c.add_argument("--max-new-tokens", type=int, default=48)
    c.add_argument("--model", default=DEFAULT_MODEL)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--settings", default=None, help="JSON of tuned settings: score only the contexts they choose")
    c.add_argument(
        "--verify",
        type=int,
        default=None,
        help="check the engine's answer against the real synthesizer on the first N questions (default all)",
    )
    c.add_argument("--shard", default="0/1", help="i/n: every n-th question starting at i")
    c.add_argument("--out", required=True)
    c.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "grogu-bench"))
    lat = sub.add_parser("latency")
    lat.add_argument("--settings", required=True)
    lat.add_argument("--data", choices=["squad", "nq", "hotpotqa-dev"], default="squad")
    lat.add_argument("--data-file", default=None)
    lat.add_argument("--exclude", nargs="*", default=[])
    lat.add_argument("--records", default=None, help="--whole-only: one JSON line per question (per-query costs)")
    lat.add_argument("--dtype", default=None, help="the target LLM's dtype (default: bf16 on CUDA, float32 on CPU)")
    lat.add_argument("--save-retrieved", default=None, help="write each question's retrieved nodes here and stop")
    lat.add_argument("--retrieved", default=None, help="take each question's retrieved nodes from this file")
    lat.add_argument("--json", default=None, help="--whole-only: also write the summary to this JSON file")
    lat.add_argument(
        "--retain-prefix-tokens",
        type=int,
        default=0,
        help="the in-process engine's retain_prefix_tokens (prompts kept for later calls; 0: the default)",
    )
    lat.add_argument(
        "--via",
        choices=["process", "service", "llama-cpp-server", "llama-server"],
        default="process",
        help="where grogu scores: in process, through a local grogu service, or (with the pipeline's LLM) "
        "through llama-cpp-python's server or llama.cpp's llama-server",
    )
    lat.add_argument("--llama-server-binary", default=None, help="--via llama-server: its path ($GROGU_LLAMA_SERVER)")
    lat.add_argument("--llama-server-slots", type=int, default=1, help="--via llama-server: its slots (-np)")
    lat.add_argument(
        "--whole-only",
        action="store_true",
        help="only the whole query of each context-mode setting against the plain query engine",
    )
    pipeline_args(lat, questions=20)
    for served in (c, lat):
        served.add_argument(
            "--server",
            default=None,
            help="base URL of an OpenAI-compatible server (vLLM, SGLang, llama-cpp-python) serving "
            "the target LLM: the pipeline's LLM is an OpenAILike on it and grogu scores "
            "through it; --model then names its tokenizer",
        )
        served.add_argument("--served-model", default=None, help="the served model's name (default: the only one)")
        served.add_argument("--top-logprobs", type=int, default=20)
    lc = sub.add_parser("langchain")
    pipeline_args(lc, questions=50)
    r = sub.add_parser("report")
    r.add_argument("--tune", nargs="*", default=[])
    r.add_argument("--eval", nargs="*", default=[])
    r.add_argument("--ks", type=int, nargs="*", default=[5, 10], help="retrieved documents the modes choose from")
    r.add_argument("--settings", default=None)
    r.add_argument("--save-settings", default=None)
    r.add_argument(
        "--tune-by",
        choices=["accuracy", "maximin"],
        default="accuracy",
        help="maximin: never lose on any tuning data set, then the best worst-set gain (pipeline_modes.tune)",
    )
    r.add_argument("--modes", nargs="*", default=None, help="tune only these modes (the others need --settings)")
    ch = sub.add_parser("choose", help="the selective context mode's setting on the tuning records")
    ch.add_argument("--tune", nargs="+", required=True)
    ch.add_argument("--settings", default=None, help="settings to save the chosen one beside")
    ch.add_argument("--save-settings", default=None)
    ch.add_argument("--top", type=int, default=5, help="print this many of the ranked settings")
    ct = sub.add_parser("cost-table", help="where the time goes, calm and doubtful queries apart, from --records")
    ct.add_argument("records", nargs="+")
    ct.add_argument("--arm", default="selective@5")
    ls = sub.add_parser("latency-summary", help="latency --whole-only's summary from its --records file")
    ls.add_argument("records")
    ls.add_argument("--data", default="squad")
    ls.add_argument("--json", default=None)
    args = parser.parse_args()
    # the settings that differ from the command's defaults, for the records' meta
    args.meta_settings = {k: v for k, v in vars(args).items() if v != sub.choices[args.cmd].get_default(k)}
    if args.cmd == "collect":  # it appends (a run resumes): its meta beside it as the collection starts
        write_sidecar(args.out, args.meta_settings)
    if args.cmd == "cost-table":
        cost_table(args)
    elif args.cmd == "latency-summary":
        latency_summary_from_records(args)
    elif args.cmd == "choose":
        from pipeline_modes import choose

        choose(args)
    elif args.cmd == "collect":
        collect(args)
    elif args.cmd == "latency":
        latency(args)
    elif args.cmd == "langchain":
        langchain_arm(args)
    else:
        from pipeline_modes import report

        report(args)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
