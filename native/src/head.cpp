// head.cpp: the learned head (runtime/stages/head.py): features of the fused list's first tools, a small MLP's probabilities, and the order and K they give.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "error.h"
#include "json.h"
#include "lexical.h"
#include "stages.h"

namespace ms {
namespace {

constexpr double kAbsent = 99.0;  // the rank of a tool a list does not hold
const char *const kFeatures[kHeadFeatures] = {
    "fused_rank", "log_fused_rank", "fused_gap", "lists", "decomposed", "best_rank",
    "log_subtask_rank", "log_anchor_rank", "log_history_rank", "in_anchor", "in_history", "in_subtask",
    "share_top1", "share_top3", "share_top5", "share_top10", "count_top1", "count_top3", "count_top5",
    "count_top10", "min_norm_gap", "mean_norm_gap", "reciprocal_ranks"};

std::vector<double> numbers(const json &raw, const std::string &key, const std::string &where, std::size_t size) {
    auto it = raw.find(key);
    if (it == raw.end() || !it->is_array() || (size && it->size() != size)) {
        fail(MS_ERR_BUNDLE, where + ": field '" + key + "' must be a finite array of " + std::to_string(size) + " numbers");
    }
    std::vector<double> out;
    for (const json &x : *it) {
        if (!x.is_number() || !std::isfinite(x.get<double>())) fail(MS_ERR_BUNDLE, where + ": field '" + key + "' must hold finite numbers");
        out.push_back(x.get<double>());
    }
    return out;
}

}  // namespace

HeadModel HeadModel::from_json(const std::string &bytes, const std::string &name) {
    const json raw = parse_json(bytes, MS_ERR_BUNDLE, name);
    if (!raw.is_object() || raw.value("format", json()) != "magicselector-head" || raw.value("version", json()) != 1) {
        fail(MS_ERR_BUNDLE, name + ": not a magicselector-head file of version 1");
    }
    const json features = raw.value("features", json());
    bool same = features.is_array() && features.size() == kHeadFeatures;
    for (int i = 0; same && i < kHeadFeatures; ++i) same = features[std::size_t(i)] == kFeatures[i];
    if (!same) fail(MS_ERR_BUNDLE, name + ": field 'features' does not name this runtime's head features");
    const json depth = raw.value("depth", json());
    if (!depth.is_number_integer() || depth.get<int64_t>() < 1 || depth.get<int64_t>() > 1000) {
        fail(MS_ERR_BUNDLE, name + ": field 'depth' must be an integer in [1, 1000]");
    }
    HeadModel m;
    m.depth = int(depth.get<int64_t>());
    m.mean = numbers(raw, "mean", name, kHeadFeatures);
    m.scale = numbers(raw, "scale", name, kHeadFeatures);
    for (double s : m.scale) {
        if (!(s > 0)) fail(MS_ERR_BUNDLE, name + ": field 'scale' must be positive");
    }
    const json layers = raw.value("layers", json());
    if (!layers.is_array() || layers.empty() || layers.size() > 8) fail(MS_ERR_BUNDLE, name + ": field 'layers' must be a list of 1 to 8 layers");
    std::size_t width = kHeadFeatures;
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const std::string where = name + ": layers[" + std::to_string(i) + "]";
        const json &layer = layers[i];
        if (!layer.is_object() || !layer.contains("weight") || !layer["weight"].is_array() || layer["weight"].size() != width) {
            fail(MS_ERR_BUNDLE, where + ".weight must be a " + std::to_string(width) + " x N matrix");
        }
        Layer l;
        l.in = width;
        for (std::size_t r = 0; r < width; ++r) {
            const json &row = layer["weight"][r];
            if (!row.is_array() || row.empty() || row.size() > 4096 || (r && row.size() != l.out)) {
                fail(MS_ERR_BUNDLE, where + ".weight must be a " + std::to_string(width) + " x N matrix");
            }
            l.out = row.size();
            for (const json &x : row) {
                if (!x.is_number() || !std::isfinite(x.get<double>())) fail(MS_ERR_BUNDLE, where + ".weight must hold finite numbers");
                l.weight.push_back(x.get<double>());
            }
        }
        l.bias = numbers(layer, "bias", where, l.out);
        width = l.out;
        m.layers.push_back(std::move(l));
    }
    if (width != 1) fail(MS_ERR_BUNDLE, name + ": the last layer must give one logit");
    return m;
}

std::vector<double> HeadModel::probabilities(const std::vector<std::vector<double>> &rows) const {
    std::vector<double> out;
    for (const auto &row : rows) {
        std::vector<double> x(kHeadFeatures);
        for (int f = 0; f < kHeadFeatures; ++f) x[std::size_t(f)] = (row[std::size_t(f)] - mean[std::size_t(f)]) / scale[std::size_t(f)];
        for (std::size_t i = 0; i < layers.size(); ++i) {
            const Layer &l = layers[i];
            std::vector<double> y(l.out);
            for (std::size_t o = 0; o < l.out; ++o) {
                double acc = 0.0;
                for (std::size_t k = 0; k < l.in; ++k) {
                    const double term = x[k] * l.weight[k * l.out + o];  // its own statement: no FMA
                    acc += term;
                }
                acc += l.bias[o];
                y[o] = (i + 1 < layers.size()) ? std::max(acc, 0.0) : acc;
            }
            x.swap(y);
        }
        const double logit = std::min(50.0, std::max(-50.0, x[0]));
        out.push_back(1.0 / (1.0 + std::exp(-logit)));
    }
    return out;
}

