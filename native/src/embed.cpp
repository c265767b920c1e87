// embed.cpp: the embedder stage on llama.cpp: loads the bundle's BERT GGUF, runs our token ids through
// it with mean pooling and returns L2-normalized vectors; every input llama.cpp would assert on is
// refused here first, so a bad call is an ms::Error, never an abort.
#include "embed.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <llama.h>

#include "error.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDHP
#define HWCAP_ASIMDHP (1UL << 10)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#endif

namespace ms {

namespace {

// llama.cpp and ggml write progress and warnings to stderr by default; the core is a library, so
// they go nowhere (a failure is reported through ms::Error instead).
void discard_log(ggml_log_level, const char *, void *) {}

void init_llama_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(discard_log, nullptr);
        llama_backend_init();
    });
}

std::string meta_string(const llama_model *model, const char *key) {
    char buf[256];
    const int32_t n = llama_model_meta_val_str(model, key, buf, sizeof buf);
    if (n < 0) return "";
    return std::string(buf, std::strlen(buf));
}

}  // namespace

std::string missing_cpu_features() {
    std::string missing;
#if defined(MS_GGML_X86_64_V3) && (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    // what ggml's CPU kernels were compiled with (CMake passes MS_GGML_X86_64_V3 for GGML_NATIVE=OFF)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx")) missing += " avx";
    if (!__builtin_cpu_supports("avx2")) missing += " avx2";
    if (!__builtin_cpu_supports("fma")) missing += " fma";
    if (!__builtin_cpu_supports("bmi2")) missing += " bmi2";
    if (!__builtin_cpu_supports("sse4.2")) missing += " sse4.2";
#endif
#if defined(__aarch64__) && defined(__linux__)
    // our code is compiled with the same -mcpu as ggml's, so these macros say what ggml assumed
    const unsigned long hwcap = getauxval(AT_HWCAP);
#if defined(__ARM_FEATURE_DOTPROD)
    if (!(hwcap & HWCAP_ASIMDDP)) missing += " asimddp (the dot product, Armv8.2-A)";
#endif
#if defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
    if (!(hwcap & HWCAP_ASIMDHP)) missing += " asimdhp (FP16 arithmetic, Armv8.2-A)";
#endif
    (void)hwcap;
#endif
    return missing.empty() ? missing : missing.substr(1);
}

std::unique_ptr<Embedder> Embedder::open(const std::string &gguf_path, int threads, int expected_dim,
                                         int max_tokens) {
    if (threads < 1) fail(MS_ERR_ARGUMENT, "threads must be at least 1, got " + std::to_string(threads));
    if (max_tokens < 2) fail(MS_ERR_ARGUMENT, "max_tokens must be at least 2, got " + std::to_string(max_tokens));
    const std::string missing = missing_cpu_features();
    if (!missing.empty()) {
        fail(MS_ERR_UNSUPPORTED, "this CPU lacks instructions the embedder's kernels were built for: " + missing +
                                     " (rebuild for this CPU: see `magicselector native build --help`)");
    }
    {
        // a sharper message than llama.cpp's generic load failure for the common cases
        std::FILE *f = std::fopen(gguf_path.c_str(), "rb");
        if (!f) fail(MS_ERR_BUNDLE, "embedder file " + gguf_path + ": cannot be opened");
        char magic[4] = {0, 0, 0, 0};
        const std::size_t got = std::fread(magic, 1, 4, f);
        std::fclose(f);
        if (got != 4 || std::memcmp(magic, "GGUF", 4) != 0) {
            fail(MS_ERR_BUNDLE, "embedder file " + gguf_path + ": not a GGUF file");
        }
    }
    init_llama_once();

    std::unique_ptr<Embedder> e(new Embedder());
    e->path_ = gguf_path;
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    e->model_ = llama_model_load_from_file(gguf_path.c_str(), mp);
    if (!e->model_) fail(MS_ERR_BUNDLE, "embedder file " + gguf_path + ": llama.cpp cannot load it as a model");

    const std::string arch = meta_string(e->model_, "general.architecture");
    if (arch != "bert") {
        fail(MS_ERR_BUNDLE, "embedder file " + gguf_path + ": architecture '" + arch + "', expected 'bert'");
    }
    e->dim_ = llama_model_n_embd_out(e->model_);
    if (e->dim_ <= 0) e->dim_ = llama_model_n_embd(e->model_);
    if (expected_dim > 0 && e->dim_ != expected_dim) {
        fail(MS_ERR_BUNDLE, "embedder file " + gguf_path + ": vectors of width " + std::to_string(e->dim_) +
                                ", the bundle's index holds width " + std::to_string(expected_dim));
    }
    const int trained = llama_model_n_ctx_train(e->model_);
    if (trained > 0 && max_tokens > trained) {
        fail(MS_ERR_BUNDLE, "embedder file " + gguf_path + ": trained on " + std::to_string(trained) +
                                " positions, fewer than the tokenizer's " + std::to_string(max_tokens));
    }
    e->max_tokens_ = max_tokens;
    e->vocab_size_ = llama_vocab_n_tokens(llama_model_get_vocab(e->model_));

    llama_context_params cp = llama_context_default_params();
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_MEAN;
    cp.attention_type = LLAMA_ATTENTION_TYPE_NON_CAUSAL;
    // llama_encode takes a sequence in one micro-batch (BERT attends both ways): room for the longest
    cp.n_ctx = static_cast<uint32_t>(max_tokens);
    cp.n_batch = static_cast<uint32_t>(max_tokens);
    cp.n_ubatch = static_cast<uint32_t>(max_tokens);
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    e->ctx_ = llama_init_from_model(e->model_, cp);
    if (!e->ctx_) fail(MS_ERR_BUNDLE, "embedder file " + gguf_path + ": llama.cpp cannot make a context for it");
    if (llama_pooling_type(e->ctx_) != LLAMA_POOLING_TYPE_MEAN) {
        fail(MS_ERR_BUNDLE, "embedder file " + gguf_path + ": mean pooling is not available for this model");
    }
    return e;
}

