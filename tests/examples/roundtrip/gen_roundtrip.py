"""Makes the round trip's fixtures (tests/examples/data/roundtrip/), once, outside CI.

    python3 tests/examples/roundtrip/gen_roundtrip.py BUILD_DIR LLMC_DIR

BUILD_DIR holds gptx's programs (BUILD_DIR/examples/gptx-*), LLMC_DIR a checkout of
karpathy/llm.c (its train_gpt2.c, llmc/; LLMC_REV=<commit> names it when it is no git
checkout). Needs PyTorch 2, transformers, safetensors,
numpy and a C compiler. The path it records is a user's (docs/export.md, "Round trip"):

  1. gptx trains a model (gptx-train; a GPT-2 BPE of the first 743 merges, 1000 ids, so the
     fixtures stay small) and exports it (gptx-export --format hf / llmc);
  2. transformers loads the export: logits, loss, greedy tokens; continues training it
     (AdamW, 10 steps) and saves it (save_pretrained): hf_continued/;
  3. llm.c's own train_gpt2.c (llmc_driver.c) loads the llm.c export: the same figures;
     continues training it (10 steps) and writes it: llmc_continued.bin;
  4. the tokenizers: transformers' ids of the bundled texts (GPT-2, and the small BPE) and
     llm.c's decoding of them through the gpt2_tokenizer.bin gptx-export writes;
  5. nanoGPT: a model in nanoGPT's layout (its names, _orig_mod., nn.Linear, bias=False)
     saved as its ckpt.pt, converted by the one command of docs/checkpoints.md: nanogpt/.

tests/examples/roundtrip.sh (ctest example_roundtrip) then checks gptx against every
figure: logits within 1e-4, the loss within 2e-5, the same greedy tokens, the same ids.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
OUT = os.path.join(ROOT, "tests", "examples", "data", "roundtrip")
DATA = os.path.join(ROOT, "data")
MERGES = 743  # 256 bytes + 743 merges + <|endoftext|> = 1000 ids
PROMPT, GREEDY, POSITIONS, T = 8, 20, [0, 21, 42, 63], 64


def run(*cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def fnv_ids(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def small_tokenizer(dst):
    """GPT-2's byte tokens and first MERGES merges, end-of-text last: GPT-2's ids are in
    merge order, which is checked."""
    enc = json.load(open(os.path.join(DATA, "gpt2", "encoder.json"), encoding="utf-8"))
    lines = open(os.path.join(DATA, "gpt2", "vocab.bpe"), encoding="utf-8").read().split("\n")
    merges = lines[1:1 + MERGES]
    for i, m in enumerate(merges):
        a, b = m.split(" ")
        assert enc[a + b] == 256 + i, (m, enc[a + b])
    small = {t: i for t, i in enc.items() if i < 256 + MERGES}
    small["<|endoftext|>"] = 256 + MERGES
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "encoder.json"), "w", encoding="utf-8") as f:
        json.dump(small, f, ensure_ascii=False)
    with open(os.path.join(dst, "vocab.bpe"), "w", encoding="utf-8") as f:
        f.write(lines[0] + "\n" + "\n".join(merges) + "\n")


def write_expect(name, probe, logits_rows, loss, greedy):
    np.asarray(logits_rows, dtype="<f4").tofile(os.path.join(OUT, name + ".logits"))
    with open(os.path.join(OUT, name + ".txt"), "w") as f:
        f.write("probe " + " ".join(map(str, probe)) + "\n")
        f.write("positions " + " ".join(map(str, POSITIONS)) + "\n")
        f.write(f"loss {loss:.9g}\nprompt {PROMPT}\n")
        f.write("greedy " + " ".join(map(str, greedy)) + "\n")


def torch_figures(model, probe, vocab):
    """Logits at POSITIONS, mean loss, greedy tokens (argmax of the real vocabulary)."""
    model.eval()
    with torch.no_grad():
        x = torch.tensor([probe[:T]])
        logits = model(x)
        logits = logits.logits if hasattr(logits, "logits") else logits
        logits = logits[0, :, :vocab].float()
        loss = F.cross_entropy(logits, torch.tensor(probe[1:T + 1])).item()
        ids = list(probe[:PROMPT])
        for _ in range(GREEDY):
            out = model(torch.tensor([ids]))
            out = out.logits if hasattr(out, "logits") else out
            ids.append(int(out[0, -1, :vocab].argmax()))
    return [logits[p].numpy() for p in POSITIONS], loss, ids[PROMPT:]


def hf_continue(a_hf, ids, steps=10, lr=1e-3):
    from transformers import GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel.from_pretrained(a_hf, dtype=torch.float32, attn_implementation="eager")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for s in range(steps):
        x = torch.tensor([ids[(s * 4 + b) * T:(s * 4 + b + 1) * T] for b in range(4)])
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"transformers step {s + 1}: loss {loss.item():.4f}")
    return model


class NanoBlock(torch.nn.Module):
    """nanoGPT's Block: its module names, nn.Linear, no biases (bias=False)."""

    def __init__(self, C, H, exact_gelu):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(C, bias=False)
        self.attn = torch.nn.Module()
        self.attn.c_attn = torch.nn.Linear(C, 3 * C, bias=False)
        self.attn.c_proj = torch.nn.Linear(C, C, bias=False)
        self.ln_2 = torch.nn.LayerNorm(C, bias=False)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc = torch.nn.Linear(C, 4 * C, bias=False)
        self.mlp.c_proj = torch.nn.Linear(4 * C, C, bias=False)
        self.H, self.gelu = H, "none" if exact_gelu else "tanh"

    def forward(self, x):
        B, T_, C = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T_, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn.c_proj(y.transpose(1, 2).reshape(B, T_, C))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate=self.gelu))


