// main.cpp: the magicselector-native executable: select (JSONL requests on stdin), verify (every golden stage), replay (fed vectors), bench (latency, cold start, RSS).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "error.h"
#include "json.h"
#include "magicselector.h"
#include "selector.h"
#include "verify.h"

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kStart = Clock::now();  // process start, near enough: before main

const char *kUsage =
    "usage: magicselector-native COMMAND BUNDLE [--threads N] [--options JSON] [--no-verify]\n"
    "  select   one JSON request per stdin line ({query, history, max_tools, max_schema_tokens, format}),\n"
    "           one Selection (Selection.to_dict's keys) or {\"error\": {status, message}} per stdout line\n"
    "  verify   check every stage of the bundle's golden.json pipeline probes; prints a JSON report,\n"
    "           exits 1 on a mismatch\n"
    "  replay   like select, each request with \"vectors\" (one per retrieval text) in place of the embedder\n"
    "  bench    run the stdin requests (--repeat N times each, default 5); prints turn p50/p90/mean ms,\n"
    "           cold start (process start to the first answer) and peak RSS as JSON\n";

const char *status_name(ms_status s) {
    switch (s) {
        case MS_OK: return "ok";
        case MS_ERR_ARGUMENT: return "argument";
        case MS_ERR_INPUT: return "input";
        case MS_ERR_BUNDLE: return "bundle";
        case MS_ERR_UNSUPPORTED: return "unsupported";
        case MS_ERR_UNKNOWN_TOOL: return "unknown_tool";
        default: return "internal";
    }
}

ms::json error_line(ms_status s, const std::string &message) {
    return {{"error", {{"status", status_name(s)}, {"code", int(s)}, {"message", message}}}};
}

void print(const ms::json &j) {
    std::cout << j.dump(-1, ' ', false, ms::json::error_handler_t::replace) << "\n";
    std::cout.flush();
}

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const double at = q * double(v.size() - 1);  // numpy's linear interpolation
    const std::size_t lo = std::size_t(std::floor(at)), hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (at - double(lo));
}

long peak_rss_kb() {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

int run_select(const std::string &bundle, const std::string &options) {
    ms_selector *sel = nullptr;
    ms_status st = ms_open(bundle.c_str(), options.c_str(), &sel);
    if (st != MS_OK) {
        print(error_line(st, ms_last_error()));
        return 2;
    }
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        char *out = nullptr;
        st = ms_select(sel, line.c_str(), &out);
        if (st == MS_OK) {
            std::cout << out << "\n";
            std::cout.flush();
        } else {
            print(error_line(st, ms_last_error()));
        }
        ms_free(out);
    }
    ms_close(sel);
    return 0;
}

int run_bench(const std::string &bundle, const std::string &options, int repeat) {
    ms_selector *sel = nullptr;
    ms_status st = ms_open(bundle.c_str(), options.c_str(), &sel);
    if (st != MS_OK) {
        print(error_line(st, ms_last_error()));
        return 2;
    }
    std::vector<std::string> requests;
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.find_first_not_of(" \t\r") != std::string::npos) requests.push_back(line);
    }
    double cold = -1.0;
    std::vector<double> turns;
    int errors = 0;
    for (int r = 0; r < repeat; ++r) {
        for (const std::string &req : requests) {
            const auto t = Clock::now();
            char *out = nullptr;
            st = ms_select(sel, req.c_str(), &out);
            const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
            ms_free(out);
            if (st != MS_OK) {
                ++errors;
                continue;
            }
            if (cold < 0) {
                cold = std::chrono::duration<double, std::milli>(Clock::now() - kStart).count();
            } else {
                turns.push_back(ms);  // the first answer counts as the cold start, not a turn
            }
        }
    }
    ms_close(sel);
    double mean = 0.0;
    for (double t : turns) mean += t;
    mean = turns.empty() ? 0.0 : mean / double(turns.size());
    print({{"turns", turns.size()}, {"requests", requests.size()}, {"repeat", repeat}, {"errors", errors},
           {"turn_p50_ms", percentile(turns, 0.5)}, {"turn_p90_ms", percentile(turns, 0.9)}, {"turn_mean_ms", mean},
           {"cold_start_ms", cold}, {"peak_rss_mb", double(peak_rss_kb()) / 1024.0}});
    return errors ? 1 : 0;
}

