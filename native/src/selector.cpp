// selector.cpp: the composition of Selector.select over the native stages, the bundle's artifacts opened once, and the Selection as JSON.
#include "selector.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <system_error>
#include <unordered_map>

#include "error.h"
#include "rules.h"
#include "unicode.h"

namespace ms {
namespace {

const char *const kFormats[] = {"mcp", "openai", "openai-responses", "anthropic"};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

int integer(const json &v, const std::string &field, ms_status status, int min, int max = 1 << 30) {
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > max) {
        fail(status, field + " must be an integer >= " + std::to_string(min) + (max < (1 << 30) ? " and <= " + std::to_string(max) : "") +
                         ", got " + v.dump().substr(0, 40));
    }
    return int(v.get<int64_t>());
}

double number(const json &v, const std::string &field, double min, double max) {
    if (!v.is_number() || v.is_boolean() || !(v.get<double>() >= min && v.get<double>() <= max)) {
        fail(MS_ERR_ARGUMENT, field + " must be a number within [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + v.dump().substr(0, 40));
    }
    return v.get<double>();
}

bool boolean(const json &v, const std::string &field) {
    if (!v.is_boolean()) fail(MS_ERR_ARGUMENT, field + " must be true or false, got " + v.dump().substr(0, 40));
    return v.get<bool>();
}

std::string text_field(const json &v, const std::string &field) {
    if (!v.is_string()) fail(MS_ERR_ARGUMENT, field + " must be a string, got " + v.dump().substr(0, 40));
    return v.get<std::string>();
}

// A budget bound: null (the config's), or an integer >= 1.
int bound(const json &v, const std::string &field, int fallback) {
    if (v.is_null()) return fallback;
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t(1) << 30)) {
        fail(MS_ERR_INPUT, field + " must be an integer >= 1 or null, got " + v.dump().substr(0, 40));
    }
    return int(v.get<int64_t>());
}

std::string check_format(const json &v) {
    const std::string f = text_field(v, "format");
    for (const char *known : kFormats) {
        if (f == known) return f;
    }
    fail(MS_ERR_INPUT, "format must be one of mcp, openai, openai-responses, anthropic, got '" + f.substr(0, 40) + "'");
}

void read_cut(const json &raw, CutConfig &cut) {
    if (!raw.is_object()) fail(MS_ERR_ARGUMENT, "cut must be an object");
    for (auto it = raw.begin(); it != raw.end(); ++it) {
        const std::string key = it.key(), field = "cut." + key;
        const json &v = it.value();
        if (key == "rule") {
            cut.rule = text_field(v, field);
            if (cut.rule != "rmargin") fail(MS_ERR_UNSUPPORTED, "cut.rule '" + cut.rule.substr(0, 40) + "': this core runs the shipped rmargin cut (paper and fixed are bench rules)");
        } else if (key == "k_min") {
            cut.k_min = integer(v, field, MS_ERR_ARGUMENT, 0);
        } else if (key == "k_max") {
            cut.k_max = integer(v, field, MS_ERR_ARGUMENT, 0);
        } else if (key == "range_margin") {
            cut.range_margin = number(v, field, 0, 1);
        } else if (key == "range_depth") {
            cut.range_depth = integer(v, field, MS_ERR_ARGUMENT, 0);
            if (cut.range_depth == 1) fail(MS_ERR_ARGUMENT, "cut.range_depth must be 0 (whole list) or >= 2");
        } else if (key == "list_range_margin") {
            cut.list_range_margin = v.is_null() ? -1.0 : number(v, field, 0, 1);
        } else if (key == "anchor_k_max") {
            cut.anchor_k_max = v.is_null() ? -1 : integer(v, field, MS_ERR_ARGUMENT, 0);
        } else if (key == "min_probability") {
            cut.min_probability = number(v, field, 0, 1);
        } else {
            fail(MS_ERR_ARGUMENT, "cut: unknown setting '" + key.substr(0, 60) + "'");
        }
    }
    if (cut.k_min > cut.k_max) fail(MS_ERR_ARGUMENT, "cut: need k_min <= k_max");
}

std::vector<std::string> split_lines(const std::string &text) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        out.push_back(text.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

double round6(double x) { return std::round(x * 1e6) / 1e6; }

json opt_number(bool present, double x) { return present ? json(round6(x)) : json(nullptr); }

}  // namespace

