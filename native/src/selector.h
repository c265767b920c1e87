// selector.h: the shipped selection (runtime/selector.py Selector.select) over a bundle: its settings, a request, each stage's output and the Selection as JSON.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bundle.h"
#include "dialogue.h"
#include "embed.h"
#include "index.h"
#include "json.h"
#include "lexical.h"
#include "stages.h"
#include "tokenizer.h"

namespace ms {

// The SelectorConfig() settings this core honours, at their shipped values. `from_json` reads an
// ms_open options object: an unknown key or a wrong type is MS_ERR_ARGUMENT naming it, a setting the
// core cannot honour (rerank, the LLM decomposer, another cut rule) MS_ERR_UNSUPPORTED naming it.
struct Options {
    std::string history = "questions";
    int history_turns = 4;
    int candidates = 30;
    CutConfig cut;
    bool lexical = true;
    double lexical_weight = 0.15;
    int lexical_candidates = 30;
    bool head = true;
    int threads = 1;
    std::string decompose = "rules";
    InputLimits limits;
    // the config's default budget: SelectorConfig's max_tools=5 (docs/bench/agent.md), no token bound;
    // the options' "max_tools": null lifts it (only the cut decides)
    Budget budget{5, -1};
    bool embedder = true;  // open the GGUF embedder (verify checks the later stages without it)
    // false: listed files are size-checked but not hashed (a faster start, where the bundle's signature
    // or the app's own install check vouches for the bytes); Selector.from_bundle's verify
    bool verify = true;
    bool ranked_ids = false;  // the Selection also carries the whole ranked list (ids), for evaluation
    static Options from_json(const std::string &options_json);
    json to_golden_config() const;  // in golden.json's pipeline.config shape
};

struct Request {
    std::string query;
    std::vector<Turn> history;
    Budget budget;
    // {"query", "history", "max_tools", "max_schema_tokens", "format"}: a missing query, a field of the
    // wrong type is MS_ERR_ARGUMENT, a budget < 1 or an unknown format MS_ERR_INPUT, naming the field;
    // an absent or null bound takes the config's.
    static Request from_json(const std::string &request_json, const Budget &defaults);
};

// Everything one turn computed after the embedder (what golden.json's pipeline block holds).
struct Trace {
    std::vector<Hits> search, lexical;
    std::vector<RankedList> lists;
    Fused fused;
    Cut cut;
    std::vector<int> cut_order, per_list_k;
    bool head_ran = false;
    std::vector<std::vector<double>> features;
    std::vector<double> probabilities;
    std::vector<int> head_order;
    int head_k = 0;
    std::vector<int> kept;         // positions of the ranked list the budget kept
    long long schema_tokens = -1;  // -1: no token bound
    std::vector<int> ranked;       // fused positions in their final order (kept first)
    int k = 0;
};

// The front stages of a turn: the checked utterance, bounded history, sub-tasks, retrieval texts.
struct Texts {
    std::string query;
    std::vector<Turn> history;
    std::vector<std::string> subtasks, texts;
    int history_list = -1;
};

class Selector {
public:
    static std::unique_ptr<Selector> open(const std::string &dir, const Options &options);

    Texts texts(const Request &request) const;
    std::vector<int32_t> token_ids(const std::string &text) const;
    std::vector<std::vector<float>> embed(const std::vector<std::string> &texts);
    // Every stage after the embedder on these texts and their (unit) vectors.
    Trace replay(const std::vector<std::string> &texts, const std::vector<std::vector<float>> &vectors,
                 int history_list, const Budget &budget) const;
    // One whole turn, as Selection.to_dict; `vectors` (one per retrieval text) replace the embedder's.
    json select(const Request &request, const std::vector<std::vector<float>> *vectors = nullptr);

    const Options &options() const { return options_; }
    const std::vector<std::string> &ids() const { return ids_; }
    const std::vector<std::string> &names() const { return names_; }
    const Bundle &bundle() const { return bundle_; }
    bool has_embedder() const { return embedder_ != nullptr; }
    bool has_head() const { return head_ != nullptr; }
    const HeadModel *head() const { return head_.get(); }  // null where the bundle has none
    int row_of(const std::string &id) const;  // -1 where the catalog lacks it

private:
    Selector() = default;
    long long tokens_of(int row, const std::string &format) const;

    Options options_;
    Bundle bundle_;
    std::vector<std::string> ids_, names_;
    std::unordered_map<std::string, int> row_of_;
    std::unique_ptr<ToolIndex> index_;
    std::unique_ptr<LexicalIndex> lexical_;
    std::unique_ptr<HeadModel> head_;
    std::unique_ptr<WordPieceTokenizer> tokenizer_;
    std::unique_ptr<Embedder> embedder_;
    std::vector<std::string> formats_;
    std::vector<std::vector<int>> schema_tokens_;  // per catalog row, per format (empty: no table)
    std::mutex embed_lock_;                        // one llama.cpp context: one turn embeds at a time
};

}  // namespace ms
