// test_embed.cpp: the llama.cpp embedder against the Python runtime's INT8 ONNX vectors (cosine >= the
// floor on every text) and llama-cpp-python's (the same engine: >= 0.9999), a text's vector independent
// of the texts beside it, and the refusals of bad files and bad input.
// argv: BUNDLE_DIR DATA_DIR. Cases come from DATA_DIR/embed_cases.json when the Python side wrote it
// ({"gguf": path, "min_cosine": x, "min_mean_cosine": y, "cases": [{"text", "input_ids", "vector", "llama"?}]}), else from the bundle's
// golden.json (its tokenizer ids and embeddings) and its manifest's embedder GGUF.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "embed.h"
#include "error.h"
#include "json.h"

using ms_test::check;
using ms_test::failures;

namespace {

std::string read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return "";
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

bool exists(const std::string &path) { return static_cast<bool>(std::ifstream(path)); }

double cosine(const std::vector<float> &a, const std::vector<float> &b) {
    double ab = 0, aa = 0, bb = 0;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
        ab += double(a[i]) * b[i];
        aa += double(a[i]) * a[i];
        bb += double(b[i]) * b[i];
    }
    return (aa > 0 && bb > 0 && a.size() == b.size()) ? ab / std::sqrt(aa * bb) : -2.0;
}

struct Case {
    std::string text;
    std::vector<int32_t> ids;
    std::vector<float> vector;  // the Python runtime's (INT8 ONNX)
    std::vector<float> llama;   // llama-cpp-python's from the same GGUF and ids, when the case file has it
};

// the status of `f()`'s ms::Error, or MS_OK when it returned; the message must name `needle`
template <class F>
ms_status status_of(F f, const std::string &needle, const std::string &what) {
    try {
        f();
    } catch (const ms::Error &e) {
        check(std::string(e.what()).find(needle) != std::string::npos,
              what + ": message '" + e.what() + "' does not name '" + needle + "'");
        return e.status();
    }
    return MS_OK;
}

}  // namespace