Options Options::from_json(const std::string &options_json) {
    Options o;
    if (options_json.empty()) return o;
    const json raw = parse_json(options_json, MS_ERR_ARGUMENT, "options");
    if (!raw.is_object()) fail(MS_ERR_ARGUMENT, "options must be a JSON object of SelectorConfig settings");
    for (auto it = raw.begin(); it != raw.end(); ++it) {
        const std::string key = it.key();
        const json &v = it.value();
        if (key == "threads") {
            o.threads = integer(v, key, MS_ERR_ARGUMENT, 1, 256);
        } else if (key == "history") {
            o.history = text_field(v, key);
            if (o.history != "none" && o.history != "user" && o.history != "questions" && o.history != "all") {
                fail(MS_ERR_ARGUMENT, "history must be one of none, user, questions, all, got '" + o.history.substr(0, 40) + "'");
            }
        } else if (key == "history_turns") {
            o.history_turns = integer(v, key, MS_ERR_ARGUMENT, 1);
        } else if (key == "candidates") {
            o.candidates = integer(v, key, MS_ERR_ARGUMENT, 1, 100000);
        } else if (key == "lexical") {
            o.lexical = boolean(v, key);
        } else if (key == "lexical_weight") {
            o.lexical_weight = number(v, key, 0, 1);
        } else if (key == "lexical_candidates") {
            o.lexical_candidates = integer(v, key, MS_ERR_ARGUMENT, 1, 100000);
        } else if (key == "head") {
            o.head = boolean(v, key);
        } else if (key == "ranked_ids") {
            o.ranked_ids = boolean(v, key);
        } else if (key == "verify") {
            o.verify = boolean(v, key);
        } else if (key == "decompose") {
            o.decompose = text_field(v, key);
            if (o.decompose == "llm" || o.decompose == "auto") {
                fail(MS_ERR_UNSUPPORTED, "decompose '" + o.decompose + "': the LLM decomposer is Python-only (this core runs 'rules' and 'none')");
            }
            if (o.decompose != "rules" && o.decompose != "none") fail(MS_ERR_ARGUMENT, "decompose must be one of none, rules, llm, auto");
        } else if (key == "rerank") {
            if (boolean(v, key)) fail(MS_ERR_UNSUPPORTED, "rerank: the cross-encoder is Python-only (this core runs the shipped rerank=false path)");
        } else if (key == "max_tools") {
            o.budget.max_tools = bound(v, key, -1);
        } else if (key == "max_schema_tokens") {
            o.budget.max_schema_tokens = bound(v, key, -1);
        } else if (key == "cut") {
            read_cut(v, o.cut);
        } else if (key == "limits") {
            if (!v.is_object()) fail(MS_ERR_ARGUMENT, "limits must be an object");
            for (auto l = v.begin(); l != v.end(); ++l) {
                const std::string field = "limits." + l.key();
                if (l.key() == "max_query_chars") o.limits.max_query_chars = integer(l.value(), field, MS_ERR_ARGUMENT, 1);
                else if (l.key() == "max_history_turns") o.limits.max_history_turns = integer(l.value(), field, MS_ERR_ARGUMENT, 1);
                else if (l.key() == "max_history_chars") o.limits.max_history_chars = integer(l.value(), field, MS_ERR_ARGUMENT, 1);
                else if (l.key() == "max_subtasks") o.limits.max_subtasks = integer(l.value(), field, MS_ERR_ARGUMENT, 1, 64);
                else fail(MS_ERR_ARGUMENT, "limits: unknown setting '" + l.key().substr(0, 60) + "'");
            }
        } else if (key.rfind("rerank_", 0) == 0 || key == "llm") {
            fail(MS_ERR_UNSUPPORTED, key + ": a setting of the reranker or the LLM decomposer, which are Python-only");
        } else {
            fail(MS_ERR_ARGUMENT, "options: unknown setting '" + key.substr(0, 60) + "'");
        }
    }
    return o;
}

