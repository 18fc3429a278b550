"""Read one string from a GGUF file's metadata without loading the file: the chat template
(``tokenizer.chat_template``), which transformers' GGUF tokenizer loader does not carry over."""

from __future__ import annotations

import mmap
import struct

#: byte sizes of GGUF's scalar value types (8: string, 9: array)
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_string(path: str, key: str) -> str | None:
    """The string value of ``key`` in the GGUF file's metadata (version 2 or 3), or None when absent."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        (version,) = struct.unpack_from("<I", buf, 4)
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported (2 or later)")
        (count,) = struct.unpack_from("<Q", buf, 16)
        pos = 24

        def string(at: int) -> tuple[bytes, int]:
            (n,) = struct.unpack_from("<Q", buf, at)
            return buf[at + 8 : at + 8 + n], at + 8 + n

        def skip(kind: int, at: int) -> int:
            if kind == 8:
                return string(at)[1]
            if kind == 9:
                inner, n = struct.unpack_from("<IQ", buf, at)
                at += 12
                if inner in _SIZES:
                    return at + n * _SIZES[inner]
                for _ in range(n):
                    at = skip(inner, at)
                return at
            return at + _SIZES[kind]

        for _ in range(count):
            name, pos = string(pos)
            (kind,) = struct.unpack_from("<I", buf, pos)
            pos += 4
            if name.decode("utf-8", "replace") == key and kind == 8:
                return string(pos)[0].decode("utf-8")
            pos = skip(kind, pos)
    return None


def with_gguf_chat_template(tokenizer: object, gguf_path: str) -> object:
    """The tokenizer, given the GGUF's own chat template when it has none (a tokenizer that has one
    keeps it; a GGUF without one, such as a base model's, leaves plain prompts)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer
    template = gguf_string(gguf_path, "tokenizer.chat_template")
    if template:
        tokenizer.chat_template = template
    return tokenizer
