#!/usr/bin/env python3
"""Generates tests/text/reference.txt: GPT-2 token ids from tiktoken for
texts that exercise every part of the tokenizer. Run once (needs tiktoken,
no network; the ranks are built from the repository's data/gpt2 files):

    pip install tiktoken
    python3 tests/text/make_reference.py

Reference behaviour
-------------------
* Valid UTF-8: enc.encode_ordinary(text) (special = 0) or
  enc.encode(text, allowed_special={"<|endoftext|>"}) (special = 1).
* Invalid UTF-8 (what gptx documents): the bytes split into maximal runs of
  valid UTF-8 and maximal runs of bytes that are not part of a valid
  character. Valid runs are encoded as above; each invalid run is one BPE
  piece, enc._encode_single_piece(run). tiktoken's private
  enc._encode_bytes(b) instead BPE-encodes everything from the last piece
  before the first invalid byte to the end of the input as a single piece
  (no pre-tokenization); the file notes for each invalid case whether that
  happens to give the same ids.

Characters are drawn only from those assigned in Python's Unicode database
(unicodedata.unidata_version, 14.0.0 for Python 3.11), which is also the
version of the PCRE2 10.42 tables gptx was tested with.

File format, one case per 4 lines (hex: the raw input bytes):
    case <name>
    special <0|1>
    text <hex>
    ids <count> <id> ...
Lines starting with '#' are comments.
"""
import os
import random
import re
import unicodedata

import tiktoken
import tiktoken.load
from tiktoken_ext.openai_public import r50k_pat_str

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EOT = "<|endoftext|>"


def gpt2():
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(ROOT, "data", "gpt2", "vocab.bpe"),
        encoder_json_file=os.path.join(ROOT, "data", "gpt2", "encoder.json"))
    return tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={EOT: 50256})


enc = gpt2()


def encode_valid(text, special):
    if special:
        return enc.encode(text, allowed_special={EOT}, disallowed_special=())
    return enc.encode_ordinary(text)


def reference(data, special):
    """ids for arbitrary bytes (see the module docstring)."""
    s = data.decode("utf-8", "surrogateescape")  # invalid bytes -> U+DC80..U+DCFF
    ids = []
    for run in re.findall(r"[\udc80-\udcff]+|[^\udc80-\udcff]+", s):
        if "\udc80" <= run[0] <= "\udcff":
            ids += enc._encode_single_piece(run.encode("utf-8", "surrogateescape"))
        else:
            ids += encode_valid(run, special)
    return ids


def is_valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


CASES = []


def add(name, text, special=(0,)):
    data = text.encode("utf-8") if isinstance(text, str) else text
    for sp in special:
        CASES.append((f"{name}" + (f" special={sp}" if len(special) > 1 else ""), sp, data))