json Options::to_golden_config() const {
    json cut_json = {{"rule", cut.rule}, {"k_min", cut.k_min}, {"k_max", cut.k_max}, {"range_margin", cut.range_margin},
                     {"range_depth", cut.range_depth},
                     {"list_range_margin", cut.list_range_margin >= 0 ? json(cut.list_range_margin) : json(nullptr)},
                     {"anchor_k_max", cut.anchor_k_max >= 0 ? json(cut.anchor_k_max) : json(nullptr)},
                     {"min_probability", cut.min_probability}};
    return {{"history", history}, {"history_turns", history_turns}, {"candidates", candidates}, {"decompose", decompose},
            {"lexical", lexical}, {"lexical_weight", lexical_weight}, {"lexical_candidates", lexical_candidates},
            {"head", head}, {"cut", cut_json},
            {"budget", {{"max_tools", budget.max_tools >= 0 ? json(budget.max_tools) : json(nullptr)},
                        {"max_schema_tokens", budget.max_schema_tokens >= 0 ? json(budget.max_schema_tokens) : json(nullptr)}}},
            {"limits", {{"max_query_chars", limits.max_query_chars}, {"max_history_turns", limits.max_history_turns},
                        {"max_history_chars", limits.max_history_chars}, {"max_subtasks", limits.max_subtasks}}}};
}

Request Request::from_json(const std::string &request_json, const Budget &defaults) {
    const std::size_t bad = unicode::invalid_utf8_at(request_json);
    if (bad != std::string::npos) fail(MS_ERR_INPUT, "request: not valid UTF-8 (byte " + std::to_string(bad) + ")");
    const json raw = parse_json(request_json, MS_ERR_ARGUMENT, "request");
    if (!raw.is_object()) fail(MS_ERR_ARGUMENT, "request must be a JSON object with a query");
    Request r;
    r.budget = defaults;
    bool has_query = false;
    for (auto it = raw.begin(); it != raw.end(); ++it) {
        const std::string key = it.key();
        const json &v = it.value();
        if (key == "query") {
            r.query = text_field(v, "query");
            has_query = true;
        } else if (key == "history") {
            if (v.is_null()) continue;
            if (!v.is_array()) fail(MS_ERR_ARGUMENT, "history must be a list of {role, content} messages");
            for (std::size_t i = 0; i < v.size(); ++i) {
                const std::string at = "history[" + std::to_string(i) + "]";
                if (!v[i].is_object()) fail(MS_ERR_ARGUMENT, at + " must be an object with role and content");
                if (!v[i].contains("role")) fail(MS_ERR_ARGUMENT, at + ".role is missing");
                const json content = v[i].value("content", json(""));
                r.history.push_back(Turn{text_field(v[i]["role"], at + ".role"), content.is_null() ? std::string() : text_field(content, at + ".content")});
            }
        } else if (key == "max_tools") {
            r.budget.max_tools = bound(v, key, defaults.max_tools);
        } else if (key == "max_schema_tokens") {
            r.budget.max_schema_tokens = bound(v, key, defaults.max_schema_tokens);
        } else if (key == "format") {
            r.budget.format = check_format(v);
        } else if (key == "vectors") {
            continue;  // read by the replay path of the CLI
        } else {
            fail(MS_ERR_ARGUMENT, "request: unknown field '" + key.substr(0, 60) + "'");
        }
    }
    if (!has_query) fail(MS_ERR_ARGUMENT, "query is missing");
    return r;
}

