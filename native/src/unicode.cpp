// unicode.cpp: strict UTF-8 and table lookups over the generated unicode_tables.inc.
#include "unicode.h"

#include <algorithm>
#include <cstddef>

#include "error.h"

namespace ms {
namespace unicode {
namespace {

struct CodePointMap {
    uint32_t cp;
    uint32_t start;
    uint8_t length;
};
struct CodePointClass {
    uint32_t cp;
    uint32_t value;
};

#include "unicode_tables.inc"

enum : uint16_t {
    kPySpace = 1,
    kPyAlnum = 2,
    kPyAlpha = 4,
    kTokRemove = 8,
    kTokSpace = 16,
    kTokMn = 32,
    kTokPunct = 64,
    kPyCaseIgnorable = 128,
    kPyCased = 256,
};

inline uint16_t flags(char32_t c) {
    if (c >= 0x110000) return 0;
    return kFlagBlocks[kFlagIndex[c >> 8]][c & 0xFF];
}

template <size_t N>
const CodePointMap *find_map(const CodePointMap (&table)[N], char32_t c) {
    const CodePointMap *end = table + N;
    const CodePointMap *it = std::lower_bound(table, end, c, [](const CodePointMap &m, char32_t v) { return m.cp < v; });
    return it != end && it->cp == c ? it : nullptr;
}

template <size_t N>
const CodePointClass *find_class(const CodePointClass (&table)[N], char32_t c) {
    const CodePointClass *end = table + N;
    const CodePointClass *it =
        std::lower_bound(table, end, c, [](const CodePointClass &m, char32_t v) { return m.cp < v; });
    return it != end && it->cp == c ? it : nullptr;
}

template <size_t N, size_t P>
void append_mapped(const CodePointMap (&table)[N], const char32_t (&pool)[P], char32_t c, std::u32string &out) {
    const CodePointMap *m = find_map(table, c);
    if (m == nullptr) {
        out.push_back(c);
        return;
    }
    out.append(pool + m->start, m->length);
}

// The length of the UTF-8 sequence at `p` (1-4), or 0 when it is not strict UTF-8; `cp` gets its value.
size_t decode_one(const unsigned char *p, size_t left, char32_t &cp) {
    unsigned char b = p[0];
    if (b < 0x80) {
        cp = b;
        return 1;
    }
    size_t n;
    char32_t min;
    if ((b & 0xE0) == 0xC0) {
        n = 2, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
        n = 3, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
        n = 4, cp = b & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (left < n) return 0;
    for (size_t i = 1; i < n; ++i) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0;
    return n;
}

}  // namespace

size_t invalid_utf8_at(const std::string &utf8) {
    const unsigned char *p = reinterpret_cast<const unsigned char *>(utf8.data());
    size_t i = 0, size = utf8.size();
    while (i < size) {
        char32_t cp;
        size_t n = decode_one(p + i, size - i, cp);
        if (n == 0) return i;
        i += n;
    }
    return std::string::npos;
}

std::u32string decode_utf8(const std::string &utf8, const std::string &field) {
    std::u32string out;
    out.reserve(utf8.size());
    const unsigned char *p = reinterpret_cast<const unsigned char *>(utf8.data());
    size_t i = 0, size = utf8.size();
    while (i < size) {
        char32_t cp;
        size_t n = decode_one(p + i, size - i, cp);
        if (n == 0) fail(MS_ERR_INPUT, field + ": not valid UTF-8 (byte " + std::to_string(i) + ")");
        out.push_back(cp);
        i += n;
    }
    return out;
}

void append_utf8(std::string &out, char32_t c) {
    if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

std::string encode_utf8(const std::u32string &text) {
    std::string out;
    out.reserve(text.size());
    for (char32_t c : text) append_utf8(out, c);
    return out;
}

bool py_isspace(char32_t c) { return flags(c) & kPySpace; }
bool py_isalnum(char32_t c) { return flags(c) & kPyAlnum; }
bool py_isalpha(char32_t c) { return flags(c) & kPyAlpha; }

void py_lower_append(char32_t c, std::u32string &out) {
    if (c < 0x80) {
        out.push_back(c >= U'A' && c <= U'Z' ? c + 32 : c);
        return;
    }
    append_mapped(kPyLower, kPyLowerPool, c, out);
}

// Python's final-sigma context for the capital sigma at text[i]: a cased letter before it and none
// after it, case-ignorable characters skipped both ways (unicodeobject.c handle_capital_sigma)
bool final_sigma(const std::u32string &text, size_t i) {
    size_t j = i;
    while (j > 0 && (flags(text[j - 1]) & kPyCaseIgnorable)) --j;
    if (j == 0 || !(flags(text[j - 1]) & kPyCased)) return false;
    size_t k = i + 1;
    while (k < text.size() && (flags(text[k]) & kPyCaseIgnorable)) ++k;
    return k == text.size() || !(flags(text[k]) & kPyCased);
}

std::u32string py_lower(const std::u32string &text) {
    std::u32string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == 0x3A3)
            out.push_back(final_sigma(text, i) ? 0x3C2 : 0x3C3);
        else
            py_lower_append(text[i], out);
    }
    return out;
}

char32_t re_ignorecase_letter(char32_t c) {
    if (c >= U'a' && c <= U'z') return c;
    if (c >= U'A' && c <= U'Z') return c + 32;
    if (c < 0x80) return 0;
    const CodePointClass *m = find_class(kReIgnoreCaseLetter, c);
    return m ? static_cast<char32_t>(m->value) : 0;
}

bool tok_removed(char32_t c) { return flags(c) & kTokRemove; }
bool tok_whitespace(char32_t c) { return flags(c) & kTokSpace; }
bool tok_nonspacing_mark(char32_t c) { return flags(c) & kTokMn; }
bool tok_punctuation(char32_t c) { return flags(c) & kTokPunct; }

bool tok_chinese(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

uint8_t tok_combining_class(char32_t c) {
    if (c < 0x300) return 0;
    const CodePointClass *m = find_class(kTokCcc, c);
    return m ? static_cast<uint8_t>(m->value) : 0;
}

void tok_nfd_append(char32_t c, std::u32string &out) {
    if (c < 0xC0) {
        out.push_back(c);
        return;
    }
    append_mapped(kTokNfd, kTokNfdPool, c, out);
}

void tok_lower_append(char32_t c, std::u32string &out) {
    if (c < 0x80) {
        out.push_back(c >= U'A' && c <= U'Z' ? c + 32 : c);
        return;
    }
    append_mapped(kTokLower, kTokLowerPool, c, out);
}

const char *unicode_version() { return kUnicodeVersion; }
const char *tokenizers_version() { return kTokenizersVersion; }

}  // namespace unicode
}  // namespace ms