int run_replay(const std::string &bundle, const std::string &options_json) {
    ms::Options options = ms::Options::from_json(options_json);
    options.embedder = false;
    auto sel = ms::Selector::open(bundle, options);
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        try {
            const ms::Request req = ms::Request::from_json(line, sel->options().budget);
            const ms::json raw = ms::parse_json(line, MS_ERR_ARGUMENT, "request");
            std::vector<std::vector<float>> vectors;  // checked against the retrieval texts by select
            const ms::json given = raw.value("vectors", ms::json::array());
            if (!given.is_array()) ms::fail(MS_ERR_ARGUMENT, "vectors: a list of one vector per retrieval text");
            for (const auto &v : given) {
                if (!v.is_array()) ms::fail(MS_ERR_ARGUMENT, "vectors: each must be a list of numbers");
                std::vector<float> row;
                for (const auto &x : v) {
                    if (!x.is_number() || !(std::fabs(x.get<double>()) <= 3.0e38)) {
                        ms::fail(MS_ERR_ARGUMENT, "vectors: each must be a list of finite float32 numbers");
                    }
                    row.push_back(float(x.get<double>()));
                }
                vectors.push_back(std::move(row));
            }
            print(sel->select(req, &vectors));
        } catch (const ms::Error &e) {
            print(error_line(e.status(), e.what()));
        }
    }
    return 0;
}

}  // namespace

int verify_bundle(const std::string &bundle, const std::string &options_json) {
    ms::Options options = ms::Options::from_json(options_json);
    std::unique_ptr<ms::Selector> sel;
    std::string skipped;
    try {
        sel = ms::Selector::open(bundle, options);
    } catch (const ms::Error &e) {  // without a GGUF the later stages are still checked
        if (e.status() != MS_ERR_BUNDLE || std::string(e.what()).find("GGUF") == std::string::npos) throw;
        options.embedder = false;
        sel = ms::Selector::open(bundle, options);
        skipped = e.what();
    }
    ms::json report = ms::verify_golden(*sel);
    if (!skipped.empty()) report["embedder"] = "skipped: " + skipped;
    print(report);
    return report["ok"].get<bool>() ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 3 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
        std::fputs(kUsage, argc < 3 ? stderr : stdout);
        return argc < 3 ? 2 : 0;
    }
    const std::string command = argv[1], bundle = argv[2];
    ms::json options = ms::json::object();
    int repeat = 5;
    for (int i = 3; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        try {
            if (arg == "--threads" && has_value) {
                options["threads"] = std::stoi(argv[++i]);
            } else if (arg == "--repeat" && has_value) {
                repeat = std::max(1, std::stoi(argv[++i]));
            } else if (arg == "--no-verify") {
                options["verify"] = false;
            } else if (arg == "--options" && has_value) {
                const ms::json extra = ms::parse_json(argv[++i], MS_ERR_ARGUMENT, "--options");
                if (!extra.is_object()) ms::fail(MS_ERR_ARGUMENT, "--options must be a JSON object");
                options.update(extra);
            } else {
                std::fprintf(stderr, "magicselector-native: unknown argument '%s'\n%s", arg.c_str(), kUsage);
                return 2;
            }
        } catch (const std::exception &e) {
            std::fprintf(stderr, "magicselector-native: %s: %s\n", arg.c_str(), e.what());
            return 2;
        }
    }
    const std::string options_json = options.empty() ? "" : options.dump();
    try {
        if (command == "select") return run_select(bundle, options_json);
        if (command == "bench") return run_bench(bundle, options_json, repeat);
        if (command == "replay") return run_replay(bundle, options_json);
        if (command == "verify") return verify_bundle(bundle, options_json);
    } catch (const ms::Error &e) {
        print(error_line(e.status(), e.what()));
        return 2;
    } catch (const std::exception &e) {
        print(error_line(MS_ERR_INTERNAL, e.what()));
        return 2;
    }
    std::fprintf(stderr, "magicselector-native: unknown command '%s'\n%s", command.c_str(), kUsage);
    return 2;
}
