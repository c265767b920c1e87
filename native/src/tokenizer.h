// tokenizer.h: the BERT WordPiece tokenizer of a bundle's tokenizer.json, id for id as `tokenizers` encodes it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ms {

// The pipeline runtime/stages/embed.py TextTokenizer runs: the tokenizer.json's special tokens split
// out of the raw text, BertNormalizer (clean text, CJK padding, NFD accent stripping, lowercase),
// BertPreTokenizer, WordPiece (## continuations, [UNK], max_input_chars_per_word), then [CLS] ... [SEP]
// truncated to max_length ids. Any other tokenizer.json is MS_ERR_BUNDLE naming the field.
class WordPieceTokenizer {
public:
    static WordPieceTokenizer from_json(const std::string &tokenizer_json, int max_length = 128);
    // Ids of one text, with [CLS]/[SEP]; invalid UTF-8 is MS_ERR_INPUT naming `field`.
    std::vector<int32_t> encode(const std::string &utf8, const std::string &field = "text") const;
    int max_length() const { return max_length_; }
    size_t vocab_size() const { return vocab_.size(); }

    // The normalized text of one segment (no special tokens), as BertNormalizer.normalize_str gives it.
    std::u32string normalize(const std::u32string &text) const;

private:
    std::unordered_map<std::string, int32_t> vocab_;
    std::vector<std::pair<std::u32string, int32_t>> added_;  // special tokens matched on the raw text
    std::vector<int32_t> prefix_ids_, suffix_ids_;            // the template around a single sequence
    std::string continuing_prefix_ = "##";
    int32_t unk_id_ = 0;
    size_t max_input_chars_per_word_ = 100;
    int max_length_ = 128;
    bool clean_text_ = true, handle_chinese_chars_ = true, strip_accents_ = true, lowercase_ = true;

    // Appends the WordPiece ids of the words of one normalized segment until `limit` ids are held.
    void encode_segment(const std::u32string &normalized, std::vector<int32_t> &ids, size_t limit) const;
    void word_pieces(const std::u32string &word, std::vector<int32_t> &ids) const;
};

}  // namespace ms
