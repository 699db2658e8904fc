#!/usr/bin/env python3
"""A tiny GLM-MoE-DSA checkpoint that replies with a scripted text: a bigram machine.

  python3 scripts/make_scripted_checkpoint.py

reads tests/data/glm-dsa-tiny (config.json, generation_config.json, tokenizer.json and the tensor
layout of model.safetensors) and writes tests/data/glm-dsa-scripted: the three JSON files copied
unchanged and a model.safetensors with the same tensor names, shapes and dtypes and new data.
The output is deterministic (the same bytes on every run). Needs only Python 3's standard library.

Why a bigram machine. End-to-end tests of the OpenAI API's reply parsing (the reasoning split on
</think>, GLM's <tool_call> markup) need a real model, run by the real engine, that writes a known
reply. The weights here make the next token depend on the current (last) token only, through the
table CHAINS below:
  - every attention output projection (o_proj) and every MLP / expert / shared-expert down_proj is
    zero, so no layer adds anything to the residual stream: at every position it stays the token's
    embedding, and logits = lm_head . RMSNorm(embed(last token)) (final norm weight 1);
  - each token of the table that has a successor gets its own basis vector of the hidden space as
    embedding (EMBED_SCALE * e_k), and lm_head[successor] = LOGIT_GAIN * e_k, so the successor's
    logit is LOGIT_GAIN * sqrt(hidden) (about 113) and every other logit 0: greedy decoding, and
    sampling at temperature 1 as well, give the successor;
  - a token outside the table has a zero embedding: all its logits are 0 (the lowest id wins);
  - the reply's last token (<|observation|>) is followed by the end-of-sequence id (THEN_EOS).
A bigram machine cannot write the same token twice with different successors, so no token id may
repeat across the chains (checked below); the words were picked so that their byte-level BPE
tokens are all distinct (see the chain comments). The other tensors (q/kv projections, indexer,
router, gate/up projections) get small deterministic values and the norms 1, so the engine runs
its ordinary paths with finite numbers; their results are thrown away by the zero projections.
"""
import array
import json
import os
import random
import re
import shutil
import struct
import sys
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "data", "glm-dsa-tiny")
DST = os.path.join(ROOT, "tests", "data", "glm-dsa-scripted")
COPIED = ["config.json", "generation_config.json", "tokenizer.json"]

# The chains: (the token the prompt ends with, the text the model then writes, that text's tokens
# as tokenizer.json spells them: byte-level BPE, "Ġ" is a space). The ids are looked up by content
# in tokenizer.json; the tokens must be exactly what the tokenizer makes of the text (checked).
CHAINS = [
    # Thinking off: the prompt ends "<|assistant|><think></think>" (GLM's template), so after
    # </think> comes a tool call, then <|observation|> (a stop token in the real GLM config).
    # "get_weather" would repeat e and t; "weather", "city" (c, it, y) and "Oslo" share no token.
    ("</think>",
     "<tool_call>weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call><|observation|>",
     ["<tool_call>", "w", "e", "a", "t", "he", "r", "<arg_key>", "c", "it", "y", "</arg_key>",
      "<arg_value>", "O", "s", "l", "o", "</arg_value>", "</tool_call>", "<|observation|>"]),
    # Thinking on: the prompt ends "<|assistant|><think>": the reasoning "Sure thing." then
    # </think>, whose successor is the chain above (so the reply is reasoning then the tool call).
    # "Let me check." would repeat e (and share t, he, c with the tool call).
    ("<think>",
     "Sure thing.</think>",
     ["S", "u", "re", "Ġt", "h", "in", "g", ".", "</think>"]),
]

# Tokens whose successor is the checkpoint's end-of-sequence id (generation_config.json's
# eos_token_id, the first if a list), so that generation ends there even when the serving side
# does not stop on <|observation|> and even when sampling (after a token outside the table every
# logit is 0, and sampling would pick any token).
THEN_EOS = ["<|observation|>"]

