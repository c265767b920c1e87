// test_tokenizer_json.cpp: tokenizer.json as the core reads it (model.vocab streamed into the tokenizer's
// map while the rest is parsed as a DOM): the same vocabulary as a whole-document parse, and a
// malformed vocabulary is MS_ERR_BUNDLE naming the field.
//
// Usage: test_tokenizer_json [BUNDLE [DATA]]. The small documents below always run; with a bundle its
// embedder/tokenizer.json is also read both ways and must give the same vocabulary size.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "error.h"
#include "json.h"
#include "tokenizer.h"

using ms_test::check;
using ms_test::failures;

namespace {

// A minimal BERT tokenizer.json around `model` (the text of the "model" member) and `extra` root members.
std::string document(const std::string &model, const std::string &extra = "") {
    return R"({"added_tokens": [{"id": 2, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],)"
           R"( "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},)"
           R"( "pre_tokenizer": {"type": "BertPreTokenizer"},)"
           R"( "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],)"
           R"( "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2]}, "[SEP]": {"id": "[SEP]", "ids": [3]}}},)" +
           extra + R"( "model": )" + model + "}";
}

const std::string kVocab = R"({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "##s": 5})";

std::string wordpiece(const std::string &vocab) {
    return R"({"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": )" +
           vocab + "}";
}

// The status of reading `doc`, MS_OK when it was read; an error's message must name `field`.
ms_status read_status(const std::string &doc, const std::string &field, const std::string &what) {
    try {
        ms::WordPieceTokenizer::from_json(doc, 16);
    } catch (const ms::Error &e) {
        check(std::string(e.what()).find(field) != std::string::npos,
              what + ": message '" + e.what() + "' does not name '" + field + "'");
        return e.status();
    }
    return MS_OK;
}

std::string read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace

int main(int argc, char **argv) {
    try {
        const auto tok = ms::WordPieceTokenizer::from_json(document(wordpiece(kVocab)), 16);
        check(tok.vocab_size() == 6, "six tokens read, got " + std::to_string(tok.vocab_size()));
        check(tok.encode("Hellos") == std::vector<int32_t>({2, 4, 5, 3}), "'Hellos' is [CLS] hello ##s [SEP]");
        check(tok.encode("bye") == std::vector<int32_t>({2, 1, 3}), "an unknown word is [UNK]");

        // a repeated token keeps its last id, as a whole-document parse (and Python's json) does
        const auto twice = ms::WordPieceTokenizer::from_json(
            document(wordpiece(R"({"[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "hello": 7})")), 16);
        check(twice.encode("hello") == std::vector<int32_t>({2, 7, 3}), "a repeated token keeps its last id");
        check(twice.vocab_size() == 4, "a repeated token counts once");

        // a later "model" replaces an earlier one, so its vocabulary is the one read
        const auto later = ms::WordPieceTokenizer::from_json(
            document(wordpiece(R"({"[UNK]": 1, "hello": 9})"), R"( "model": )" + wordpiece(kVocab) + ","), 16);
        check(later.encode("hello") == std::vector<int32_t>({2, 9, 3}), "the last model's vocabulary is read");
        // vocab-shaped objects elsewhere are not the vocabulary
        const auto elsewhere = ms::WordPieceTokenizer::from_json(
            document(wordpiece(kVocab), R"( "vocab": {"hello": 8}, "decoder": {"vocab": {"hello": 8}},)"), 16);
        check(elsewhere.encode("hello") == std::vector<int32_t>({2, 4, 3}), "only model.vocab is the vocabulary");

        const std::string field = "model.vocab";
        check(read_status(document(wordpiece("{}")), field, "empty vocab") == MS_ERR_BUNDLE, "an empty vocab is refused");
        check(read_status(document(wordpiece(R"(["hello"])")), field, "vocab list") == MS_ERR_BUNDLE, "a vocab list is refused");
        check(read_status(document(wordpiece(R"({"[UNK]": 1, "hello": {"id": 4}})")), "model.vocab[hello]", "object id") ==
                  MS_ERR_BUNDLE, "an object as an id is refused");
        check(read_status(document(wordpiece(R"({"[UNK]": 1, "hello": [4]})")), "model.vocab[hello]", "list id") ==
                  MS_ERR_BUNDLE, "a list as an id is refused");
        check(read_status(document(wordpiece(R"({"[UNK]": 1, "hello": -4})")), "model.vocab[hello]", "negative id") ==
                  MS_ERR_BUNDLE, "a negative id is refused");
        check(read_status(document(wordpiece(R"({"[UNK]": 1, "hello": 4.5})")), "model.vocab[hello]", "fractional id") ==
                  MS_ERR_BUNDLE, "a fractional id is refused");
        check(read_status(document(wordpiece(R"({"[UNK]": 1, "hello": 3000000000})")), "model.vocab[hello]", "huge id") ==
                  MS_ERR_BUNDLE, "an id past int32 is refused");
        // (nlohmann's lexer refuses it first: "not valid JSON"; either way the file is named)
        check(read_status(document(wordpiece("{\"[UNK]\": 1, \"he\xff\": 4}")), "tokenizer.json", "bad UTF-8") == MS_ERR_BUNDLE,
              "a token that is not UTF-8 is refused");
        check(read_status(document(wordpiece(R"({"hello": 4})")), "model.unk_token", "no [UNK]") == MS_ERR_BUNDLE,
              "a vocabulary without its unk_token is refused");
        check(read_status(document(R"({"type": "WordPiece", "unk_token": "[UNK]"})"), field, "no vocab") == MS_ERR_BUNDLE,
              "a model without a vocab is refused");
        check(read_status(document(wordpiece(kVocab)).substr(0, 400), "tokenizer.json", "truncated") == MS_ERR_BUNDLE,
              "a truncated file is refused");

        // the bundle's own file: the streamed vocabulary is the whole-document one
        if (argc > 1 && argv[1][0] != '\0') {
            const std::string text = read_file(std::string(argv[1]) + "/embedder/tokenizer.json");
            if (text.empty()) {
                check(false, std::string("cannot read ") + argv[1] + "/embedder/tokenizer.json");
            } else {
                const ms::json whole = ms::parse_json(text, MS_ERR_BUNDLE, "tokenizer.json");
                const auto streamed = ms::WordPieceTokenizer::from_json(text, 128);
                check(streamed.vocab_size() == whole["model"]["vocab"].size(),
                      "the bundle's vocabulary: " + std::to_string(streamed.vocab_size()) + " tokens streamed, " +
                          std::to_string(whole["model"]["vocab"].size()) + " in the document");
                std::printf("tokenizer.json of the bundle: %zu tokens\n", streamed.vocab_size());
            }
        }
    } catch (const ms::Error &e) {
        std::fprintf(stderr, "FAIL: unexpected error %d: %s\n", int(e.status()), e.what());
        return 1;
    }
    if (failures) return 1;
    std::printf("tokenizer.json: ok\n");
    return 0;
}