std::unique_ptr<Selector> Selector::open(const std::string &dir, const Options &options) {
    const bool verify = options.verify;
    std::unique_ptr<Selector> s(new Selector);
    s->options_ = options;
    s->bundle_ = Bundle::open(dir);
    const Bundle &b = s->bundle_;
    const json &m = b.manifest();
    // The GGUF (25 MB, most of a verified open) is hashed on a helper thread while the other files
    // load; llama.cpp opens it only after that hash matched, as before. Errors keep their order: the
    // other files' are raised first, the GGUF's where it was checked before (the future joins on unwind).
    const std::string gguf = options.embedder ? b.section_file("embedder", "gguf") : std::string();
    std::future<std::string> gguf_checked;
    if (verify && !gguf.empty()) {
        try {
            gguf_checked = std::async(std::launch::async, [&b, gguf] { return b.checked_path(gguf, true); });
        } catch (const std::system_error &) {
            // no thread to be had: it is hashed in turn below
        }
    }
    // the catalog: one tool per line, its id and name
    const std::string catalog_file = b.section_file("catalog");
    if (catalog_file.empty()) fail(MS_ERR_BUNDLE, dir + "/manifest.json: no catalog section");
    std::unordered_map<std::string, int> seen;
    for (const std::string &line : split_lines(b.read(catalog_file, verify))) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const json tool = parse_json(line, MS_ERR_BUNDLE, catalog_file + " line " + std::to_string(s->ids_.size() + 1));
        if (!tool.is_object() || !tool.contains("id") || !tool["id"].is_string() || !tool.contains("name") || !tool["name"].is_string()) {
            fail(MS_ERR_BUNDLE, catalog_file + " line " + std::to_string(s->ids_.size() + 1) + ": a tool needs string id and name");
        }
        if (!seen.emplace(tool["id"].get<std::string>(), int(s->ids_.size())).second) fail(MS_ERR_BUNDLE, catalog_file + ": tool id '" + tool["id"].get<std::string>().substr(0, 80) + "' repeats");
        s->ids_.push_back(tool["id"].get<std::string>());
        s->names_.push_back(tool["name"].get<std::string>());
    }
    s->row_of_ = std::move(seen);
    // the dense index
    const std::string index_file = b.section_file("index");
    if (index_file.empty()) fail(MS_ERR_BUNDLE, dir + "/manifest.json: no index section");
    const json ndim = m["index"].value("ndim", json());
    if (!ndim.is_number_integer() || ndim.get<int64_t>() < 1 || ndim.get<int64_t>() > 65536) fail(MS_ERR_BUNDLE, dir + "/manifest.json: index.ndim must be a positive integer");
    s->index_ = ToolIndex::from_bytes(b.read(index_file, verify), s->ids_, int(ndim.get<int64_t>()), index_file);
    // BM25, the head, the definition sizes
    const std::string lexical_file = b.section_file("lexical");
    if (!lexical_file.empty()) {
        s->lexical_.reset(new LexicalIndex(LexicalIndex::from_npz(b.read(lexical_file, verify), s->ids_, lexical_file)));
    } else if (options.lexical) {
        fail(MS_ERR_UNSUPPORTED, dir + ": the bundle has no lexical index (manifest lexical), which this core does not build; rebuild the bundle or set lexical false");
    }
    const std::string head_file = b.section_file("head");
    if (!head_file.empty()) s->head_.reset(new HeadModel(HeadModel::from_json(b.read(head_file, verify), head_file)));
    const std::string tokens_file = b.section_file("schema_tokens");
    if (!tokens_file.empty()) {
        const json table = parse_json(b.read(tokens_file, verify), MS_ERR_BUNDLE, tokens_file);
        if (!table.is_object() || table.value("format", json()) != "magicselector-schema-tokens/1" ||
            !table.contains("formats") || !table["formats"].is_array() || !table.contains("tools") || !table["tools"].is_object()) {
            fail(MS_ERR_BUNDLE, tokens_file + ": not a magicselector-schema-tokens/1 table");
        }
        for (const json &f : table["formats"]) s->formats_.push_back(text_field(f, tokens_file + ": formats[]"));
        s->schema_tokens_.assign(s->ids_.size(), {});
        for (std::size_t r = 0; r < s->ids_.size(); ++r) {
            auto it = table["tools"].find(s->ids_[r]);
            if (it == table["tools"].end() || !it->is_array() || it->size() != s->formats_.size()) {
                fail(MS_ERR_BUNDLE, tokens_file + ": no definition sizes for tool '" + s->ids_[r].substr(0, 80) + "'; rebuild the bundle");
            }
            for (const json &n : *it) s->schema_tokens_[r].push_back(integer(n, tokens_file + ": tools['" + s->ids_[r].substr(0, 80) + "']", MS_ERR_BUNDLE, 0));
        }
    }
    // the tokenizer and the embedder
    const std::string tokenizer_file = b.section_file("embedder", "tokenizer");
    if (tokenizer_file.empty()) fail(MS_ERR_BUNDLE, dir + "/manifest.json: embedder.tokenizer names no file");
    const json max_length = m["embedder"].value("max_length", json(128));
    const int window = integer(max_length, "manifest embedder.max_length", MS_ERR_BUNDLE, 2, 8192);
    s->tokenizer_.reset(new WordPieceTokenizer(WordPieceTokenizer::from_json(b.read(tokenizer_file, verify), window)));
    if (options.embedder) {
        if (gguf.empty()) {
            fail(MS_ERR_BUNDLE, dir + ": the bundle has no GGUF embedder (manifest embedder.gguf), which the native core runs; "
                                      "rebuild it with this magicselector (default-v9 bundles hold one)");
        }
        const std::string gguf_path = gguf_checked.valid() ? gguf_checked.get() : b.checked_path(gguf, verify);
        s->embedder_ = Embedder::open(gguf_path, options.threads, s->index_->ndim(), window);
    }
    return s;
}

int Selector::row_of(const std::string &id) const {
    auto it = row_of_.find(id);
    return it == row_of_.end() ? -1 : it->second;
}

