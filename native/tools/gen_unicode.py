"""Generates native/src/unicode_tables.inc: the Unicode properties the native text stages read.

Two consumers with two Unicode versions:
- the rules decomposer and the dialogue limits behave as this Python's ``str`` and ``re`` do
  (``str.isspace``, ``isalnum``, ``isalpha``, ``lower``; ``re.IGNORECASE`` on ASCII letters),
  so those properties come from this Python's ``unicodedata``;
- the WordPiece tokenizer behaves as the ``tokenizers`` package does (Rust crates of their own
  Unicode versions: an older one for the nonspacing marks and NFD, Rust's std for lowercase), so
  those tables start from ``unicodedata`` and every code point is then checked against
  ``tokenizers`` itself; where they disagree the table takes what ``tokenizers`` does, and the
  count of such code points is written into the file's header.

Run: python3 native/tools/gen_unicode.py [OUT]   (default native/src/unicode_tables.inc)
"""
from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

import tokenizers
from tokenizers import normalizers, pre_tokenizers

MAX_CP = 0x110000
SURROGATES = range(0xD800, 0xE000)

# flag bits (unicode.cpp keeps the same names)
PY_SPACE, PY_ALNUM, PY_ALPHA, TOK_REMOVE, TOK_SPACE, TOK_MN, TOK_PUNCT, PY_CASE_IGNORABLE, PY_CASED = (1 << i for i in range(9))

