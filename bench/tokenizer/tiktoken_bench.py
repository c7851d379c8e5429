#!/usr/bin/env python3
"""tiktoken's single-thread GPT-2 encoding throughput, measured like
gptx-bench-tokenizer: one untimed warm-up, then the median of --runs timed
enc.encode_ordinary calls on the whole text.

Works offline: the GPT-2 ranks are built from the repository's
data/gpt2/encoder.json and vocab.bpe (the same files gptx loads).

    python3 bench/tokenizer/tiktoken_bench.py [--file data/middlemarch.txt] [--runs 7]
"""
import argparse
import os
import statistics
import time

import tiktoken
import tiktoken.load
from tiktoken_ext.openai_public import r50k_pat_str

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gpt2_encoding(data_dir):
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(data_dir, "gpt2", "vocab.bpe"),
        encoder_json_file=os.path.join(data_dir, "gpt2", "encoder.json"),
    )
    return tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=os.path.join(ROOT, "data", "middlemarch.txt"))
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with open(args.file, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    t0 = time.perf_counter()
    enc = gpt2_encoding(os.path.join(ROOT, "data"))
    load_s = time.perf_counter() - t0
    ids = enc.encode_ordinary(text)  # warm-up
    secs = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        ids = enc.encode_ordinary(text)
        secs.append(time.perf_counter() - t0)
    med = statistics.median(secs)
    print(f"file {args.file}: {len(raw)} bytes -> {len(ids)} tokens")
    print(f"load {1e3 * load_s:.1f} ms (tiktoken {tiktoken.__version__})")
    print(f"tiktoken encode_ordinary: median {1e3 * med:.2f} ms over {args.runs} runs "
          f"(min {1e3 * min(secs):.2f}, max {1e3 * max(secs):.2f}): "
          f"{len(raw) / med / 1e6:.2f} MB/s, {len(ids) / med:.3g} tokens/s")


if __name__ == "__main__":
    main()
