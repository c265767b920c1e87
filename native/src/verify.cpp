// verify.cpp: every stage of golden.json's pipeline probes re-run natively and compared, with the tolerances the probes state.
#include "verify.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "error.h"

namespace ms {
namespace {

struct Report {
    std::map<std::string, std::pair<int, int>> stages;  // name -> (checked, mismatches)
    std::string first;
    double max_score_diff = 0, max_probability_diff = 0, max_feature_diff = 0;
    // the head re-run from this build's own scores (reported, not held to a tolerance: head_on_written)
    double replay_feature_diff = 0, replay_probability_diff = 0;

    void check(const std::string &stage, bool same, const std::string &where) {
        auto &s = stages[stage];
        ++s.first;
        if (!same) {
            ++s.second;
            if (first.empty()) first = where + ": " + stage + " differs";
        }
    }
};

std::vector<std::string> ids_of(const Selector &s, const std::vector<int> &rows) {
    std::vector<std::string> out;
    for (int r : rows) out.push_back(s.ids()[std::size_t(r)]);
    return out;
}

// |want - got| <= tol + rel * max(|want|, |got|) everywhere (rel: the block's feature_rel, 0 elsewhere);
// `worst` keeps the largest |want - got|.
bool close(const json &want, const std::vector<double> &got, double tol, double &worst, double rel = 0.0) {
    if (!want.is_array() || want.size() != got.size()) return false;
    bool ok = true;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (!want[i].is_number()) return false;
        const double w = want[i].get<double>(), d = std::fabs(w - got[i]);
        worst = std::max(worst, d);
        ok = ok && d <= tol + rel * std::max(std::fabs(w), std::fabs(got[i]));
    }
    return ok;
}

double cosine(const std::vector<float> &a, const std::vector<float> &b) {
    double dot = 0;
    for (std::size_t d = 0; d < a.size() && d < b.size(); ++d) dot += double(a[d]) * double(b[d]);
    return a.size() == b.size() ? dot : -1.0;
}

// golden.json's gguf_embeddings: this build's embedder against the GGUF's own vectors in
// llama.cpp (same model, same ids, one text per decode), so held at its stated cosine_min.
// Returns the worst cosine, or 1 where the block is absent.
double check_gguf_embeddings(Report &r, Selector &s, const json &golden) {
    if (!golden.contains("gguf_embeddings")) return 1.0;
    const json &block = golden["gguf_embeddings"];
    const double floor = block.value("cosine_min", 0.999);
    double worst = 1.0;
    for (const json &c : block.value("embeddings", json::array())) {
        const std::string text = c.value("text", std::string());
        const std::string where = "gguf_embeddings " + text.substr(0, 40);
        r.check("gguf_embeddings.token_ids", c.value("input_ids", json()) == json(s.token_ids(text)), where);
        const auto got = s.embed({text});
        const double cos = got.empty() ? -1.0 : cosine(got[0], c.value("vector", json::array()).get<std::vector<float>>());
        worst = std::min(worst, cos);
        r.check("gguf_embeddings", cos >= floor, where);
    }
    return worst;
}

std::vector<double> widen(const std::vector<float> &v) { return std::vector<double>(v.begin(), v.end()); }

void ranked(Report &r, const Selector &s, const std::string &stage, const json &want, const std::vector<int> &rows,
            const std::vector<float> &scores, double tol, const std::string &where) {
    r.check(stage + ".ids", want.value("ids", json()) == json(ids_of(s, rows)), where);
    r.check(stage + ".scores", close(want.value("scores", json()), widen(scores), tol, r.max_score_diff), where);
}

std::vector<double> flat_rows(const std::vector<std::vector<double>> &rows) {
    std::vector<double> out;
    for (const auto &row : rows) out.insert(out.end(), row.begin(), row.end());
    return out;
}

json flat_written(const json &rows) {
    json out = json::array();
    for (const json &row : rows.is_array() ? rows : json::array()) {
        for (const json &x : row.is_array() ? row : json::array()) out.push_back(x);
    }
    return out;
}

// A written ranked block ({ids, scores}) as this build's rows and float32 scores; false where an id
// is not the catalog's or the block is malformed.
bool written_ranked(const Selector &s, const json &block, std::vector<int> &rows, std::vector<float> &scores) {
    const json &ids = block.value("ids", json()), &values = block.value("scores", json());
    if (!ids.is_array() || !values.is_array() || ids.size() != values.size()) return false;
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const int row = ids[i].is_string() ? s.row_of(ids[i].get<std::string>()) : -1;
        if (row < 0 || !values[i].is_number()) return false;
        rows.push_back(row);
        scores.push_back(values[i].get<float>());
    }
    return true;
}