std::vector<std::vector<double>> head_features(const std::vector<RankedList> &lists, int history_list,
                                               const Fused &fused, int depth) {
    const std::size_t m = std::min(std::size_t(std::max(depth, 0)), fused.rows.size()), n = lists.size();
    std::unordered_map<int, std::size_t> column;
    for (std::size_t j = 0; j < m; ++j) column.emplace(fused.rows[j], j);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<std::vector<double>> ranks(m, std::vector<double>(n, kAbsent)), gaps(m, std::vector<double>(n, nan));
    for (std::size_t li = 0; li < n; ++li) {
        const auto &s = lists[li].scores;
        if (s.empty()) continue;
        const double spread = std::max(1e-6, double(s[0]) - double(s[std::min<std::size_t>(9, s.size() - 1)]));
        for (std::size_t q = 0; q < lists[li].rows.size() && q < s.size(); ++q) {
            auto it = column.find(lists[li].rows[q]);
            if (it == column.end()) continue;
            ranks[it->second][li] = double(q);
            gaps[it->second][li] = (double(s[0]) - double(s[q])) / spread;
        }
    }
    std::vector<std::size_t> sub_lists;
    for (std::size_t li = 1; li < n; ++li) {
        if (int(li) != history_list) sub_lists.push_back(li);
    }
    const bool has_history = history_list >= 0 && std::size_t(history_list) < n;
    std::vector<std::vector<double>> rows;
    for (std::size_t j = 0; j < m; ++j) {
        const auto &r = ranks[j];
        auto best = [&r](const std::vector<std::size_t> &cols) {
            double b = kAbsent;
            bool any = false;
            for (std::size_t c : cols) {
                b = any ? std::min(b, r[c]) : r[c];
                any = true;
            }
            return b;
        };
        const double anchor = n ? best({0}) : kAbsent;
        const double hist = has_history ? best({std::size_t(history_list)}) : kAbsent;
        const double sub = best(sub_lists);
        double counts[4] = {0, 0, 0, 0};
        const double tops[4] = {1, 3, 5, 10};
        std::vector<double> gap_terms(n), reciprocal(n);
        double held = 0, gap_min = std::numeric_limits<double>::infinity(), all_min = kAbsent;
        for (std::size_t li = 0; li < n; ++li) {
            for (int c = 0; c < 4; ++c) counts[c] += r[li] < tops[c] ? 1 : 0;
            const bool present = r[li] != kAbsent;
            held += present ? 1 : 0;
            gap_terms[li] = present ? gaps[j][li] : 0.0;
            if (present) gap_min = std::min(gap_min, gaps[j][li]);
            reciprocal[li] = present ? 1.0 / (1.0 + r[li]) : 0.0;
            all_min = li ? std::min(all_min, r[li]) : r[li];
        }
        const double gap_sum = numpy_sum(gap_terms.data(), n);
        const double position = double(j);
        std::vector<double> row = {
            position, std::log1p(position), double(fused.scores[0]) - double(fused.scores[j]), double(n), n > 1 ? 1.0 : 0.0,
            n ? all_min : kAbsent, std::log1p(std::min(sub, 30.0)), std::log1p(std::min(anchor, 30.0)),
            std::log1p(std::min(hist, 30.0)), anchor != kAbsent ? 1.0 : 0.0, hist != kAbsent ? 1.0 : 0.0,
            sub != kAbsent ? 1.0 : 0.0};
        const double lists_n = double(std::max<std::size_t>(n, 1));
        for (double c : counts) row.push_back(c / lists_n);
        for (double c : counts) row.push_back(c);
        row.push_back(held > 0 ? gap_min : 1.0);
        row.push_back(held > 0 ? gap_sum / std::max(held, 1.0) : 1.0);
        row.push_back(numpy_sum(reciprocal.data(), n));
        rows.push_back(std::move(row));
    }
    return rows;
}

int head_cut(const std::vector<double> &probabilities, std::vector<int> &order, const Cut &cut, const CutConfig &config) {
    const int k = cut.pool >= 0 ? cut.pool : cut.k;
    const double floor = config.min_probability;
    const int k_max = config.k_max;
    auto p = [&probabilities](int i) { return std::size_t(i) < probabilities.size() ? probabilities[std::size_t(i)] : 0.0; };
    auto by_probability = [&p](int a, int b) { return p(a) != p(b) ? p(a) > p(b) : a < b; };
    std::vector<int> kept(order.begin(), order.begin() + std::min<std::ptrdiff_t>(k, std::ptrdiff_t(order.size())));
    std::sort(kept.begin(), kept.end(), by_probability);
    std::vector<int> surest;
    for (int i : kept) {
        if (p(i) >= floor) surest.push_back(i);
    }
    if (surest.empty() && !kept.empty()) surest.push_back(kept[0]);
    if (int(surest.size()) > k_max) surest.resize(std::size_t(std::max(k_max, 0)));
    std::vector<int> scored, unscored;
    for (int i : order) {
        if (std::find(surest.begin(), surest.end(), i) != surest.end()) continue;
        (std::size_t(i) < probabilities.size() ? scored : unscored).push_back(i);
    }
    std::sort(scored.begin(), scored.end(), by_probability);
    std::vector<int> out = surest;
    out.insert(out.end(), scored.begin(), scored.end());
    out.insert(out.end(), unscored.begin(), unscored.end());
    order.swap(out);
    return int(surest.size());
}

}  // namespace ms