Embedder::~Embedder() {
    if (ctx_) llama_free(ctx_);
    if (model_) llama_model_free(model_);
}

std::vector<std::vector<float>> Embedder::embed(const std::vector<std::vector<int32_t>> &token_ids) {
    for (std::size_t s = 0; s < token_ids.size(); ++s) {
        const auto &ids = token_ids[s];
        const std::string which = "token_ids[" + std::to_string(s) + "]";
        if (ids.empty()) fail(MS_ERR_INPUT, which + ": empty sequence");
        if (ids.size() > static_cast<std::size_t>(max_tokens_)) {
            fail(MS_ERR_INPUT, which + ": " + std::to_string(ids.size()) + " tokens, the embedder takes at most " +
                                   std::to_string(max_tokens_));
        }
        for (int32_t id : ids) {
            if (id < 0 || id >= vocab_size_) {
                fail(MS_ERR_INPUT, which + ": token id " + std::to_string(id) + " outside the embedder's vocabulary of " +
                                       std::to_string(vocab_size_));
            }
        }
    }
    // one sequence per llama.cpp call: a text's vector never depends on the texts beside it (a turn's
    // texts as sequences of one call changed vectors by up to 3e-8 and saved a tenth of the mean turn,
    // nothing of the p50: docs/bench/native.md)
    std::vector<std::vector<float>> out;
    out.reserve(token_ids.size());
    for (const auto &ids : token_ids) out.push_back(run(ids));
    return out;
}

std::vector<float> Embedder::run(const std::vector<int32_t> &ids) {
    const auto n_tokens = static_cast<int32_t>(ids.size());
    struct BatchGuard {
        llama_batch batch;
        ~BatchGuard() { llama_batch_free(batch); }
    } guard{llama_batch_init(n_tokens, 0, 1)};
    llama_batch &batch = guard.batch;
    if (!batch.token) fail(MS_ERR_INTERNAL, "embedder: out of memory for a batch of " + std::to_string(n_tokens) + " tokens");
    batch.n_tokens = n_tokens;
    for (int32_t i = 0; i < n_tokens; ++i) {
        batch.token[i] = ids[static_cast<std::size_t>(i)];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    const int32_t rc = llama_encode(ctx_, batch);
    if (rc != 0) fail(MS_ERR_INTERNAL, "embedder " + path_ + ": llama_encode failed with " + std::to_string(rc));
    const float *v = llama_get_embeddings_seq(ctx_, 0);
    if (!v) fail(MS_ERR_INTERNAL, "embedder " + path_ + ": no pooled vector");
    std::vector<float> vec(v, v + dim_);
    double norm = 0.0;
    for (float x : vec) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
    if (norm > 0.0) {
        const float inv = static_cast<float>(1.0 / norm);
        for (float &x : vec) x *= inv;
    }
    return vec;
}

}  // namespace ms
