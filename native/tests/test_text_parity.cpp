// test_text_parity.cpp: the native text stages (input limits, history, rules, WordPiece) against the Python runtime's parity file.
//
// argv[1]: a bundle folder (its embedder/tokenizer.json is read) or a tokenizer.json itself;
// argv[2]: a folder holding text_parity.jsonl (bench/native_text_parity.py writes it) or that file.
// Every line must match: per turn the refusal (MS_ERR_INPUT) or the sub-tasks, the retrieval texts
// and their token ids; per text its ids (or its str.lower()); per byte string whether it is UTF-8. Exit 0 = all match,
// 1 = a mismatch (the first ones are printed), 77 = no parity file (skipped).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dialogue.h"
#include "error.h"
#include "json.h"
#include "rules.h"
#include "tokenizer.h"
#include "unicode.h"

namespace {

bool is_dir(const std::string &path) {
    std::ifstream probe(path + "/.");
    return probe.good();
}

std::string read_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::string();
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

struct Counts {
    long turns = 0, refusals = 0, texts = 0, lowered = 0, byte_strings = 0, mismatches = 0;
};

std::string hex_bytes(const std::string &hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 3 || std::string(argv[1]).empty() || std::string(argv[2]).empty()) {
        std::fprintf(stderr, "usage: %s BUNDLE_DIR|tokenizer.json DATA_DIR|text_parity.jsonl (skipped: no paths)\n", argv[0]);
        return 77;
    }
    std::string tokenizer_path = argv[1];
    if (tokenizer_path.size() < 5 || tokenizer_path.compare(tokenizer_path.size() - 5, 5, ".json") != 0)
        tokenizer_path += "/embedder/tokenizer.json";
    std::string parity_path = argv[2];
    if (is_dir(parity_path)) parity_path += "/text_parity.jsonl";
    std::ifstream parity(parity_path);
    if (!parity) {
        std::fprintf(stderr, "skipped: no parity file %s (python -m magicselector.bench.native_text_parity writes it)\n",
                     parity_path.c_str());
        return 77;
    }
    std::string tokenizer_json = read_file(tokenizer_path);
    if (tokenizer_json.empty()) {
        std::fprintf(stderr, "FAIL: cannot read %s\n", tokenizer_path.c_str());
        return 1;
    }
    const ms::WordPieceTokenizer tokenizer = ms::WordPieceTokenizer::from_json(tokenizer_json, 128);

