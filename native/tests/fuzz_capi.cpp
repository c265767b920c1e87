// fuzz_capi.cpp: a seeded loop of mutated requests and mutated bundles through the C API (and the bundle reader): every answer is a status and a message, never a crash or an internal error.
//
// Usage: fuzz_capi BUNDLE [DATA] [--cases N] [--seed S]. Run under ASan/UBSan (MS_SANITIZE=ON). It
// copies BUNDLE into a scratch folder, then per bundle case rewrites one listed file (truncated, bytes
// flipped, spliced, replaced by another file, by a directory or a link out of the folder) or the
// manifest (paths out of the folder, wrong sizes, wrong types), sometimes with the manifest's size and
// sha256 updated to match, so the parsers (catalog, usearch, npz, head, tokenizer, schema sizes) meet
// hostile bytes that pass the hash check; per request case it mutates a valid request (bytes, types,
// budgets, formats, deep nesting, invalid UTF-8, long texts and histories). Exit 0: every case gave
// MS_OK or an error status with a non-empty message and no MS_ERR_INTERNAL; 77: no bundle given.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "digest.h"
#include "error.h"
#include "json.h"
#include "magicselector.h"
#include "selector.h"

namespace {

std::string slurp(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

void spit(const std::string &path, const std::string &data) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << data;
}

int run(const std::string &cmd) { return std::system(cmd.c_str()); }

std::string mutate_bytes(std::mt19937_64 &rng, std::string s) {
    const int kind = int(rng() % 6);
    if (s.empty()) return std::string(1, char(rng()));
    const std::size_t at = rng() % s.size();
    switch (kind) {
        case 0: return s.substr(0, at);                                         // truncated
        case 1: for (int i = 0; i < 1 + int(rng() % 16); ++i) s[rng() % s.size()] = char(rng()); return s;  // flipped bytes
        case 2: return s.insert(at, std::string(1 + rng() % 64, char(rng())));  // inserted run
        case 3: return s.erase(at, 1 + rng() % 64);                             // deleted run
        case 4: return s + s.substr(at);                                        // duplicated tail
        default: {                                                             // a 32-bit field set to an extreme
            const uint32_t v = (rng() & 1) ? 0xFFFFFFFFu : uint32_t(rng());
            if (at + 4 <= s.size()) std::memcpy(&s[at], &v, 4);
            return s;
        }
    }
}

struct Tally {
    std::map<int, int> statuses;
    int cases = 0, failures = 0;
    void note(ms_status st, const std::string &what, const std::string &message) {
        ++cases;
        ++statuses[int(st)];
        if (st == MS_ERR_INTERNAL || (st != MS_OK && message.empty())) {
            ++failures;
            if (failures <= 10) std::fprintf(stderr, "FAIL %s: status %d '%s'\n", what.c_str(), int(st), message.substr(0, 300).c_str());
        }
    }
};

ms_status open_bundle(const std::string &dir, std::string &message) {
    // the bundle's readers without the embedder (the C API would open the GGUF on every case: slow),
    // mapped to statuses exactly as capi.cpp maps them
    try {
        ms::Options o;
        o.embedder = false;
        auto s = ms::Selector::open(dir, o);
        std::vector<std::vector<float>> vectors;
        ms::Request r;
        r.query = "turn on bluetooth and play some jazz";
        const ms::Texts tx = s->texts(r);
        for (std::size_t i = 0; i < tx.texts.size(); ++i) {
            std::vector<float> v(std::size_t(s->bundle().manifest()["index"].value("ndim", 384)), 0.05f);
            vectors.push_back(v);
        }
        s->select(r, &vectors);
        return MS_OK;
    } catch (const ms::Error &e) {
        message = e.what();
        return e.status();
    } catch (const std::exception &e) {
        message = std::string("internal: ") + e.what();
        return MS_ERR_INTERNAL;
    }
}

const std::vector<std::string> kRequests = {
    R"({"query": "turn on bluetooth and play some jazz"})",
    R"({"query": "Yes, at 7 please", "history": [{"role": "user", "content": "I need to get up early"}, {"role": "assistant", "content": "Should I set an alarm? What time?"}]})",
    R"({"query": "take a selfie and share it with Mia", "max_schema_tokens": 300, "format": "openai"})",
    R"({"query": "book a table and order a ride", "max_tools": 2, "format": "anthropic", "history": []})",
};

std::string hostile_request(std::mt19937_64 &rng) {
    const int kind = int(rng() % 14);
    const std::string q = kRequests[rng() % kRequests.size()];
    switch (kind) {
        case 0: return mutate_bytes(rng, q);
        case 1: return std::string(2000 + rng() % 5000, '[');
        case 2: return R"({"query": ")" + std::string(16001 + rng() % 100, 'a') + R"("})";
        case 3: return "{\"query\": \"caf\xc3\x28 \xff\xfe\"}";
        case 4: return R"({"query": "x", "max_tools": )" + std::vector<std::string>{"0", "-1", "1e30", "true", "\"3\"", "2.5", "[]", "99999999999999999999"}[rng() % 8] + "}";
        case 5: return R"({"query": "x", "format": )" + std::vector<std::string>{"\"yaml\"", "1", "null", "{}", "\"MCP\""}[rng() % 5] + "}";
        case 6: {
            std::string h = R"({"query": "and then?", "history": [)";
            const int n = 1 + int(rng() % 300);
            for (int i = 0; i < n; ++i) h += std::string(i ? "," : "") + R"({"role": ")" + (i % 2 ? "assistant" : "user") + R"(", "content": ")" + std::string(rng() % 400, 'w') + "\"}";
            return h + "]}";
        }
        case 7: return R"({"query": "x", "history": [{"role": 5, "content": "a"}]})";
        case 8: return R"({"query": "x", "history": [{"role": "wizard", "content": "a"}]})";
        case 9: return R"({"query": "x", "history": "not a list"})";
        case 10: return R"({"query": 42})";
        case 11: return R"({"query": "   "})";
        case 12: return R"({"query": "x", "unknown": 1})";
        default: {
            std::string s;
            for (int i = 0; i < 200; ++i) s.push_back(char(rng()));
            return "{\"query\": \"" + s + "\"}";
        }
    }
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2 || std::string(argv[1]).empty()) {
        std::fprintf(stderr, "fuzz_capi: no bundle given: skipped\n");
        return 77;
    }
    const std::string bundle = argv[1];
    int request_cases = 2000, bundle_cases = 1200;
    uint64_t seed = 42;
    for (int i = 2; i + 1 < argc; ++i) {
        if (std::strcmp(argv[i], "--cases") == 0) request_cases = bundle_cases = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--seed") == 0) seed = std::strtoull(argv[++i], nullptr, 10);
    }
    std::mt19937_64 rng(seed);
    Tally requests, bundles;

    // 1. requests through the C API on the real bundle (the embedder included where it has a GGUF)
    ms_selector *sel = nullptr;
    ms_status st = ms_open(bundle.c_str(), nullptr, &sel);
    const bool have_embedder = st == MS_OK;
    if (!have_embedder) std::fprintf(stderr, "fuzz_capi: ms_open: %s (requests replayed with fed vectors)\n", ms_last_error());
    ms::Options fed_options;
    fed_options.embedder = false;
    std::unique_ptr<ms::Selector> fed = have_embedder ? nullptr : ms::Selector::open(bundle, fed_options);
    for (int i = 0; i < request_cases; ++i) {
        const std::string req = hostile_request(rng);
        if (have_embedder) {
            char *out = nullptr;
            st = ms_select(sel, req.c_str(), &out);
            if (st == MS_OK && !ms::json::accept(out)) {
                requests.note(MS_ERR_INTERNAL, "request " + std::to_string(i), "MS_OK but the answer is not JSON");
            } else {
                requests.note(st, "request " + std::to_string(i), ms_last_error());
            }
            ms_free(out);
        } else {
            std::string message;
            try {
                const ms::Request r = ms::Request::from_json(req, ms::Budget{});
                const ms::Texts tx = fed->texts(r);
                std::vector<std::vector<float>> v(tx.texts.size(), std::vector<float>(384, 0.05f));
                fed->select(r, &v);
                st = MS_OK;
            } catch (const ms::Error &e) {
                st = e.status();
                message = e.what();
            } catch (const std::exception &e) {
                st = MS_ERR_INTERNAL;
                message = e.what();
            }
            requests.note(st, "request " + std::to_string(i), message);
        }
    }
    // NULLs and a closed handle's neighbours
    char *out = nullptr;
    requests.note(ms_select(nullptr, "{}", &out), "NULL selector", ms_last_error());
    requests.note(ms_select(sel, nullptr, &out), "NULL request", ms_last_error());
    requests.note(ms_select(sel, "{\"query\": \"x\"}", nullptr), "NULL out", ms_last_error());
    ms_selector *none = nullptr;
    requests.note(ms_open(nullptr, nullptr, &none), "NULL dir", ms_last_error());
    requests.note(ms_open(bundle.c_str(), nullptr, nullptr), "NULL out", ms_last_error());
    ms_close(sel);
    ms_close(nullptr);
    ms_free(nullptr);

    // 2. bundles: a scratch copy, one file mutated per case
    char tmpl[] = "/tmp/fuzz_capi_XXXXXX";
    if (!mkdtemp(tmpl)) return 1;
    const std::string scratch = std::string(tmpl) + "/b";
    if (run("cp -r '" + bundle + "' '" + scratch + "'") != 0) return 1;
    const ms::json manifest = ms::json::parse(slurp(scratch + "/manifest.json"));
    std::vector<std::string> files;
    for (auto it = manifest["files"].begin(); it != manifest["files"].end(); ++it) {
        const std::string rel = it.key();
        if (rel.find(".onnx") == std::string::npos && rel.find(".gguf") == std::string::npos) files.push_back(rel);
    }
    files.push_back("manifest.json");
    std::map<std::string, std::string> original;
    for (const std::string &f : files) original[f] = slurp(scratch + "/" + f);
    std::map<std::string, int> tried;
    for (int i = 0; i < bundle_cases; ++i) {
        const std::string rel = files[rng() % files.size()];
        const std::string path = scratch + "/" + rel;
        ms::json m = manifest;
        const int how = int(rng() % 10);
        std::string what;
        if (rel == "manifest.json") {
            const std::vector<std::string> keys = {"index", "catalog", "lexical", "head", "golden", "schema_tokens", "embedder"};
            const std::string sec = keys[rng() % keys.size()];
            const std::vector<ms::json> values = {"../../etc/passwd", "/etc/passwd", 5, nullptr, ms::json::array(), "missing.bin", "a//b", "./catalog.jsonl"};
            const int pick = int(rng() % 4);
            if (pick == 0) m[sec]["file"] = values[rng() % values.size()];
            else if (pick == 1) m[sec] = values[rng() % values.size()];
            else if (pick == 2) m["files"][files[rng() % (files.size() - 1)]]["size"] = std::vector<ms::json>{-1, 0, 1, 1e30, "12", (int64_t(1) << 40)}[rng() % 6];
            else m["index"]["ndim"] = std::vector<ms::json>{0, -3, 383, 1 << 20, "384", 1.5}[rng() % 6];
            what = "manifest." + sec;
            spit(path, how < 8 ? m.dump() : mutate_bytes(rng, m.dump()));
        } else {
            std::string data;
            if (how == 8) {  // a directory or a link out of the folder in its place
                std::remove(path.c_str());
                if (rng() & 1) mkdir(path.c_str(), 0700);
                else if (symlink("/etc/passwd", path.c_str()) != 0) spit(path, "");
                what = rel + " replaced by a directory or link";
            } else if (how == 9) {
                data = original[files[rng() % files.size()]];  // another file's bytes
                spit(path, data);
                what = rel + " holds another file";
            } else {
                data = mutate_bytes(rng, original[rel]);
                spit(path, data);
                what = rel + " mutated";
            }
            if (how != 8 && (rng() & 1)) {  // a consistent manifest: the hostile bytes reach the parsers
                m["files"][rel]["size"] = data.size();
                m["files"][rel]["sha256"] = ms::sha256_hex(data.data(), data.size());
                spit(scratch + "/manifest.json", m.dump());
                what += " (manifest updated)";
            }
        }
        ++tried[what.substr(0, what.find(' '))];
        std::string message;
        bundles.note(open_bundle(scratch, message), "bundle case " + std::to_string(i) + ": " + what, message);
        // restore
        run("rm -rf '" + path + "'");
        spit(path, original[rel]);
        spit(scratch + "/manifest.json", original["manifest.json"]);
    }
    run("rm -rf '" + std::string(tmpl) + "'");
    auto show = [](const char *name, const Tally &t) {
        std::printf("%s: %d cases, %d failures; statuses:", name, t.cases, t.failures);
        for (const auto &kv : t.statuses) std::printf(" %d:%d", kv.first, kv.second);
        std::printf("\n");
    };
    show("requests", requests);
    show("bundles", bundles);
    std::printf("bundle files tried:");
    for (const auto &kv : tried) std::printf(" %s:%d", kv.first.c_str(), kv.second);
    std::printf("\n");
    std::fflush(stdout);  // before the leak checker's report at exit
    return requests.failures + bundles.failures ? 1 : 0;
}
