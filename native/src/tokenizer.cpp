// tokenizer.cpp: BertNormalizer + BertPreTokenizer + WordPiece + the [CLS]/[SEP] template, read from tokenizer.json.
#include "tokenizer.h"

#include <algorithm>

#include "error.h"
#include "json.h"
#include "unicode.h"

namespace ms {
namespace {

[[noreturn]] void bad(const std::string &field, const std::string &what) {
    fail(MS_ERR_BUNDLE, "tokenizer.json " + field + ": " + what);
}

const json &member(const json &obj, const char *key, const std::string &where) {
    if (!obj.is_object()) bad(where, "must be an object");
    auto it = obj.find(key);
    if (it == obj.end()) bad(where + "." + key, "missing");
    return *it;
}

bool flag(const json &obj, const char *key, const std::string &where, bool absent) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return absent;
    if (!it->is_boolean()) bad(where + "." + key, "must be true or false");
    return it->get<bool>();
}

std::string string_of(const json &value, const std::string &where) {
    if (!value.is_string()) bad(where, "must be a string");
    std::string s = value.get<std::string>();
    if (unicode::invalid_utf8_at(s) != std::string::npos) bad(where, "not valid UTF-8");
    return s;
}

int32_t id_of(const json &value, const std::string &where) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX)
        bad(where, "must be a non-negative integer id");
    return static_cast<int32_t>(value.get<int64_t>());
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_json(const std::string &tokenizer_json, int max_length) {
    if (max_length < 2) fail(MS_ERR_ARGUMENT, "tokenizer max_length must be at least 2, got " + std::to_string(max_length));
    WordPieceTokenizer tok;
    tok.max_length_ = max_length;
    // model.vocab is nearly all of the file (30,522 entries in 0.7 MB): its entries go straight into
    // vocab_ as they are read instead of into a DOM map that is copied and freed, which halves the
    // tokenizer's share of a cold start. Depths are nlohmann's: the root object's keys are depth 1,
    // model's keys depth 2, vocab's keys and ids depth 3. A later "model" or "vocab" replaces an
    // earlier one, as the DOM would.
    tok.vocab_.reserve(tokenizer_json.size() / 16);
    std::string root_key, model_key, vocab_key;
    bool in_model = false, in_vocab = false, vocab_seen = false;
    const json::parser_callback_t take_vocab = [&](int depth, json::parse_event_t event, json &parsed) -> bool {
        using ev = json::parse_event_t;
        if (in_vocab && depth == 3) {
            // key and id both left out of the DOM (a kept key would put a placeholder in its map)
            if (event == ev::key) {
                vocab_key = std::move(parsed.get_ref<std::string &>());
                if (unicode::invalid_utf8_at(vocab_key) != std::string::npos) bad("model.vocab", "a token is not valid UTF-8");
                return false;
            }
            if (event == ev::value) {
                if (!parsed.is_number_integer() || parsed.get<int64_t>() < 0 || parsed.get<int64_t>() > INT32_MAX)
                    bad("model.vocab[" + vocab_key + "]", "must be a non-negative integer id");
                tok.vocab_.insert_or_assign(std::move(vocab_key), static_cast<int32_t>(parsed.get<int64_t>()));
                return false;
            }
            if (event == ev::object_start || event == ev::array_start) bad("model.vocab[" + vocab_key + "]", "must be a non-negative integer id");
        }
        if (event == ev::key && depth == 1) root_key = parsed.get<std::string>();
        if (event == ev::key && depth == 2 && in_model) model_key = parsed.get<std::string>();
        if (event == ev::object_start && depth == 1 && root_key == "model") in_model = true;
        if (event == ev::object_end && depth == 1) in_model = false;
        if (event == ev::object_start && depth == 2 && in_model && model_key == "vocab") {
            in_vocab = vocab_seen = true;
            tok.vocab_.clear();
        }
        if (event == ev::object_end && depth == 2) in_vocab = false;
        return true;
    };
    json doc = parse_json(tokenizer_json, MS_ERR_BUNDLE, "tokenizer.json", kMaxJsonDepth, take_vocab);
    if (!doc.is_object()) bad("(file)", "must be a JSON object");

    const json &model = member(doc, "model", "");
    const json &type = member(model, "type", "model");
    if (type != "WordPiece") bad("model.type", "this core reads WordPiece tokenizers only");
    const json &vocab = member(model, "vocab", "model");
    if (!vocab.is_object() || !vocab_seen || tok.vocab_.empty()) bad("model.vocab", "must be a non-empty object of token -> id");
    std::string unk = string_of(member(model, "unk_token", "model"), "model.unk_token");
    auto unk_it = tok.vocab_.find(unk);
    if (unk_it == tok.vocab_.end()) bad("model.unk_token", "not in the vocabulary");
    tok.unk_id_ = unk_it->second;
    if (model.contains("continuing_subword_prefix"))
        tok.continuing_prefix_ = string_of(model["continuing_subword_prefix"], "model.continuing_subword_prefix");
    if (model.contains("max_input_chars_per_word")) {
        const json &m = model["max_input_chars_per_word"];
        if (!m.is_number_integer() || m.get<int64_t>() < 1) bad("model.max_input_chars_per_word", "must be a positive integer");
        tok.max_input_chars_per_word_ = static_cast<size_t>(m.get<int64_t>());
    }

    const json &norm = member(doc, "normalizer", "");
    if (!norm.is_object() || norm.value("type", "") != "BertNormalizer")
        bad("normalizer", "this core reads a BertNormalizer only");
    tok.clean_text_ = flag(norm, "clean_text", "normalizer", true);
    tok.handle_chinese_chars_ = flag(norm, "handle_chinese_chars", "normalizer", true);
    tok.lowercase_ = flag(norm, "lowercase", "normalizer", true);
    tok.strip_accents_ = flag(norm, "strip_accents", "normalizer", tok.lowercase_);  // null: as lowercase

    const json &pre = member(doc, "pre_tokenizer", "");
    if (!pre.is_object() || pre.value("type", "") != "BertPreTokenizer")
        bad("pre_tokenizer", "this core reads a BertPreTokenizer only");

    if (doc.contains("added_tokens")) {
        const json &added = doc["added_tokens"];
        if (!added.is_array()) bad("added_tokens", "must be a list");
        for (size_t i = 0; i < added.size(); ++i) {
            std::string where = "added_tokens[" + std::to_string(i) + "]";
            const json &a = added[i];
            std::string content = string_of(member(a, "content", where), where + ".content");
            if (flag(a, "normalized", where, true) || flag(a, "lstrip", where, false) || flag(a, "rstrip", where, false) ||
                flag(a, "single_word", where, false))
                bad(where, "only special tokens matched as written (normalized, lstrip, rstrip, single_word false) are read");
            if (content.empty()) bad(where + ".content", "must not be empty");
            tok.added_.emplace_back(unicode::decode_utf8(content, where + ".content"), id_of(member(a, "id", where), where + ".id"));
        }
    }

    const json &post = member(doc, "post_processor", "");
    if (!post.is_object() || post.value("type", "") != "TemplateProcessing")
        bad("post_processor", "this core reads a TemplateProcessing post-processor only");
    const json &single = member(post, "single", "post_processor");
    const json &specials = member(post, "special_tokens", "post_processor");
    if (!single.is_array()) bad("post_processor.single", "must be a list");
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
        std::string where = "post_processor.single[" + std::to_string(i) + "]";
        const json &piece = single[i];
        if (piece.is_object() && piece.contains("Sequence")) {
            if (seen_sequence) bad(where, "a single-sequence template holds one sequence");
            seen_sequence = true;
        } else if (piece.is_object() && piece.contains("SpecialToken")) {
            std::string name = string_of(member(piece["SpecialToken"], "id", where + ".SpecialToken"), where + ".SpecialToken.id");
            const json &ids = member(member(specials, name.c_str(), "post_processor.special_tokens"), "ids",
                                     "post_processor.special_tokens." + name);
            if (!ids.is_array()) bad("post_processor.special_tokens." + name + ".ids", "must be a list");
            for (const json &id : ids)
                (seen_sequence ? tok.suffix_ids_ : tok.prefix_ids_).push_back(id_of(id, "post_processor.special_tokens." + name + ".ids"));
        } else {
            bad(where, "must be a Sequence or a SpecialToken");
        }
    }
    if (!seen_sequence) bad("post_processor.single", "has no Sequence");
    if (tok.prefix_ids_.size() + tok.suffix_ids_.size() >= static_cast<size_t>(max_length))
        fail(MS_ERR_ARGUMENT, "tokenizer max_length " + std::to_string(max_length) + " leaves no room past the special tokens");
    return tok;
}

