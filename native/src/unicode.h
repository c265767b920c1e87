// unicode.h: strict UTF-8 decoding and the Unicode properties the native text stages read (Python's str/re, tokenizers').
#pragma once

#include <cstdint>
#include <string>

namespace ms {
namespace unicode {

// Code points of strict UTF-8 (no overlong forms, surrogates or values past U+10FFFF); anything else
// is MS_ERR_INPUT "<field>: not valid UTF-8 (byte N)".
std::u32string decode_utf8(const std::string &utf8, const std::string &field);
// The offset of the first byte that is not strict UTF-8, or npos.
size_t invalid_utf8_at(const std::string &utf8);
std::string encode_utf8(const std::u32string &text);
void append_utf8(std::string &out, char32_t c);

// Python's str predicates on one code point (this Python's unicodedata; unicode_tables.inc says which).
bool py_isspace(char32_t c);   // str.isspace, str.split(), re's \s
bool py_isalnum(char32_t c);   // str.isalnum
bool py_isalpha(char32_t c);   // str.isalpha
inline bool re_word(char32_t c) { return c == U'_' || py_isalnum(c); }  // re's \w (Unicode)
// Appends str.lower() of one code point alone (the full mapping: U+0130 gives two code points).
void py_lower_append(char32_t c, std::u32string &out);
// str.lower() of a whole text: each code point's mapping, and a capital sigma that ends a word ς.
std::u32string py_lower(const std::u32string &text);
// The ASCII letter (lower case) that `c` matches under re.IGNORECASE, or 0: a-z, A-Z and the few
// code points Python folds onto them (U+0130, U+0131, U+017F, U+212A).
char32_t re_ignorecase_letter(char32_t c);

// What the `tokenizers` BertNormalizer and BertPreTokenizer do (their Unicode versions, see the tables).
bool tok_removed(char32_t c);        // clean_text drops it (NUL, U+FFFD, controls and formats)
bool tok_whitespace(char32_t c);     // clean_text makes it a space; the pre-tokenizer splits at it
bool tok_nonspacing_mark(char32_t c);// strip_accents drops it after NFD
bool tok_punctuation(char32_t c);    // the pre-tokenizer isolates it (ASCII punctuation and P*)
bool tok_chinese(char32_t c);        // handle_chinese_chars pads it with spaces
uint8_t tok_combining_class(char32_t c);
void tok_nfd_append(char32_t c, std::u32string &out);    // full canonical decomposition, unordered
void tok_lower_append(char32_t c, std::u32string &out);  // Rust's char::to_lowercase

const char *unicode_version();     // of the str/re tables
const char *tokenizers_version();  // the tokenizers release the tokenizer tables were checked against

}  // namespace unicode
}  // namespace ms