    ms::InputLimits limits;
    std::string mode = "questions";
    int history_turns = 4;
    std::map<std::string, Counts> counts;
    long shown = 0;
    double seconds = 0;
    auto mismatch = [&](Counts &c, const std::string &part, const std::string &what, const ms::json &row) {
        ++c.mismatches;
        if (shown++ < 20) std::cerr << "MISMATCH [" << part << "] " << what << "\n  " << row.dump(-1, ' ', false, ms::json::error_handler_t::replace).substr(0, 1500) << "\n";
    };
    std::string line;
    long lineno = 0;
    while (std::getline(parity, line)) {
        ++lineno;
        ms::json row = ms::json::parse(line, nullptr, false);
        if (row.is_discarded()) {
            std::fprintf(stderr, "FAIL: %s line %ld is not JSON\n", parity_path.c_str(), lineno);
            return 1;
        }
        std::string kind = row.value("kind", "");
        if (kind == "header") {
            const ms::json &cfg = row["config"];
            mode = cfg["history"].get<std::string>();
            history_turns = cfg["history_turns"].get<int>();
            limits.max_query_chars = cfg["max_query_chars"].get<int>();
            limits.max_history_turns = cfg["max_history_turns"].get<int>();
            limits.max_history_chars = cfg["max_history_chars"].get<int>();
            limits.max_subtasks = cfg["max_subtasks"].get<int>();
            if (cfg["decompose"] != "rules" || row["max_length"] != 128) {
                std::fprintf(stderr, "FAIL: the parity file was written for another configuration\n");
                return 1;
            }
            continue;
        }
        std::string part = row.value("part", "?");
        Counts &c = counts[part];
        auto started = std::chrono::steady_clock::now();
        if (kind == "utf8") {
            ++c.byte_strings;
            std::string bytes = hex_bytes(row["hex"].get<std::string>());
            bool valid = ms::unicode::invalid_utf8_at(bytes) == std::string::npos;
            bool refused = false;
            try {
                tokenizer.encode(bytes, "text");
            } catch (const ms::Error &e) {
                refused = e.status() == MS_ERR_INPUT;
            }
            if (valid != row["valid"].get<bool>() || refused == valid) mismatch(c, part, "UTF-8 validity", row);
        } else if (kind == "lower") {
            ++c.lowered;
            std::string lowered = ms::unicode::encode_utf8(ms::unicode::py_lower(ms::unicode::decode_utf8(row["text"].get<std::string>(), "text")));
            if (lowered != row["lower"].get<std::string>()) mismatch(c, part, "str.lower()", row);
        } else if (kind == "text") {
            ++c.texts;
            std::vector<int32_t> ids = tokenizer.encode(row["text"].get<std::string>());
            if (ids != row["ids"].get<std::vector<int32_t>>()) mismatch(c, part, "token ids of a text", row);
        } else if (kind == "turn") {
            ++c.turns;
            bool expect_error = !row["error"].is_null();
            try {
                if (!row["query"].is_string()) ms::fail(MS_ERR_INPUT, "query: the utterance must be a string");
                std::string query = ms::validate_query(row["query"].get<std::string>(), limits);
                std::vector<ms::Turn> turns = ms::bounded_history_json(row["history"], limits);
                std::vector<std::string> tasks = ms::decompose_rules(query, turns);
                std::vector<std::string> texts = ms::selection_texts(query, turns, tasks, true, mode, history_turns,
                                                                     limits.max_subtasks);
                if (expect_error) {
                    mismatch(c, part, "Python refuses this turn, native does not", row);
                } else if (tasks != row["tasks"].get<std::vector<std::string>>()) {
                    ms::json got = tasks;
                    mismatch(c, part, "sub-tasks; native: " + got.dump(), row);
                } else if (texts != row["texts"].get<std::vector<std::string>>()) {
                    ms::json got = texts;
                    mismatch(c, part, "retrieval texts; native: " + got.dump(), row);
                } else {
                    const ms::json &ids = row["ids"];
                    for (size_t i = 0; i < texts.size(); ++i) {
                        ++c.texts;
                        if (tokenizer.encode(texts[i]) != ids[i].get<std::vector<int32_t>>()) {
                            mismatch(c, part, "token ids of retrieval text " + std::to_string(i), row);
                            break;
                        }
                    }
                }
            } catch (const ms::Error &e) {
                if (expect_error && e.status() == MS_ERR_INPUT) {
                    ++c.refusals;
                } else {
                    mismatch(c, part, std::string("native refused (") + e.what() + ")", row);
                }
            }
        } else {
            std::fprintf(stderr, "FAIL: line %ld has an unknown kind '%s'\n", lineno, kind.c_str());
            return 1;
        }
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    }
    long total_mismatches = 0;
    ms::json report = ms::json::object();
    for (const auto &kv : counts) {
        report[kv.first] = {{"turns", kv.second.turns},       {"refusals", kv.second.refusals},
                            {"texts", kv.second.texts},       {"lowered", kv.second.lowered},
                            {"byte_strings", kv.second.byte_strings},
                            {"mismatches", kv.second.mismatches}};
        total_mismatches += kv.second.mismatches;
    }
    std::cout << ms::json({{"parity", parity_path},
                           {"tokenizer", tokenizer_path},
                           {"unicode", ms::unicode::unicode_version()},
                           {"tokenizers", ms::unicode::tokenizers_version()},
                           {"seconds", seconds},
                           {"parts", report},
                           {"mismatches", total_mismatches}})
                     .dump(1)
              << "\n";
    return total_mismatches == 0 ? 0 : 1;
}
