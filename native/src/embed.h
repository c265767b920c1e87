// embed.h: the embedder stage: token ids (from the bundle's WordPiece tokenizer) to mean-pooled,
// L2-normalized sentence vectors, computed by llama.cpp/ggml from the bundle's GGUF file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct llama_model;
struct llama_context;

namespace ms {

class Embedder {
public:
    // Opens a BERT-family GGUF (mean pooling, no llama.cpp tokenizer: the ids come from ours).
    // `expected_dim` > 0 is checked against the model's width; `max_tokens` is the longest sequence
    // (the tokenizer's max_length). A missing or unreadable file, another
    // architecture or a width mismatch is MS_ERR_BUNDLE naming the file; threads < 1 is
    // MS_ERR_ARGUMENT; a CPU without the instructions the kernels were built for is
    // MS_ERR_UNSUPPORTED. The file's bytes are trusted: the bundle checks its sha256 before this.
    static std::unique_ptr<Embedder> open(const std::string &gguf_path, int threads, int expected_dim = 0,
                                          int max_tokens = 128);

    // One vector per sequence, in order. Every sequence is non-empty, at most max_tokens() long, and
    // its ids lie in the model's vocabulary (else MS_ERR_INPUT naming the sequence).
    std::vector<std::vector<float>> embed(const std::vector<std::vector<int32_t>> &token_ids);

    int dim() const { return dim_; }
    int max_tokens() const { return max_tokens_; }
    int vocab_size() const { return vocab_size_; }

    ~Embedder();
    Embedder(const Embedder &) = delete;
    Embedder &operator=(const Embedder &) = delete;

private:
    Embedder() = default;
    std::vector<float> run(const std::vector<int32_t> &ids);

    std::string path_;
    llama_model *model_ = nullptr;
    llama_context *ctx_ = nullptr;
    int dim_ = 0;
    int max_tokens_ = 0;  // the longest sequence (the context's size)
    int vocab_size_ = 0;
};

// Why this CPU cannot run the kernels this build compiled ("" when it can): x86-64 builds need
// AVX2/FMA/F16C/BMI2, ARM64 builds the features their -mcpu turned on (e.g. the dot product).
std::string missing_cpu_features();

}  // namespace ms