std::u32string WordPieceTokenizer::normalize(const std::u32string &text) const {
    std::u32string cleaned;
    cleaned.reserve(text.size());
    for (char32_t c : text) {
        if (clean_text_) {
            if (unicode::tok_removed(c)) continue;
            if (unicode::tok_whitespace(c)) c = U' ';
        }
        if (handle_chinese_chars_ && unicode::tok_chinese(c)) {
            cleaned.push_back(U' ');
            cleaned.push_back(c);
            cleaned.push_back(U' ');
        } else {
            cleaned.push_back(c);
        }
    }
    std::u32string stripped;
    if (strip_accents_) {
        std::u32string decomposed;
        decomposed.reserve(cleaned.size());
        for (char32_t c : cleaned) unicode::tok_nfd_append(c, decomposed);
        // canonical ordering: each run of combining marks stably sorted by combining class
        size_t i = 0;
        while (i < decomposed.size()) {
            if (unicode::tok_combining_class(decomposed[i]) == 0) {
                ++i;
                continue;
            }
            size_t j = i;
            while (j < decomposed.size() && unicode::tok_combining_class(decomposed[j]) != 0) ++j;
            if (j - i > 1)
                std::stable_sort(decomposed.begin() + i, decomposed.begin() + j, [](char32_t a, char32_t b) {
                    return unicode::tok_combining_class(a) < unicode::tok_combining_class(b);
                });
            i = j;
        }
        stripped.reserve(decomposed.size());
        for (char32_t c : decomposed)
            if (!unicode::tok_nonspacing_mark(c)) stripped.push_back(c);
    } else {
        stripped = std::move(cleaned);
    }
    if (!lowercase_) return stripped;
    std::u32string lowered;
    lowered.reserve(stripped.size());
    for (char32_t c : stripped) unicode::tok_lower_append(c, lowered);
    return lowered;
}