EMBED_SCALE = 1.0   # a chain token's embedding: EMBED_SCALE * its basis vector
LOGIT_GAIN = 10.0   # lm_head[successor] = LOGIT_GAIN * the current token's basis vector
SMALL = 0.02        # the other matrices: uniform in [-SMALL, SMALL], seeded by the tensor's name


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: byte -> the character that stands for it in the vocabulary."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class Tokenizer:
    """Just enough of tokenizer.json to look tokens up and to encode ASCII text, as the engine does
    (text/tokenizer.h): added tokens matched first (leftmost-longest), GLM's split, byte-level BPE."""

    # GLM's split with \p{L} = [A-Za-z], \p{N} = [0-9]: exact for ASCII text only (asserted).
    SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{1,3}"
                       r"| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        model = j["model"]
        assert model["type"] == "BPE", model["type"]
        self.ids = dict(model["vocab"])
        self.added = {}
        for a in j["added_tokens"]:
            self.added[a["content"]] = a["id"]
            self.ids[a["content"]] = a["id"]
        self.ranks = {}
        for rank, m in enumerate(model["merges"]):
            left, right = m.split(" ", 1) if isinstance(m, str) else m
            self.ranks[(left, right)] = rank
        self.byte_char = bytes_to_unicode()
        self.char_byte = {c: b for b, c in self.byte_char.items()}

    def id(self, token):
        if token not in self.ids:
            sys.exit(f"token {token!r} is not in tokenizer.json")
        return self.ids[token]

    def token_text(self, token):
        """The text a token stands for (an added token is its own text)."""
        if token in self.added:
            return token
        return bytes(self.char_byte[c] for c in token).decode("utf-8")

    def bpe(self, piece):
        parts = [self.byte_char[b] for b in piece.encode("utf-8")]
        while len(parts) > 1:
            best = min(range(len(parts) - 1),
                       key=lambda i: self.ranks.get((parts[i], parts[i + 1]), float("inf")))
            if (parts[best], parts[best + 1]) not in self.ranks:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        return parts

    def encode_tokens(self, text):
        assert text.isascii(), "the split here is exact for ASCII text only"
        tokens = []
        added = sorted(self.added, key=len, reverse=True)
        i = start = 0
        while i <= len(text):
            hit = next((a for a in added if text.startswith(a, i)), None) if i < len(text) else None
            if hit is None and i < len(text):
                i += 1
                continue
            for m in self.SPLIT.finditer(text[start:i]):
                tokens += self.bpe(m.group(0))
            if hit is None:
                break
            tokens.append(hit)
            i += len(hit)
            start = i
        return tokens


def bigram_table(tok, eos):
    """{current id: next id} from CHAINS and THEN_EOS, checked to reproduce every chain and its
    text."""
    table = {}
    for first, text, tokens in CHAINS:
        if "".join(tok.token_text(t) for t in tokens) != text:
            sys.exit(f"the tokens of {text!r} do not spell it")
        encoded = tok.encode_tokens(text)
        if encoded != tokens:
            sys.exit(f"{text!r} encodes to {encoded}, not {tokens}")
        ids = [tok.id(first)] + [tok.id(t) for t in tokens]
        for cur, nxt in zip(ids, ids[1:]):
            if table.setdefault(cur, nxt) != nxt:
                sys.exit(f"token {cur} would need two successors ({table[cur]} and {nxt}): "
                         f"a bigram machine cannot write it twice; pick other words")
    for t in THEN_EOS:
        if table.setdefault(tok.id(t), eos) != eos:
            sys.exit(f"{t!r} has a successor in the chains; it cannot also end the reply")
    if eos in table:
        sys.exit(f"the eos id {eos} is in a chain")
    for first, text, tokens in CHAINS:  # following the table from the start gives the chain
        cur, got = tok.id(first), []
        for _ in tokens:
            cur = table[cur]
            got.append(cur)
        if got != [tok.id(t) for t in tokens]:
            sys.exit(f"the chain after {first!r} loops: {got}")
    return table