long long Selector::tokens_of(int row, const std::string &format) const {
    for (std::size_t f = 0; f < formats_.size(); ++f) {
        if (formats_[f] == format) return schema_tokens_[std::size_t(row)][f];
    }
    fail(MS_ERR_UNSUPPORTED, "max_schema_tokens: the bundle holds no definition sizes in format '" + format +
                                 "' (schema_tokens.json; default-v9 bundles hold every format)");
}

Texts Selector::texts(const Request &request) const {
    Texts t;
    t.query = validate_query(request.query, options_.limits);
    t.history = bounded_history(request.history, options_.limits);
    if (options_.decompose == "rules") {
        t.subtasks = decompose_rules(t.query, t.history);
    } else {  // the passthrough: the history-folded utterance is the one task
        t.subtasks = {retrieval_text(t.query, t.history, options_.history, options_.history_turns)};
    }
    if (t.subtasks.empty()) t.subtasks = {t.query};
    if (int(t.subtasks.size()) > options_.limits.max_subtasks) t.subtasks.resize(std::size_t(options_.limits.max_subtasks));
    t.texts = selection_texts(t.query, t.history, t.subtasks, options_.decompose != "none", options_.history,
                              options_.history_turns, options_.limits.max_subtasks, &t.history_list);
    return t;
}

std::vector<int32_t> Selector::token_ids(const std::string &text) const { return tokenizer_->encode(text, "text"); }

std::vector<std::vector<float>> Selector::embed(const std::vector<std::string> &texts) {
    if (!embedder_) fail(MS_ERR_UNSUPPORTED, "this selector was opened without its embedder");
    std::vector<std::vector<int32_t>> ids;
    for (const std::string &t : texts) ids.push_back(token_ids(t));
    std::lock_guard<std::mutex> hold(embed_lock_);
    return embedder_->embed(ids);
}

Trace Selector::replay(const std::vector<std::string> &texts, const std::vector<std::vector<float>> &vectors,
                       int history_list, const Budget &budget) const {
    if (vectors.size() != texts.size()) fail(MS_ERR_ARGUMENT, "vectors: one per retrieval text (" + std::to_string(texts.size()) + "), got " + std::to_string(vectors.size()));
    for (const auto &v : vectors) {
        if (int(v.size()) != index_->ndim()) fail(MS_ERR_ARGUMENT, "vectors: each must have " + std::to_string(index_->ndim()) + " dimensions");
        for (float x : v) {
            if (!std::isfinite(x)) fail(MS_ERR_ARGUMENT, "vectors: every value must be finite");
        }
    }
    Trace tr;
    for (std::size_t i = 0; i < texts.size(); ++i) {
        tr.search.push_back(index_->search(vectors[i].data(), std::size_t(options_.candidates)));
        RankedList list;
        if (lexical_) {
            const std::vector<float> bm25 = lexical_->scores(texts[i]);
            tr.lexical.push_back(lexical_->top(bm25, std::size_t(options_.lexical_candidates)));
            if (options_.lexical) {
                FusedList f = fuse_lexical(tr.search[i], bm25, tr.lexical[i], *index_, vectors[i].data(), options_.lexical_weight,
                                           std::size_t(options_.candidates));
                list = RankedList{f.rows, f.scores, f.dense, f.lexical, true};
            }
        }
        if (!options_.lexical) list = RankedList{tr.search[i].rows, tr.search[i].scores, {}, {}, false};
        tr.lists.push_back(std::move(list));
    }
    tr.fused = peak_rank_fusion(tr.lists);
    if (tr.lists.size() > 1) {
        for (std::size_t j = 0; j < tr.lists.size(); ++j) tr.per_list_k.push_back(apply_list_cut(options_.cut, tr.lists[j].scores, j == 0).k);
    }
    tr.cut = cut_turn(options_.cut, tr.lists, tr.fused, tr.cut_order);
    std::vector<int> order = tr.cut_order;
    if (head_ && options_.head) {
        tr.head_ran = true;
        tr.features = head_features(tr.lists, history_list, tr.fused, head_->depth);
        tr.probabilities = head_->probabilities(tr.features);
        tr.head_k = head_cut(tr.probabilities, order, tr.cut, options_.cut);
        tr.head_order = order;
        tr.cut.k = tr.head_k;
        tr.cut.rule += "+head";
    }
    std::vector<int> rows;
    for (int pos : order) rows.push_back(tr.fused.rows[std::size_t(pos)]);
    const std::string format = budget.format;
    tr.kept = spend_budget(budget, rows, tr.cut.k, tr.lists, [this, &format](int row) { return tokens_of(row, format); }, tr.head_ran);
    if (budget.max_schema_tokens >= 0) {
        tr.schema_tokens = 0;
        for (int i : tr.kept) tr.schema_tokens += tokens_of(rows[std::size_t(i)], format);
    }
    std::vector<bool> taken(order.size(), false);
    for (int i : tr.kept) {
        tr.ranked.push_back(order[std::size_t(i)]);
        taken[std::size_t(i)] = true;
    }
    for (std::size_t i = 0; i < order.size(); ++i) {
        if (!taken[i]) tr.ranked.push_back(order[i]);
    }
    tr.k = budget.bounded() ? int(tr.kept.size()) : std::min(tr.cut.k, int(order.size()));
    return tr;
}

