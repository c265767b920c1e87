// test_pipeline.cpp: every stage of the bundle's golden pipeline probes re-run natively (verify.cpp) must match: the text stages exactly, the later ones from the written vectors.
//
// Usage: test_pipeline BUNDLE [DATA]. The embedder's own cosine is test_embed's; here the later stages
// are fed the written vectors, so this holds on any CPU. Exit 77: no bundle given.
#include <cstdio>

#include "error.h"
#include "selector.h"
#include "verify.h"

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '\0') {
        std::fprintf(stderr, "test_pipeline: no bundle given: skipped\n");
        return 77;
    }
    try {
        ms::Options options;
        options.embedder = false;
        auto selector = ms::Selector::open(argv[1], options);
        const ms::json report = ms::verify_golden(*selector);
        std::printf("%s\n", report.dump(2).c_str());
        if (!report["ok"].get<bool>()) return 1;
        if (report["turns"].get<int>() < 30) {
            std::fprintf(stderr, "test_pipeline: only %d probe turns\n", report["turns"].get<int>());
            return 1;
        }
        // a request the core must refuse, naming the field
        try {
            selector->texts(ms::Request::from_json(R"({"query": "x", "max_tools": 0})", ms::Budget{}));
            std::fprintf(stderr, "test_pipeline: max_tools 0 was accepted\n");
            return 1;
        } catch (const ms::Error &e) {
            if (e.status() != MS_ERR_INPUT || std::string(e.what()).find("max_tools") == std::string::npos) {
                std::fprintf(stderr, "test_pipeline: max_tools 0 gave %d '%s'\n", int(e.status()), e.what());
                return 1;
            }
        }
        // the shipped default budget (SelectorConfig.max_tools=5): a request without a bound gets it,
        // a request's own bound replaces it, and the options' null lifts it
        const ms::Options defaults;  // named: GCC 12 -O2 flags a temporary's members as maybe-uninitialized
        const ms::Budget shipped = defaults.budget;
        const ms::Request plain = ms::Request::from_json(R"({"query": "x"})", shipped);
        const ms::Request own = ms::Request::from_json(R"({"query": "x", "max_tools": 8})", shipped);
        const ms::Options lifted = ms::Options::from_json(R"({"max_tools": null})");
        if (shipped.max_tools != 5 || plain.budget.max_tools != 5 || own.budget.max_tools != 8 ||
            lifted.budget.max_tools != -1 || defaults.to_golden_config()["budget"]["max_tools"] != 5) {
            std::fprintf(stderr, "test_pipeline: the default budget is not five tools (%d, %d, %d, %d)\n",
                         shipped.max_tools, plain.budget.max_tools, own.budget.max_tools, lifted.budget.max_tools);
            return 1;
        }
        return 0;
    } catch (const ms::Error &e) {
        std::fprintf(stderr, "test_pipeline: %d %s\n", int(e.status()), e.what());
        return 1;
    }
}
