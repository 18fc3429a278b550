"""Builds the bundled ``grogu audit --example`` data (src/grogu/data/audit_example.json): a small corpus,
twelve questions and three retrieval set-ups over it — the packaged MiniLM's top 3, its top 1, and 3
documents drawn at random (seed 0).

    python examples/audit_example_data.py
"""

from __future__ import annotations

import json
import os
import random

CORPUS = [
    (
        "Canberra",
        "Canberra is the capital city of Australia. It was chosen in 1908 as a compromise between Sydney and Melbourne.",
    ),
    ("Sydney", "Sydney is the largest city in Australia and home to the Sydney Opera House, opened in 1973."),
    (
        "Mount Everest",
        "Mount Everest, on the border of Nepal and China, is the highest mountain above sea level at 8,849 metres.",
    ),
    ("K2", "K2 is the second-highest mountain on Earth, at 8,611 metres, in the Karakoram range."),
    ("Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600, set in Denmark."),
    ("Don Quixote", "Don Quixote is a Spanish novel by Miguel de Cervantes, published in two parts in 1605 and 1615."),
    ("Water", "Water boils at 100 degrees Celsius at sea level; at higher altitude it boils at a lower temperature."),
    ("Mercury", "Mercury is the smallest planet of the Solar System and the closest to the Sun."),
    ("Jupiter", "Jupiter is the largest planet in the Solar System, a gas giant with more than ninety moons."),
    ("Penicillin", "Penicillin was discovered by Alexander Fleming in 1928 at St Mary's Hospital in London."),
    ("Insulin", "Insulin was first used to treat diabetes in 1922 by Frederick Banting and Charles Best in Toronto."),
    ("Bananas", "Bananas are yellow when ripe and grow in tropical climates."),
    ("Platypus", "The platypus is an egg-laying mammal found in eastern Australia."),
    ("Great Wall", "The Great Wall of China stretches over 21,000 kilometres across northern China."),
    ("Amazon", "The Amazon is the largest rainforest on Earth, and its river carries more water than any other."),
    ("Nile", "The Nile, about 6,650 kilometres long, flows north through eleven countries into the Mediterranean Sea."),
]
QUESTIONS = [
    "What is the capital of Australia?",
    "What is the highest mountain on Earth?",
    "Who wrote Hamlet?",
    "At what temperature does water boil at sea level?",
    "Which planet is the largest in the Solar System?",
    "Who discovered penicillin?",
    "How long is the Nile?",
    "Who wrote Don Quixote?",
    "Which planet is closest to the Sun?",
    "Who first used insulin to treat diabetes?",
    "How long is the Great Wall of China?",
    "What is the second-highest mountain on Earth?",
]


def main() -> None:
    from sentence_transformers import SentenceTransformer

    from grogu.runtime.models import embedded_embedder_path

    docs = [{"id": f"doc-{i}", "title": t, "text": x} for i, (t, x) in enumerate(CORPUS)]
    model = SentenceTransformer(embedded_embedder_path(), device="cpu")
    d = model.encode([x for _, x in CORPUS], normalize_embeddings=True)
    q = model.encode(QUESTIONS, normalize_embeddings=True)
    rng = random.Random(0)
    setups: dict[str, list] = {"minilm-top3": [], "minilm-top1": [], "random-3": []}
    for question, row in zip(QUESTIONS, q @ d.T):
        order = sorted(range(len(docs)), key=lambda i: -float(row[i]))
        setups["minilm-top3"].append({"query": question, "documents": [docs[i] for i in order[:3]]})
        setups["minilm-top1"].append({"query": question, "documents": [docs[order[0]]]})
        setups["random-3"].append({"query": question, "documents": rng.sample(docs, 3)})
    path = os.path.join(os.path.dirname(__file__), "..", "src", "grogu", "data", "audit_example.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"setups": setups}, f, ensure_ascii=False, indent=1)
    print(path)


if __name__ == "__main__":
    main()