// The head's features and probabilities on the written lists and fused list, the stage's own input,
// as every later stage runs on the written vectors. Re-run from this build's own scores they would
// carry their last float32 bits (usearch's kernels, the cosine's and BM25's sums differ from numpy's)
// grown past any fixed tolerance: the features subtract fused scores and divide each list's gaps by
// its spread, after the lexical mix divided the cosines by their standard deviation, so on a model
// whose scores lie close together (a barely trained checkpoint) a 3e-7 search difference reached
// 1.5e-5 on a feature and 4e-6 on a probability (issue 48). Fed the written scores, both sides do the
// same double arithmetic on the same float32 inputs, so feature_abs and probability_abs bound only
// libm's log1p and the summation order, and a wrong, missing or misplaced feature still fails.
void head_on_written(Report &r, const Selector &s, const json &c, int history_list, double feature_tol,
                     double feature_rel, double prob_tol, const std::string &where) {
    std::vector<RankedList> lists;
    Fused fused;
    bool read = c.contains("lists") && c["lists"].is_array() && c.contains("fused") && c["fused"].is_object();
    if (read) {
        for (const json &block : c["lists"]) {
            RankedList list;
            read = read && written_ranked(s, block, list.rows, list.scores);
            lists.push_back(std::move(list));
        }
        read = read && written_ranked(s, c["fused"], fused.rows, fused.scores);
    }
    r.check("head.inputs", read, where + " (the written lists and fused list the head reads)");
    if (!read) return;
    const auto rows = head_features(lists, history_list, fused, s.head()->depth);
    r.check("head.features",
            close(flat_written(c["head"]["features"]), flat_rows(rows), feature_tol, r.max_feature_diff, feature_rel), where);
    r.check("head.probabilities", close(c["head"]["probabilities"], s.head()->probabilities(rows), prob_tol,
                                        r.max_probability_diff), where);
}

}  // namespace