def bf16_bytes(values):
    """Little-endian bf16 of floats (float32, rounded to nearest even)."""
    f = array.array("f", values)
    u = array.array("I")
    u.frombytes(f.tobytes())
    out = array.array("H", ((x + 0x7FFF + ((x >> 16) & 1)) >> 16 for x in u))
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def tensor_values(name, shape, table, basis, hidden):
    n = 1
    for d in shape:
        n *= d
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        rows, cols = shape
        assert cols == hidden, (name, shape)
        v = [0.0] * n
        for cur, nxt in table.items():
            k = basis[cur]
            if name == "model.embed_tokens.weight":
                v[cur * cols + k] = EMBED_SCALE
            else:
                v[nxt * cols + k] += LOGIT_GAIN
        return v
    if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
        return [0.0] * n  # nothing is added to the residual stream
    if name.endswith("norm.weight"):
        return [1.0] * n  # every RMSNorm / LayerNorm weight, the final norm included
    if name.endswith(".bias") or name.endswith("e_score_correction_bias"):
        return [0.0] * n
    rng = random.Random(zlib.crc32(name.encode()))
    return [rng.uniform(-SMALL, SMALL) for _ in range(n)]


def main():
    with open(os.path.join(SRC, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "glm_moe_dsa", config["model_type"]
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    assert not config.get("tie_word_embeddings", False), "lm_head must be its own tensor"
    with open(os.path.join(SRC, "generation_config.json")) as f:
        eos = json.load(f).get("eos_token_id", config.get("eos_token_id"))
    eos = eos[0] if isinstance(eos, list) else eos
    assert isinstance(eos, int), "no eos_token_id in generation_config.json or config.json"
    tok = Tokenizer(os.path.join(SRC, "tokenizer.json"))
    table = bigram_table(tok, eos)
    basis = {}  # each token with a successor: its basis vector (in order of first appearance)
    for cur in table:
        basis[cur] = len(basis)
    if len(basis) > hidden:
        sys.exit(f"{len(basis)} chain tokens need more basis vectors than the hidden size {hidden}")
    assert all(0 <= i < vocab for kv in table.items() for i in kv)

    with open(os.path.join(SRC, "model.safetensors"), "rb") as f:
        raw = f.read()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header_bytes = raw[8:8 + header_len]
    header = json.loads(header_bytes)
    tensors = sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                     key=lambda kv: kv[1]["data_offsets"][0])
    data = bytearray(len(raw) - 8 - header_len)
    for name, meta in tensors:
        if meta["dtype"] != "BF16":
            sys.exit(f"{name}: dtype {meta['dtype']}; only BF16 is written")
        begin, end = meta["data_offsets"]
        blob = bf16_bytes(tensor_values(name, meta["shape"], table, basis, hidden))
        if len(blob) != end - begin:
            sys.exit(f"{name}: {len(blob)} bytes for offsets {begin}..{end}")
        data[begin:end] = blob

    os.makedirs(DST, exist_ok=True)
    for name in COPIED:
        shutil.copyfile(os.path.join(SRC, name), os.path.join(DST, name))
    with open(os.path.join(DST, "model.safetensors"), "wb") as f:
        f.write(raw[:8])
        f.write(header_bytes)  # the same layout: names, shapes, dtypes, offsets
        f.write(data)

    print(f"wrote {DST}: {len(tensors)} tensors, {len(table)} bigrams")
    for first, text, tokens in CHAINS:
        print(f"after {first} ({tok.id(first)}): {text!r}")
        print("  ids: " + ",".join(str(tok.id(t)) for t in tokens))
    print("then eos (" + str(eos) + ") after: " + ", ".join(THEN_EOS))


if __name__ == "__main__":
    main()