int main(int argc, char **argv) {
    const std::string bundle = argc > 1 ? argv[1] : "";
    const std::string data = argc > 2 ? argv[2] : "";
    std::string gguf;
    double min_cosine = 0.98, min_mean_cosine = 0.994;
    std::vector<Case> cases;
    try {
        if (!data.empty() && exists(data + "/embed_cases.json")) {
            const ms::json doc = ms::parse_json(read_file(data + "/embed_cases.json"), MS_ERR_ARGUMENT, "embed_cases.json");
            gguf = doc.at("gguf").get<std::string>();
            min_cosine = doc.value("min_cosine", min_cosine);
            min_mean_cosine = doc.value("min_mean_cosine", min_mean_cosine);
            for (const auto &c : doc.at("cases")) {
                cases.push_back({c.at("text").get<std::string>(), c.at("input_ids").get<std::vector<int32_t>>(),
                                 c.at("vector").get<std::vector<float>>(), c.value("llama", std::vector<float>{})});
            }
        } else if (!bundle.empty() && exists(bundle + "/manifest.json")) {
            const ms::json manifest = ms::parse_json(read_file(bundle + "/manifest.json"), MS_ERR_BUNDLE, "manifest.json");
            const ms::json &emb = manifest.at("embedder");
            if (!emb.contains("gguf")) {
                std::fprintf(stderr, "SKIP: the bundle %s has no embedder GGUF\n", bundle.c_str());
                return 77;
            }
            gguf = bundle + "/" + emb.at("gguf").at("file").get<std::string>();
            const ms::json golden = ms::parse_json(read_file(bundle + "/golden.json"), MS_ERR_BUNDLE, "golden.json");
            const auto &tok = golden.at("tokenizer");
            const auto &vec = golden.at("embeddings");
            // the GGUF's own vectors of the same texts (llama.cpp, one text per decode), where the bundle has them
            const ms::json own = golden.contains("gguf_embeddings") ? golden.at("gguf_embeddings").at("embeddings")
                                                                     : ms::json::array();
            for (std::size_t i = 0; i < tok.size() && i < vec.size(); ++i) {
                std::vector<float> llama;
                if (i < own.size() && own[i].at("text") == tok[i].at("text")) llama = own[i].at("vector").get<std::vector<float>>();
                cases.push_back({tok[i].at("text").get<std::string>(), tok[i].at("input_ids").get<std::vector<int32_t>>(),
                                 vec[i].at("vector").get<std::vector<float>>(), llama});
            }
            // three short probe texts: their mean says nothing of the engines' agreement (the
            // per-text cross-engine floor the golden file states holds, the exact check is the GGUF's own vectors)
            if (golden.contains("gguf_embeddings")) min_cosine = golden.at("gguf_embeddings").value("cross_engine_cosine_min", min_cosine);
            min_mean_cosine = min_cosine;
        } else {
            std::fprintf(stderr, "SKIP: no bundle (argv[1]) and no DATA_DIR/embed_cases.json (argv[2])\n");
            return 77;
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "FAIL: reading the cases: %s\n", e.what());
        return 1;
    }
    check(!cases.empty(), "no cases");

    try {
        auto embedder = ms::Embedder::open(gguf, 1, static_cast<int>(cases.at(0).vector.size()));
        check(embedder->dim() == static_cast<int>(cases[0].vector.size()), "dim");

        // all texts in one call, then each alone: the same vectors
        std::vector<std::vector<int32_t>> ids;
        for (const auto &c : cases) ids.push_back(c.ids);
        const auto together = embedder->embed(ids);
        check(together.size() == cases.size(), "one vector per sequence");
        double worst = 1.0, sum = 0.0, worst_llama = 1.0;
        for (std::size_t i = 0; i < cases.size() && i < together.size(); ++i) {
            const double cos = cosine(together[i], cases[i].vector);
            worst = std::min(worst, cos);
            sum += cos;
            check(cos >= min_cosine, "cosine " + std::to_string(cos) + " < " + std::to_string(min_cosine) + " for '" +
                                         cases[i].text + "'");
            double norm = 0;
            for (float x : together[i]) norm += double(x) * x;
            check(std::fabs(norm - 1.0) < 1e-4, "vector not L2-normalized for '" + cases[i].text + "'");
            if (i < 4) {  // a few suffice (each costs a run; under qemu, a slow one)
                const auto alone = embedder->embed({cases[i].ids});
                check(alone.at(0) == together[i], "a text's vector depends on the texts beside it: '" + cases[i].text + "'");
            }
            if (!cases[i].llama.empty()) {
                const double same = cosine(together[i], cases[i].llama);
                worst_llama = std::min(worst_llama, same);
                // llama-cpp-python's ggml is compiled for the machine (-march=native), ours for x86-64-v3 or
                // an ARM -mcpu: other kernels, other rounding, the same model
                check(same >= 0.999, "cosine " + std::to_string(same) + " with llama-cpp-python's vector of the same ids for '" +
                                          cases[i].text + "'");
            }
        }
        const double mean = sum / double(cases.size());
        check(mean >= min_mean_cosine, "mean cosine " + std::to_string(mean) + " < " + std::to_string(min_mean_cosine));
        std::printf("embed: %zu texts, cosine with the Python runtime's ONNX vectors min %.6f (floor %.3f) mean %.6f "
                    "(floor %.3f); with llama-cpp-python's min %.6f\n", cases.size(), worst, min_cosine, mean, min_mean_cosine,
                    worst_llama);
        check(embedder->embed({}).empty(), "no sequences, no vectors");

        // bad input: each refused with MS_ERR_INPUT naming the sequence
        check(status_of([&] { embedder->embed({cases[0].ids, {}}); }, "token_ids[1]", "empty") == MS_ERR_INPUT, "empty sequence");
        check(status_of([&] { embedder->embed({{101, embedder->vocab_size(), 102}}); }, "token_ids[0]", "id") == MS_ERR_INPUT,
              "id past the vocabulary");
        check(status_of([&] { embedder->embed({{101, -1, 102}}); }, "token_ids[0]", "negative") == MS_ERR_INPUT, "negative id");
        std::vector<int32_t> too_long(static_cast<std::size_t>(embedder->max_tokens()) + 1, 101);
        check(status_of([&] { embedder->embed({too_long}); }, "token_ids[0]", "long") == MS_ERR_INPUT, "too long");
        // a sequence of exactly max_tokens still runs
        std::vector<int32_t> longest(static_cast<std::size_t>(embedder->max_tokens()), cases[0].ids.at(1));
        check(embedder->embed({longest}).at(0).size() == static_cast<std::size_t>(embedder->dim()), "longest sequence");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "FAIL: %s\n", e.what());
        return 1;
    }

    // bad files and settings: each an ms::Error naming the file or the setting, never a crash
    check(status_of([&] { ms::Embedder::open(gguf + ".missing", 1); }, ".missing", "missing") == MS_ERR_BUNDLE, "missing file");
    const std::string not_gguf = !bundle.empty() && exists(bundle + "/manifest.json") ? bundle + "/manifest.json" : std::string(argv[0]);
    check(status_of([&] { ms::Embedder::open(not_gguf, 1); }, not_gguf, "foreign") == MS_ERR_BUNDLE, "a file that is not GGUF");
    {
        // a GGUF cut short: llama.cpp's reader must refuse it (the bundle's sha256 check comes first in
        // the selector, but the embedder alone must not crash on it either)
        const std::string whole = read_file(gguf);
        const std::string cut = "test_embed_truncated.gguf";
        std::ofstream(cut, std::ios::binary) << whole.substr(0, std::min<std::size_t>(whole.size() / 2, 1 << 20));
        check(status_of([&] { ms::Embedder::open(cut, 1); }, cut, "truncated") == MS_ERR_BUNDLE, "a truncated GGUF");
        std::remove(cut.c_str());
    }
    check(status_of([&] { ms::Embedder::open(gguf, 1, 7); }, "width", "dim") == MS_ERR_BUNDLE, "dim mismatch");
    check(status_of([&] { ms::Embedder::open(gguf, 0); }, "threads", "threads") == MS_ERR_ARGUMENT, "threads 0");
    check(status_of([&] { ms::Embedder::open(gguf, 1, 0, 100000); }, "positions", "max_tokens") == MS_ERR_BUNDLE,
          "max_tokens past the trained context");

    if (failures) std::fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