# Rust's char::is_whitespace (the White_Space property), which BertNormalizer maps to a space
RUST_WHITESPACE = frozenset([*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                             0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


def python_flags(c: int) -> int:
    ch = chr(c)
    flags = (PY_SPACE * ch.isspace()) | (PY_ALNUM * ch.isalnum()) | (PY_ALPHA * ch.isalpha())
    # str.lower()'s final-sigma rule reads Case_Ignorable and Cased, which Python does not expose:
    # read them off the rule itself. After a cased "A" a capital sigma is final when ``ch`` is skipped
    # (case-ignorable) or is cased; after an uncased "1" only when ``ch`` is cased and not skipped.
    after_cased = ("A" + ch + "\u03a3").lower().endswith("\u03c2")
    after_uncased = ("1" + ch + "\u03a3").lower().endswith("\u03c2")
    if after_cased and not after_uncased:
        flags |= PY_CASE_IGNORABLE
    elif after_cased and after_uncased:
        flags |= PY_CASED
    return flags


def tokenizer_flags_from_unicodedata(c: int) -> int:
    ch = chr(c)
    cat = unicodedata.category(ch)
    flags = 0
    if c in RUST_WHITESPACE:
        flags |= TOK_SPACE
    # BertNormalizer's clean_text drops NUL, U+FFFD and "other" characters except \t \n \r
    # (the crate's "other" is Cc, Cf, Co, Cs: unassigned code points are kept)
    if c == 0 or c == 0xFFFD or (c not in (9, 10, 13) and cat in ("Cc", "Cf", "Co", "Cs")):
        flags |= TOK_REMOVE
    if cat == "Mn":
        flags |= TOK_MN
    if cat.startswith("P") or (c < 128 and ch in r"""!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~"""):
        flags |= TOK_PUNCT
    return flags


def probe_tokenizers(flags: list[int], tok_lower: dict[int, str], nfd: dict[int, str], ccc: dict[int, int]) -> dict[str, int]:
    """Checks the tokenizer tables against ``tokenizers`` on every code point; corrects them in place."""
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    nfd_norm, lower_norm = normalizers.NFD(), normalizers.Lowercase()
    pre = pre_tokenizers.BertPreTokenizer()
    fixed = {"clean": 0, "nfd": 0, "mn": 0, "lower": 0, "punct": 0, "ccc": 0}
    for c in range(MAX_CP):
        if c in SURROGATES:
            continue
        ch = chr(c)
        f = flags[c]
        out = clean.normalize_str(ch)
        want = TOK_REMOVE if out == "" else TOK_SPACE if out == " " and ch != " " else 0
        if c == 0x20:
            want = TOK_SPACE
        if f & (TOK_REMOVE | TOK_SPACE) != want:
            f = (f & ~(TOK_REMOVE | TOK_SPACE)) | want
            fixed["clean"] += 1
        d = nfd_norm.normalize_str(ch)
        if nfd.get(c, ch) != d:
            fixed["nfd"] += 1
            if d == ch:
                nfd.pop(c, None)
            else:
                nfd[c] = d
        if d == ch:  # the mark filter applies to what NFD gives; a decomposed code point never meets it
            is_mn = strip.normalize_str(ch) == ""
            if bool(f & TOK_MN) != is_mn:
                f ^= TOK_MN
                fixed["mn"] += 1
        lo = lower_norm.normalize_str(ch)
        if tok_lower.get(c, ch) != lo:
            fixed["lower"] += 1
            if lo == ch:
                tok_lower.pop(c, None)
            else:
                tok_lower[c] = lo
        if not f & (TOK_REMOVE | TOK_SPACE):
            pieces = [p for p, _ in pre.pre_tokenize_str("a" + ch + "a")]
            is_punct = pieces == ["a", ch, "a"]
            if bool(f & TOK_PUNCT) != is_punct:
                f ^= TOK_PUNCT
                fixed["punct"] += 1
        flags[c] = f
    # canonical ordering: a mark this Python gives a combining class may have none in the crate (an
    # older Unicode): put a mark of another class next to it and see whether NFD reorders them
    for c, k in list(ccc.items()):
        if nfd.get(c, chr(c)) != chr(c):
            continue  # decomposed before ordering: its parts are checked on their own
        ch = chr(c)
        text = "a" + ch + "\u0334" if k > 1 else "a\u0301" + ch  # ccc 1 after it, or ccc 230 before it
        got = nfd_norm.normalize_str(text)
        reordered = got != text
        if not reordered:
            del ccc[c]
            fixed["ccc"] += 1
    return fixed


def re_ignorecase_letters() -> dict[int, int]:
    """Code points (other than the ASCII letter itself) that ``re.IGNORECASE`` matches to an ASCII letter."""
    any_letter = re.compile("[a-z]", re.IGNORECASE)
    out: dict[int, int] = {}
    for c in range(MAX_CP):
        ch = chr(c)
        if c >= 128 and any_letter.fullmatch(ch):
            letters = [a for a in "abcdefghijklmnopqrstuvwxyz" if re.fullmatch(a, ch, re.IGNORECASE)]
            assert len(letters) == 1, (hex(c), letters)
            out[c] = ord(letters[0])
    return out


def emit_map(name: str, mapping: dict[int, str]) -> list[str]:
    """A sorted (code point, start, length) array into a pool of code points."""
    pool: list[int] = []
    rows = []
    for c in sorted(mapping):
        s = [ord(x) for x in mapping[c]]
        rows.append(f"{{0x{c:X}, {len(pool)}, {len(s)}}}")
        pool += s
    lines = [f"static const CodePointMap {name}[] = {{"]
    lines += ["    " + ", ".join(rows[i:i + 6]) + "," for i in range(0, len(rows), 6)]
    lines.append("};")
    lines.append(f"static const char32_t {name}Pool[] = {{")
    lines += ["    " + ", ".join(f"0x{x:X}" for x in pool[i:i + 12]) + "," for i in range(0, len(pool), 12)]
    lines.append("};")
    return lines


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src" / "unicode_tables.inc"
    flags = [0] * MAX_CP
    py_lower: dict[int, str] = {}
    tok_lower: dict[int, str] = {}
    nfd: dict[int, str] = {}
    ccc: dict[int, int] = {}
    for c in range(MAX_CP):
        if c in SURROGATES:
            continue
        ch = chr(c)
        flags[c] = python_flags(c) | tokenizer_flags_from_unicodedata(c)
        if ch.lower() != ch:
            py_lower[c] = ch.lower()
            tok_lower[c] = ch.lower()
        d = unicodedata.normalize("NFD", ch)
        if d != ch:
            nfd[c] = d
        if unicodedata.combining(ch):
            ccc[c] = unicodedata.combining(ch)
    fixed = probe_tokenizers(flags, tok_lower, nfd, ccc)
    ignorecase = re_ignorecase_letters()

    blocks: dict[tuple[int, ...], int] = {}
    index = []
    for b in range(MAX_CP // 256):
        block = tuple(flags[b * 256:(b + 1) * 256])
        index.append(blocks.setdefault(block, len(blocks)))
    lines = [
        "// unicode_tables.inc: generated by native/tools/gen_unicode.py; do not edit.",
        f"// Python {sys.version.split()[0]} unicodedata {unicodedata.unidata_version} (str and re properties);",
        f"// tokenizer tables checked against tokenizers {tokenizers.__version__} on every code point, which differs",
        "// from that unicodedata at: " + ", ".join(f"{k} {v}" for k, v in fixed.items()) + " code points (taken from tokenizers).",
        f"static const char kUnicodeVersion[] = \"{unicodedata.unidata_version}\";",
        f"static const char kTokenizersVersion[] = \"{tokenizers.__version__}\";",
        f"static const uint16_t kFlagIndex[{len(index)}] = {{",
    ]
    lines += ["    " + ", ".join(str(x) for x in index[i:i + 24]) + "," for i in range(0, len(index), 24)]
    lines.append("};")
    lines.append(f"static const uint16_t kFlagBlocks[{len(blocks)}][256] = {{")
    for block in blocks:
        lines.append("    {" + ",".join(str(x) for x in block) + "},")
    lines.append("};")
    lines += emit_map("kPyLower", py_lower)
    lines += emit_map("kTokLower", tok_lower)
    lines += emit_map("kTokNfd", nfd)
    lines.append("static const CodePointClass kTokCcc[] = {")
    items = [f"{{0x{c:X}, {k}}}" for c, k in sorted(ccc.items())]
    lines += ["    " + ", ".join(items[i:i + 8]) + "," for i in range(0, len(items), 8)]
    lines.append("};")
    lines.append("static const CodePointClass kReIgnoreCaseLetter[] = {")
    lines.append("    " + ", ".join(f"{{0x{c:X}, 0x{a:X}}}" for c, a in sorted(ignorecase.items())) + ",")
    lines.append("};")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{out}: {len(blocks)} flag blocks, {len(py_lower)} lower, {len(tok_lower)} tok lower, {len(nfd)} nfd, "
          f"{len(ccc)} ccc, ignorecase {sorted(hex(c) for c in ignorecase)}; fixed from tokenizers {fixed}")


if __name__ == "__main__":
    main()