void WordPieceTokenizer::word_pieces(const std::u32string &word, std::vector<int32_t> &ids) const {
    if (word.size() > max_input_chars_per_word_) {
        ids.push_back(unk_id_);
        return;
    }
    // byte offsets of every code point boundary of the word's UTF-8
    std::string utf8;
    std::vector<size_t> bounds;
    bounds.reserve(word.size() + 1);
    for (char32_t c : word) {
        bounds.push_back(utf8.size());
        unicode::append_utf8(utf8, c);
    }
    bounds.push_back(utf8.size());
    size_t first = ids.size();
    size_t start = 0;  // index into bounds
    std::string piece;
    while (start < word.size()) {
        size_t end = word.size();
        int32_t found = -1;
        while (start < end) {
            piece.clear();
            if (start > 0) piece += continuing_prefix_;
            piece.append(utf8, bounds[start], bounds[end] - bounds[start]);
            auto it = vocab_.find(piece);
            if (it != vocab_.end()) {
                found = it->second;
                break;
            }
            --end;
        }
        if (found < 0) {  // a word with a part the vocabulary lacks is one [UNK]
            ids.resize(first);
            ids.push_back(unk_id_);
            return;
        }
        ids.push_back(found);
        start = end;
    }
}

void WordPieceTokenizer::encode_segment(const std::u32string &normalized, std::vector<int32_t> &ids, size_t limit) const {
    std::u32string word;
    auto flush = [&]() {
        if (!word.empty() && ids.size() < limit) word_pieces(word, ids);
        word.clear();
    };
    for (char32_t c : normalized) {
        if (ids.size() >= limit) return;
        if (unicode::tok_whitespace(c)) {
            flush();
        } else if (unicode::tok_punctuation(c)) {
            flush();
            word.push_back(c);
            flush();
        } else {
            word.push_back(c);
        }
    }
    flush();
}

std::vector<int32_t> WordPieceTokenizer::encode(const std::string &utf8, const std::string &field) const {
    std::u32string text = unicode::decode_utf8(utf8, field);
    const size_t limit = static_cast<size_t>(max_length_) - prefix_ids_.size() - suffix_ids_.size();
    std::vector<int32_t> body;
    size_t segment_start = 0, i = 0;
    while (i <= text.size() && body.size() < limit) {
        // the longest special token starting here (leftmost-longest, as tokenizers matches them)
        size_t best = 0;
        int32_t best_id = 0;
        if (i < text.size()) {
            for (const auto &a : added_) {
                const std::u32string &t = a.first;
                if (t.size() > best && text.compare(i, t.size(), t) == 0) best = t.size(), best_id = a.second;
            }
        }
        if (best == 0 && i < text.size()) {
            ++i;
            continue;
        }
        if (i > segment_start) encode_segment(normalize(text.substr(segment_start, i - segment_start)), body, limit);
        if (best == 0) break;  // the end of the text
        if (body.size() < limit) body.push_back(best_id);
        i += best;
        segment_start = i;
    }
    if (body.size() > limit) body.resize(limit);
    std::vector<int32_t> ids(prefix_ids_);
    ids.insert(ids.end(), body.begin(), body.end());
    ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
    return ids;
}

}  // namespace ms