class NanoGPT(torch.nn.Module):
    def __init__(self, V, C, L, H, block_size, exact_gelu):
        super().__init__()
        self.transformer = torch.nn.ModuleDict(dict(
            wte=torch.nn.Embedding(V, C), wpe=torch.nn.Embedding(block_size, C),
            h=torch.nn.ModuleList([NanoBlock(C, H, exact_gelu) for _ in range(L)]),
            ln_f=torch.nn.LayerNorm(C, bias=False)))
        self.lm_head = torch.nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as nanoGPT

    def forward(self, idx):
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(idx.shape[1]))
        for blk in tr.h:
            x = blk(x)
        return self.lm_head(tr.ln_f(x))


def nanogpt(tmp):
    args = dict(n_layer=2, n_head=2, n_embd=16, block_size=T, bias=False, vocab_size=96, dropout=0.0)
    torch.manual_seed(7)
    model = NanoGPT(96, 16, 2, 2, T, exact_gelu=False)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
    sd = {"_orig_mod." + k: v for k, v in model.state_dict().items()}  # compile=True's names
    os.makedirs(os.path.join(tmp, "out"), exist_ok=True)
    torch.save({"model": sd, "model_args": args, "iter_num": 0}, os.path.join(tmp, "out", "ckpt.pt"))
    # the one command of docs/checkpoints.md, as written
    doc = open(os.path.join(ROOT, "docs", "checkpoints.md"), encoding="utf-8").read()
    block = doc.split("<!-- nanogpt: begin -->")[1].split("<!-- nanogpt: end -->")[0]
    cmd = block.split("```sh\n")[1].split("```")[0]
    run("bash", "-euo", "pipefail", "-c", cmd.replace("python3 ", sys.executable + " "), cwd=tmp)
    shutil.copytree(os.path.join(tmp, "nano"), os.path.join(OUT, "nanogpt"))
    probe = [int(i) for i in torch.randint(0, 96, (T + 1,), generator=torch.Generator().manual_seed(3))]
    rows, loss, greedy = torch_figures(model, probe, 96)
    write_expect("nanogpt_tanh", probe, rows, loss, greedy)
    exact = NanoGPT(96, 16, 2, 2, T, exact_gelu=True)
    exact.load_state_dict(model.state_dict())
    erows, eloss, _ = torch_figures(exact, probe, 96)
    d = max(float(np.abs(a - b).max()) for a, b in zip(rows, erows))
    return {"nanogpt_exact_gelu_max_dlogit": f"{d:.3g}", "nanogpt_exact_gelu_dloss": f"{eloss - loss:.3g}"}


