"""Reading the documents of the command line (``grogu score``, ``grogu-research rewrite-pairs``) from a file."""

from __future__ import annotations

import json
import sys
from typing import Any


def read_documents(path: str) -> list[Any]:
    """Documents from a .jsonl / .json / text file ("-" reads standard input as text)."""
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    if path.endswith(".jsonl"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if path.endswith(".json"):
        data = json.loads(text)
        if not isinstance(data, list):
            raise SystemExit(f"{path}: expected a JSON list of documents")
        return data
    return [p.strip() for p in text.split("\n\n") if p.strip()]


__all__ = ["read_documents"]