json Selector::select(const Request &request, const std::vector<std::vector<float>> *vectors) {
    const auto start = Clock::now();
    json timings = json::object();
    auto t = Clock::now();
    const Texts tx = texts(request);
    timings["decompose"] = ms_since(t);
    t = Clock::now();
    const std::vector<std::vector<float>> embedded = vectors ? *vectors : embed(tx.texts);
    timings["embed"] = ms_since(t);
    t = Clock::now();
    const Trace tr = replay(tx.texts, embedded, tx.history_list, request.budget);
    timings["retrieve_and_cut"] = ms_since(t);
    json tools = json::array();
    for (int i = 0; i < tr.k; ++i) {
        const std::size_t pos = std::size_t(tr.ranked[std::size_t(i)]);
        const int row = tr.fused.rows[pos], src = tr.fused.source[pos];
        const RankedList &lst = tr.lists[std::size_t(src)];
        const auto at = std::find(lst.rows.begin(), lst.rows.end(), row);
        const bool found = at != lst.rows.end();
        const std::size_t rank = std::size_t(at - lst.rows.begin());
        const bool parts = found && lst.has_parts;
        const bool has_p = tr.head_ran && pos < tr.probabilities.size();
        json why = {{"list", src}, {"text", tx.texts[std::size_t(src)]}, {"rank", found ? json(rank) : json(nullptr)},
                    {"dense", opt_number(parts, parts ? lst.dense[rank] : 0.0)},
                    {"lexical", opt_number(parts, parts ? lst.lexical[rank] : 0.0)},
                    {"probability", opt_number(has_p, has_p ? tr.probabilities[pos] : 0.0)}};
        tools.push_back({{"id", ids_[std::size_t(row)]}, {"name", names_[std::size_t(row)]}, {"score", round6(tr.fused.scores[pos])},
                         {"subtask", tx.texts[std::size_t(src)]}, {"why", why}});
    }
    timings["total"] = ms_since(start);
    const Budget &b = request.budget;
    json out = {{"tools", tools},
            {"k", tr.k},
            {"cut", {{"rule", tr.cut.rule}, {"k_score", tr.cut.k_score}, {"k_sim", tr.cut.k_sim}}},
            {"subtasks", tx.subtasks},
            {"retrieved_texts", tx.texts},
            {"candidates", tr.fused.rows.size()},
            {"decomposer", options_.decompose},
            {"decomposition", {{"ran", options_.decompose}, {"reason", ""}, {"raw", ""}, {"ms", 0.0}, {"ttft_ms", 0.0}, {"tokens", 0},
                               {"stopped", ""}, {"dropped", json::array()}, {"load_ms", 0.0}}},
            {"reranked", 0},
            {"budget", {{"max_tools", b.max_tools >= 0 ? json(b.max_tools) : json(nullptr)},
                        {"max_schema_tokens", b.max_schema_tokens >= 0 ? json(b.max_schema_tokens) : json(nullptr)},
                        {"format", b.format}}},
            {"schema_tokens", tr.schema_tokens >= 0 ? json(tr.schema_tokens) : json(nullptr)},
            {"timings_ms", timings}};
    if (options_.ranked_ids) {
        std::vector<int> rows;
        for (int pos : tr.ranked) rows.push_back(tr.fused.rows[std::size_t(pos)]);
        out["ranked_ids"] = json::array();
        for (int r : rows) out["ranked_ids"].push_back(ids_[std::size_t(r)]);
    }
    return out;
}

}  // namespace ms