def main():
    build, llmc = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    from transformers import AutoTokenizer, GPT2LMHeadModel, GPT2TokenizerFast
    import safetensors
    import transformers
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    tmp = tempfile.mkdtemp(prefix="gptx_roundtrip_")
    bin_ = lambda p: os.path.join(build, "examples", p)
    tokdir = os.path.join(OUT, "tokenizer")
    small_tokenizer(tokdir)
    enc, voc = os.path.join(tokdir, "encoder.json"), os.path.join(tokdir, "vocab.bpe")
    verdict = os.path.join(DATA, "the-verdict.txt")
    env = {}

    # 1. gptx trains and exports
    run(bin_("gptx-train"), "--text", verdict, "--encoder", enc, "--vocab", voc,
        "--vocab-size", 1000, "--padded-vocab", 1024, "--layers", 2, "--heads", 2, "--width", 16,
        "--context", T, "--batch", 8, "--steps", 80, "--lr", "1e-2", "--eval-every", 0,
        "--sample-tokens", 0, "--threads", 2, "--seed", 1, "--out-dir", os.path.join(tmp, "a"))
    a = os.path.join(OUT, "gptx_model.safetensors")
    shutil.copy(os.path.join(tmp, "a", "model.safetensors"), a)
    a_hf, a_bin = os.path.join(tmp, "a_hf"), os.path.join(tmp, "a_llmc", "model.bin")
    os.makedirs(os.path.dirname(a_bin))
    run(bin_("gptx-export"), "--model", a, "--format", "hf", "--out", a_hf, "--encoder", enc, "--vocab", voc)
    run(bin_("gptx-export"), "--model", a, "--format", "llmc", "--out", a_bin, "--encoder", enc, "--vocab", voc)
    env["A_HF_SHA256"] = sha256(os.path.join(a_hf, "model.safetensors"))
    env["A_LLMC_SHA256"] = sha256(a_bin)
    env["A_LLMC_TOKENIZER_SHA256"] = sha256(os.path.join(tmp, "a_llmc", "gpt2_tokenizer.bin"))

    # 2. transformers: the export's figures, then training continued and saved
    tok = AutoTokenizer.from_pretrained(a_hf)
    ids = tok(open(verdict, encoding="utf-8").read())["input_ids"]
    env["SMALL_VERDICT_IDS"], env["SMALL_VERDICT_FNV"] = str(len(ids)), fnv_ids(ids)
    probe = ids[1000:1000 + T + 1]
    m = GPT2LMHeadModel.from_pretrained(a_hf, dtype=torch.float32, attn_implementation="eager")
    write_expect("a_hf", probe, *torch_figures(m, probe, 1000))
    b = hf_continue(a_hf, ids)
    b.save_pretrained(os.path.join(OUT, "hf_continued"))
    write_expect("hf_continued", probe, *torch_figures(b, probe, 1000))
    for f in os.listdir(os.path.join(OUT, "hf_continued")):
        if f not in ("model.safetensors", "config.json"):
            os.remove(os.path.join(OUT, "hf_continued", f))

    # 3. llm.c: its train_gpt2.c on the export, then training continued and written
    drv = os.path.join(tmp, "llmc_driver")
    run("cc", "-O2", f'-DLLMC_SOURCE="{llmc}/train_gpt2.c"', "-I" + llmc,
        os.path.join(os.path.dirname(__file__), "llmc_driver.c"), "-lm", "-o", drv)
    np.asarray(probe, dtype="<i4").tofile(os.path.join(tmp, "probe.bin"))
    np.asarray(ids, dtype="<i4").tofile(os.path.join(tmp, "ids.bin"))
    pos = [str(p) for p in POSITIONS]
    run(drv, "eval", a_bin, os.path.join(tmp, "probe.bin"), PROMPT, GREEDY, os.path.join(OUT, "a_llmc"), *pos)
    c = os.path.join(OUT, "llmc_continued.bin")
    run(drv, "train", a_bin, os.path.join(tmp, "ids.bin"), 10, "1e-3", c)
    run(drv, "eval", c, os.path.join(tmp, "probe.bin"), PROMPT, GREEDY, os.path.join(OUT, "llmc_continued"), *pos)

    # 4. the GPT-2 tokenizer: transformers' ids, llm.c's decoding through gptx-export's file
    gdir = os.path.join(tmp, "gpt2tok")  # the bundled files under transformers' names
    os.makedirs(gdir)
    shutil.copy(os.path.join(DATA, "gpt2", "encoder.json"), os.path.join(gdir, "vocab.json"))
    shutil.copy(os.path.join(DATA, "gpt2", "vocab.bpe"), os.path.join(gdir, "merges.txt"))
    gpt2 = GPT2TokenizerFast.from_pretrained(gdir)
    g_bin = os.path.join(tmp, "g", "model.bin")
    os.makedirs(os.path.dirname(g_bin))
    run(bin_("gptx-export"), "--model", a, "--format", "llmc", "--out", g_bin)
    env["GPT2_LLMC_TOKENIZER_SHA256"] = sha256(os.path.join(tmp, "g", "gpt2_tokenizer.bin"))
    for name in ("the-verdict", "tinyshakespeare", "middlemarch"):
        text = open(os.path.join(DATA, name + ".txt"), "rb").read().decode("utf-8")
        gid = gpt2(text)["input_ids"]
        assert len(gid) > 1000, (name, len(gid))
        key = name.replace("-", "_").upper()
        env[f"GPT2_{key}_IDS"], env[f"GPT2_{key}_FNV"] = str(len(gid)), fnv_ids(gid)
        np.asarray(gid, dtype="<i4").tofile(os.path.join(tmp, "gid.bin"))
        out = run(drv, "decode", os.path.join(tmp, "g", "gpt2_tokenizer.bin"),
                  os.path.join(tmp, "gid.bin"), capture_output=True, text=True).stdout
        env[f"LLMC_{key}_DECODE_FNV"] = out.strip().split("\n")[-1]

    # 5. nanoGPT's layout through the documented command
    notes = nanogpt(tmp)

    with open(os.path.join(OUT, "expect.env"), "w") as f:
        f.write("# written by tests/examples/roundtrip/gen_roundtrip.py\n")
        for k, v in env.items():
            f.write(f"{k}={v}\n")
    llmc_rev = os.environ.get("LLMC_REV") or subprocess.run(
        ["git", "-C", llmc, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    with open(os.path.join(OUT, "versions.txt"), "w") as f:
        f.write(f"torch {torch.__version__}\ntransformers {transformers.__version__}\n"
                f"safetensors {safetensors.__version__}\nnumpy {np.__version__}\n"
                f"llm.c {llmc_rev}\n")
        for k, v in notes.items():
            f.write(f"{k} {v}\n")
    shutil.rmtree(tmp)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