json verify_golden(Selector &s) {
    const Bundle &b = s.bundle();
    const std::string golden_file = b.section_file("golden");
    if (golden_file.empty()) fail(MS_ERR_BUNDLE, b.dir() + ": the bundle has no golden.json");
    const json golden = parse_json(b.read(golden_file, s.options().verify), MS_ERR_BUNDLE, golden_file);
    if (!golden.is_object() || !golden.contains("pipeline") || !golden["pipeline"].is_object()) {
        fail(MS_ERR_BUNDLE, golden_file + ": no pipeline probes (a bundle older than default-v9); rebuild it");
    }
    const json &block = golden["pipeline"];
    if (block.value("format", json()) != "magicselector-golden-pipeline/1") fail(MS_ERR_BUNDLE, golden_file + ": pipeline format is not magicselector-golden-pipeline/1");
    const json tol = block.value("tolerances", json::object());
    const double score_tol = tol.value("score_abs", 1e-5), prob_tol = tol.value("probability_abs", 1e-6),
                 feature_tol = tol.value("feature_abs", 1e-5), feature_rel = tol.value("feature_rel", 0.0);
    // the probes' vectors are the INT8 ONNX embedder's: another engine than this build's GGUF, held
    // at the cross-engine floor the GGUF block states (docs/bench/native.md); the written vectors
    // still feed every later stage, so those stay exact
    const double cos_min = golden.contains("gguf_embeddings")
                               ? golden["gguf_embeddings"].value("cross_engine_cosine_min", 0.97)
                               : tol.value("vector_cosine_min", 0.995);
    Report r;
    json config = s.options().to_golden_config();
    config["head"] = s.options().head && s.has_head();
    const bool same_config = block.value("config", json()) == config;
    r.check("config", same_config, "pipeline.config (the probes ran another SelectorConfig than this core's)");
    double min_cos = 1.0, gguf_min_cos = 1.0;
    if (s.has_embedder()) gguf_min_cos = check_gguf_embeddings(r, s, golden);
    const json &turns = block.value("turns", json::array());
    for (std::size_t n = 0; n < turns.size(); ++n) {
        const json &c = turns[n];
        const std::string where = "turn " + std::to_string(n);
        const json &in = c["input"];
        json req = {{"query", in["query"]}, {"history", in.value("history", json::array())}, {"max_tools", in["max_tools"]},
                    {"max_schema_tokens", in["max_schema_tokens"]}, {"format", in.value("format", json("mcp"))}};
        // a bound the probe leaves out is the config's, as in select
        const Request request = Request::from_json(req.dump(), s.options().budget);
        const Texts tx = s.texts(request);
        r.check("subtasks", c["subtasks"] == json(tx.subtasks), where);
        r.check("texts", c["texts"] == json(tx.texts) && c["history_list"] == (tx.history_list >= 0 ? json(tx.history_list) : json(nullptr)), where);
        const std::vector<std::string> texts = c["texts"].get<std::vector<std::string>>();  // the written ones feed the rest
        for (std::size_t i = 0; i < texts.size(); ++i) {
            r.check("token_ids", c["token_ids"][i] == json(s.token_ids(texts[i])), where + " text " + std::to_string(i));
        }
        std::vector<std::vector<float>> vectors;
        for (const json &v : c["vectors"]) vectors.push_back(v.get<std::vector<float>>());
        if (s.has_embedder()) {
            const auto got = s.embed(texts);
            for (std::size_t i = 0; i < got.size(); ++i) {
                const double dot = cosine(got[i], vectors[i]);
                min_cos = std::min(min_cos, dot);
                r.check("vectors", dot >= cos_min, where + " text " + std::to_string(i));
            }
        }
        const int history_list = c["history_list"].is_null() ? -1 : c["history_list"].get<int>();
        const Trace tr = s.replay(texts, vectors, history_list, request.budget);
        for (std::size_t i = 0; i < texts.size(); ++i) {
            const std::string at = where + " list " + std::to_string(i);
            ranked(r, s, "search", c["search"][i], tr.search[i].rows, tr.search[i].scores, score_tol, at);
            ranked(r, s, "lexical", c["lexical"][i], tr.lexical[i].rows, tr.lexical[i].scores, score_tol, at);
            ranked(r, s, "lists", c["lists"][i], tr.lists[i].rows, tr.lists[i].scores, score_tol, at);
            if (tr.lists[i].has_parts) {
                r.check("lists.dense", close(c["lists"][i]["dense"], widen(tr.lists[i].dense), score_tol, r.max_score_diff), at);
                r.check("lists.lexical", close(c["lists"][i]["lexical"], widen(tr.lists[i].lexical), score_tol, r.max_score_diff), at);
            }
        }
        ranked(r, s, "fused", c["fused"], tr.fused.rows, tr.fused.scores, score_tol, where);
        r.check("fused.source", c["fused"]["source"] == json(tr.fused.source), where);
        const json cut = {{"order", tr.cut_order}, {"k", tr.head_ran ? c["cut"]["k"] : json(tr.cut.k)},
                          {"pool", tr.cut.pool >= 0 ? json(tr.cut.pool) : json(nullptr)}, {"per_list_k", tr.per_list_k}};
        r.check("cut", c["cut"]["order"] == cut["order"] && c["cut"]["pool"] == cut["pool"] && c["cut"]["per_list_k"] == cut["per_list_k"], where);
        r.check("head.ran", c["head"].is_null() != tr.head_ran, where);
        if (tr.head_ran && c["head"].is_object()) {
            head_on_written(r, s, c, history_list, feature_tol, feature_rel, prob_tol, where);
            const double inf = std::numeric_limits<double>::infinity();
            close(flat_written(c["head"]["features"]), flat_rows(tr.features), inf, r.replay_feature_diff);
            close(c["head"]["probabilities"], tr.probabilities, inf, r.replay_probability_diff);
            // this build's own probabilities order the tools: the order and K end to end stay exact
            r.check("head.order", c["head"]["order"] == json(tr.head_order) && c["head"]["k"] == json(tr.head_k), where);
        }
        const json budget = {{"kept", tr.kept}, {"schema_tokens", tr.schema_tokens >= 0 ? json(tr.schema_tokens) : json(nullptr)}};
        r.check("budget", c["budget"] == budget, where);
        std::vector<int> final_rows;
        for (int i = 0; i < tr.k; ++i) final_rows.push_back(tr.fused.rows[std::size_t(tr.ranked[std::size_t(i)])]);
        r.check("selection", c["selection"]["ids"] == json(ids_of(s, final_rows)) && c["selection"]["k"] == json(tr.k), where);
    }
    json stages = json::object();
    bool ok = true;
    for (const auto &kv : r.stages) {
        stages[kv.first] = {{"checked", kv.second.first}, {"mismatches", kv.second.second}};
        ok = ok && kv.second.second == 0;
    }
    json report = {{"ok", ok}, {"bundle", b.dir()}, {"turns", turns.size()}, {"stages", stages},
                   {"max_score_diff", r.max_score_diff}, {"max_probability_diff", r.max_probability_diff},
                   {"max_feature_diff", r.max_feature_diff},
                   {"head_replayed", {{"max_feature_diff", r.replay_feature_diff},
                                      {"max_probability_diff", r.replay_probability_diff},
                                      {"note", "the head on this build's own scores, not held to the tolerances: "
                                               "the head stage is checked on the written lists"}}}};
    json embedder = {{"onnx_vectors_min_cosine", min_cos}, {"onnx_vectors_cosine_min", cos_min}};
    if (golden.contains("gguf_embeddings")) {
        embedder["gguf_vectors_min_cosine"] = gguf_min_cos;
        embedder["gguf_vectors_cosine_min"] = golden["gguf_embeddings"].value("cosine_min", 0.999);
    } else {
        embedder["gguf_vectors"] = "absent: a bundle older than default-v10";
    }
    report["embedder"] = s.has_embedder() ? embedder : json("skipped: opened without the GGUF embedder");
    if (!r.first.empty()) report["first_mismatch"] = r.first;
    return report;
}

}  // namespace ms