def fixed_cases():
    add("prose", "The quick brown fox jumps over the lazy dog. It was the best of times, it was "
        "the worst of times; it was the age of wisdom.\nA new paragraph begins here.")
    add("empty", "")
    for i, t in enumerate(["a  b", "a   b", "a\t\tb", "line\n\n\nnext", "trailing   ", "   leading",
                           "\n", " ", "  ", "\t \n \t", "a \n b", "x\r\ny", "end\n\n", "a\n  b",
                           " \n", "words  with   many    spaces", "\n\n\n\n", "tab\tsep\tvalues\n",
                           "    indented code\n        more\n"]):
        add(f"whitespace {i}", t)
    for i, t in enumerate(["123", "1234567", "3.14159", "1,000,000", "year 2024", "v1.2.3", " 42",
                           "x2y3", "0x7FFF", "12abc34", "٣٤٥ ¾ Ⅻ ²"]):
        add(f"numbers {i}", t)
    for i, t in enumerate(["it's", "don't", "they're", "we've", "I'm", "you'll", "he'd", "IT'S",
                           "DON'T", "'S", "'s'", "'ll've", "O'Neil", "rock 'n' roll", "the '90s",
                           "y'all'd've", "It'S", "she 's"]):
        add(f"contraction {i}", t)
    for i, t in enumerate(["Hello, world!", "...", "?!?!", "(a)[b]{c}", "a--b", "@#$%^&*",
                           "\"quoted\"", "<html><body>", "<|", "|>", "<|endoftext", " !!! ",
                           "a.b,c;d:e", "—dash– “curly” ‘quotes’ …", "\\n \\t"]):
        add(f"punctuation {i}", t)
    for i, t in enumerate(["café", "naïve", "Ünïcödé façade", "Ångström", "résumé", "e\u0301",
                           "Straße", "ÀÉÎÕÜ àéîõü"]):
        add(f"accented {i}", t)
    for i, t in enumerate(["日本語のテキスト", "中文文本，标点。", "한국어 문장", "カタカナ ひらがな"]):
        add(f"cjk {i}", t)
    for i, t in enumerate(["😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🇫🇷🇩🇪", "❤️",
                           "I ❤ 🍕 and 🐍!", "🏳️\u200d🌈 flag", "x😀y"]):
        add(f"emoji {i}", t)
    for i, t in enumerate(["Hello мир 世界 مرحبا שלום", "Γειά σου κόσμε", "नमस्ते दुनिया",
                           "สวัสดีชาวโลก", "Привет, как дела?", "abc日本def", "ℕ∑∫ ≤≥ ∞"]):
        add(f"mixed scripts {i}", t)
    for i, t in enumerate(["a<|endoftext|>b", "<|endoftext|>", "<|endoftext|><|endoftext|>",
                           " <|endoftext|> ", "<|endoftext", "<<|endoftext|>>",
                           "end.<|endoftext|>Start", "x <|endoftext|>\n\ny",
                           "<|endoftext|>'s"]):
        add(f"endoftext {i}", t, special=(0, 1))
    for i, t in enumerate(["\x85", "a\x85b", "  \x85a", "a\xa0b", "  \xa0a", "a\u180eb",
                           "  \u180ea", "a\u200bb", "a\u3000b", "  \u3000a", "a\u2028b", "a\x1cb",
                           "  \x1ca", "a\x00b", "\x00\x01\x02\x7f", "a\ufeffb"]):
        add(f"special spaces {i}", t)
    invalid = [b"\xff", b"abc\xffdef", b"\xc3", b"\xe2\x82", b"\xe2\x82 abc", b"\xc0\xaf",
               b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80\x80", b"\xf8\x88\x80\x80\x80",
               "é".encode("latin-1") + b"t" + "é".encode("latin-1"), b" \xff ", b"\xff\n\n",
               b"hello wor\xe2\x82", b" \xe2\x82", b"hi \xf0\x9f\x98", b"\xff\xfe abc \xe2\x82 def",
               b"it\xff's", b"\xe2\x82\xac\xe2\x82", b"\xc3\xa9\xc3", b"a\xffb\xfec\xfd",
               b"   \xff   ", b"\xf0\x9f\x98\x80\xf0\x9f\x98"]
    for i, t in enumerate(invalid):
        add(f"invalid utf-8 {i}", t)
    add("invalid utf-8 around endoftext", b"\xff<|endoftext|>\xfe", special=(0, 1))
    with open(os.path.join(ROOT, "data", "the-verdict.txt"), "rb") as f:
        verdict = f.read()
    add("the-verdict bytes 0..4096", verdict[:4096])
    add("the-verdict bytes 9000..12000", verdict[9000:12000])
    # pieces longer than TOK_SMALL_PIECE (128 bytes) take the heap path
    add("long letters", "abcdefghij" * 40)
    add("long word", "pneumonoultramicroscopicsilicovolcanoconiosis" * 6)
    add("long digits", "31415926535897932384626433832795028841971" * 10)
    add("long whitespace", " " * 300 + "x" + "\n" * 200 + "y\t\t" + " \t" * 150)
    add("long punctuation", "!?.-=+*" * 60)
    add("long invalid", bytes(range(0x80, 0x100)) * 2)
    add("long cjk", "日本語のテキスト" * 30)


def random_cases():
    rng = random.Random(20240520)
    pool = [c for c in map(chr, range(0x30000))
            if unicodedata.category(c) not in ("Cn", "Cs", "Co")]
    ws = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000", "\u2028",
          "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\x1c"]
    words = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", " the", EOT, "123", "4567",
             "hello", " world", "é", "日本語", "😀", "👨\u200d👩\u200d👧"]
    for i in range(150):
        parts = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            if r < 0.3:
                parts.append(chr(rng.randrange(128)).encode())
            elif r < 0.45:
                parts.append(rng.choice(ws).encode())
            elif r < 0.65:
                parts.append(rng.choice(pool).encode())
            elif r < 0.85:
                parts.append(rng.choice(words).encode())
            else:
                parts.append(bytes([rng.randint(0x80, 0xff)]))
        add(f"random mix {i}", b"".join(parts), special=(rng.randint(0, 1),))
    for i in range(40):
        add(f"random bytes {i}", bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))))


def main():
    fixed_cases()
    random_cases()
    out = os.path.join(HERE, "reference.txt")
    agree = disagree = 0
    with open(out, "w") as f:
        f.write(f"# GPT-2 ids from tiktoken {tiktoken.__version__} (Unicode "
                f"{unicodedata.unidata_version}); generated by make_reference.py, do not edit\n")
        for name, sp, data in CASES:
            ids = reference(data, sp)
            assert enc.decode_bytes(ids) == data
            if is_valid_utf8(data):
                assert ids == encode_valid(data.decode("utf-8"), sp)
            elif not sp:
                same = enc._encode_bytes(data) == ids
                agree += same
                disagree += not same
                f.write(f"# invalid UTF-8; tiktoken _encode_bytes gives {'the same' if same else 'other'} ids\n")
            f.write(f"case {name}\nspecial {sp}\ntext {data.hex()}\n")
            f.write(f"ids {len(ids)}" + "".join(f" {t}" for t in ids) + "\n")
    print(f"wrote {len(CASES)} cases to {out}; invalid UTF-8 cases where _encode_bytes agrees: "
          f"{agree}, differs: {disagree}")


if __name__ == "__main__":
    main()
