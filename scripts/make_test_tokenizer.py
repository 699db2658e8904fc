#!/usr/bin/env python3
"""A GLM-style test tokenizer, and Hugging Face `tokenizers`' encodings of a varied corpus.

The real GLM-5.x vocabulary cannot be downloaded where Ferry is built, so the tests use a
tokenizer with GLM's configuration (byte-level BPE, the split pattern that keeps digit runs of up
to three, the byte-level decoder, GLM's added and special tokens at the end of the vocabulary),
trained on a small corpus to a vocabulary that fits the tiny checkpoints (384 ids). Run where
`tokenizers` is installed (the GPU machine):

  python3 scripts/make_test_tokenizer.py OUT_DIR

OUT_DIR/tokenizer.json is the tokenizer; OUT_DIR/tokenizer_cases.json holds, for every text of
the corpus below, `tokenizers`' ids (no special tokens added) and its decoding of those ids.
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 384
# GLM-4.5 / GLM-5's pre-tokenizer split (keeps digit runs of up to three).
SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# GLM's added tokens, in the published order; the ones a chat turn or tool call is built from.
SPECIAL = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
           "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
           "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>",
           "<|end_of_transcription|>", "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "/nothink"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
         "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]

TRAIN = [
    "The quick brown fox jumps over the lazy dog. It's the dog's day; they're here and we'll see.",
    "def main():\n    for i in range(10):\n        print(i * 2)\n    return 0\n",
    "Invoice INV-472 totals 1234567 dollars, due 2026-12-04 at 09:30.",
    "你好，世界！今天天气很好。我们一起去公园散步吧。模型推理需要很多内存。",
    "Ferry serves GLM models across GPUs and machines with long contexts and little memory.",
    "if (x < 0 && y >= 10) { return a[i] + b[j]; } // comment\n",
    "Numbers: 1 12 123 1234 12345 3.14159 -42 +7 1e-5 0x1F",
    "Bonjour à tous, ça va très bien. Grüße aus München! ¿Qué tal? Привет, мир.",
]

CASES = [
    "Hello, world!",
    "It's John's car; they'RE sure we'll go, I'M told, and you'd agree.",
    "你好，世界！模型推理。",
    "Emoji: 😀👍🏽 👨‍👩‍👧 ❤️ and flags 🇫🇷.",
    "def f(x):\n\treturn x ** 2  # square\n",
    "Digits 1 22 333 4444 55555 666666 and 3.14159, INV-472, 2026-12-04.",
    "Spaces:  two,   three,\t\ttabs, trailing   ",
    "Lines\n\nand\r\nCRLF\r\n\r\n  indented\n    more\n",
    "A turn: <|user|>\nWhat is 2+2?<|assistant|>\n<think>Add them.</think>4<|endoftext|>",
    "[gMASK]<sop><|system|>\nYou are helpful.<|user|>\nhi/nothink",
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
    "Accents: café naïve résumé; combining: e\u0301 a\u0308; Arabic: مرحبا بالعالم; Hindi: नमस्ते",
    "Symbols: ©®™ ½ ¼ → ⇒ ∑ ∞ ≠ ≤ € £ ¥ • … “quotes” ‘single’ «guillemets»",
    "Mixed123abc456def 12ab 1a2b3c x1y22z333",
    "   leading spaces and a final newline\n",
    "\u00a0non-breaking\u2009thin\u3000ideographic space",
    "",
    " ",
    "\n",
    "'s'll'd",
    "<|user|><|user|>text<|observation|>",
]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    n_added = len(SPECIAL) + len(ADDED)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - n_added, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TRAIN * 4, trainer=trainer)
    tok.add_special_tokens(SPECIAL)
    tok.add_tokens(ADDED)
    assert tok.get_vocab_size() <= VOCAB, tok.get_vocab_size()
    tok.save(os.path.join(out, "tokenizer.json"))
    cases = []
    for text in CASES:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    with open(os.path.join(out, "tokenizer_cases.json"), "w") as f:
        json.dump({"made_by": "scripts/make_test_tokenizer.py", "tokenizers": __import__("tokenizers").__version__,
                   "vocab_size": tok.get_vocab_size(), "cases": cases}, f, ensure_ascii=False, indent=1)
    print("vocab", tok.get_vocab_size(), "cases", len(cases))


if __name__ == "__main__":
    main()
