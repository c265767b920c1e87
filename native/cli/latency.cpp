// latency.cpp: the magicselector-native-latency executable: the latency workload in one process over the C API (cold start, per-turn stage samples, peak RSS), the phone's side of `bench latency --device adb`.
//
//   magicselector-native-latency BUNDLE --turns FILE.jsonl --out FILE.json [--runs N] [--warmup N]
//                                [--threads N] [--options JSON] [--no-verify]
//
// It does what bench/latency.py's measure_latency does in Python, with nothing but this static
// executable on the device: ms_open (load), the first turn (first select: load + first select is the
// cold start), `warmup` untimed passes over the turns, then `runs` timed passes. It writes the raw
// samples (every timed turn's timings_ms, the first timed pass's kept and ranked ids) and lets the
// host compute percentiles and schema tokens with the same Python code as a local run, so a phone's
// numbers and the host's are computed alike. Exit 0 on success, 2 on a clear error (on stderr).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/utsname.h>

#include "json.h"
#include "magicselector.h"

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kStart = Clock::now();  // static initialization: as near to exec as C++ gets

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

const char *kUsage =
    "usage: magicselector-native-latency BUNDLE --turns FILE.jsonl --out FILE.json [--runs N] [--warmup N]\n"
    "                                    [--threads N] [--options JSON] [--no-verify]\n"
    "  --turns    one request per line ({query, history, ...}, as `magicselector-native select` reads)\n"
    "  --out      where the raw samples go as JSON ('-': stdout)\n"
    "  --runs     timed passes over the turns (default 20); --warmup untimed passes first (default 3)\n";

// One "Key: value" field of /proc/self/status in kB, -1 when absent.
long status_kb(const char *key) {
    std::ifstream f("/proc/self/status");
    std::string line;
    const std::size_t n = std::strlen(key);
    while (std::getline(f, line)) {
        if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') {
            return std::atol(line.c_str() + n + 1);
        }
    }
    return -1;
}

// What the kernel says of the CPU: model names / parts and the feature flags, read as text.
ms::json cpu_description() {
    std::ifstream f("/proc/cpuinfo");
    std::string line, features, model, hardware;
    std::vector<std::string> parts;
    while (std::getline(f, line)) {
        const std::size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string key = line.substr(0, colon), value = line.substr(colon + 1);
        key.erase(key.find_last_not_of(" \t") + 1);
        value.erase(0, value.find_first_not_of(" \t"));
        if ((key == "Features" || key == "flags") && features.empty()) features = value;
        if (key == "model name" && model.empty()) model = value;
        if (key == "Hardware" && hardware.empty()) hardware = value;
        if (key == "CPU part" && std::find(parts.begin(), parts.end(), value) == parts.end()) parts.push_back(value);
    }
    struct utsname u;
    const bool named = uname(&u) == 0;
    return {{"machine", named ? u.machine : ""}, {"system", named ? u.sysname : ""}, {"release", named ? u.release : ""},
            {"model_name", model}, {"hardware", hardware}, {"cpu_parts", parts}, {"features", features}};
}

struct Args {
    std::string bundle, turns, out = "-", options_json;
    int runs = 20, warmup = 3, threads = 1;
    bool verify = true;
};

int positive(const char *flag, const char *text, int least) {
    char *end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < least || v > 1000000) {
        ms::fail(MS_ERR_ARGUMENT, std::string(flag) + " must be an integer >= " + std::to_string(least) + ", got '" + text + "'");
    }
    return int(v);
}

Args parse_args(int argc, char **argv) {
    Args a;
    a.bundle = argv[1];
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--turns" && has_value) a.turns = argv[++i];
        else if (arg == "--out" && has_value) a.out = argv[++i];
        else if (arg == "--runs" && has_value) a.runs = positive("--runs", argv[++i], 1);
        else if (arg == "--warmup" && has_value) a.warmup = positive("--warmup", argv[++i], 0);
        else if (arg == "--threads" && has_value) a.threads = positive("--threads", argv[++i], 1);
        else if (arg == "--options" && has_value) a.options_json = argv[++i];
        else if (arg == "--no-verify") a.verify = false;
        else ms::fail(MS_ERR_ARGUMENT, "unknown argument '" + arg + "'");
    }
    if (a.turns.empty()) ms::fail(MS_ERR_ARGUMENT, "--turns FILE.jsonl is required");
    return a;
}

std::vector<std::string> read_turns(const std::string &path) {
    std::ifstream f(path);
    if (!f) ms::fail(MS_ERR_ARGUMENT, "--turns: cannot read '" + path + "'");
    std::vector<std::string> out;
    std::string line;
    while (std::getline(f, line)) {
        if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(line);
    }
    if (out.empty()) ms::fail(MS_ERR_ARGUMENT, "--turns: '" + path + "' holds no requests");
    return out;
}

// The options for ms_open: the caller's, with threads, verify and ranked_ids (the fixed-10 schema
// tokens read the ranked list; it is built after timings_ms.total is taken, so it costs no stage).
std::string open_options(const Args &a) {
    ms::json o = a.options_json.empty() ? ms::json::object() : ms::parse_json(a.options_json, MS_ERR_ARGUMENT, "--options");
    if (!o.is_object()) ms::fail(MS_ERR_ARGUMENT, "--options must be a JSON object");
    o["threads"] = a.threads;
    o["ranked_ids"] = true;
    if (!a.verify) o["verify"] = false;
    return o.dump();
}

// ms_select as an exception: the C API's status and message, naming the turn.
ms::json select_turn(ms_selector *sel, const std::string &request, std::size_t turn) {
    char *out = nullptr;
    const ms_status st = ms_select(sel, request.c_str(), &out);
    if (st != MS_OK) {
        ms_free(out);
        ms::fail(st, "turn " + std::to_string(turn + 1) + " of --turns: " + ms_last_error());
    }
    const std::string text(out);
    ms_free(out);
    return ms::parse_json(text, MS_ERR_INTERNAL, "selection");
}

ms::json measure(const Args &a) {
    const std::vector<std::string> turns = read_turns(a.turns);
    const std::string options = open_options(a);
    const auto t0 = Clock::now();
    ms_selector *sel = nullptr;
    const ms_status st = ms_open(a.bundle.c_str(), options.c_str(), &sel);
    if (st != MS_OK) ms::fail(st, std::string("ms_open: ") + ms_last_error());
    struct Closer {
        ms_selector *s;
        ~Closer() { ms_close(s); }
    } closer{sel};
    const auto t1 = Clock::now();
    select_turn(sel, turns[0], 0);
    const auto t2 = Clock::now();
    ms::json cold = {{"import_ms", nullptr}, {"process_start_ms", ms_between(kStart, t0)},
                     {"load_ms", ms_between(t0, t1)}, {"first_select_ms", ms_between(t1, t2)}};

    ms::json samples = ms::json::object(), first_pass = ms::json::array();
    for (int r = 0; r < a.warmup + a.runs; ++r) {
        const bool timing = r >= a.warmup;
        const auto t_pass = Clock::now();
        for (std::size_t i = 0; i < turns.size(); ++i) {
            const ms::json s = select_turn(sel, turns[i], i);
            if (!timing) continue;
            for (auto it = s["timings_ms"].begin(); it != s["timings_ms"].end(); ++it) {
                samples[it.key()].push_back(it.value().get<double>());
            }
            if (r == a.warmup) {
                ms::json ids = ms::json::array(), ranked = ms::json::array();
                for (const auto &t : s["tools"]) ids.push_back(t["id"]);
                const ms::json &all = s["ranked_ids"];
                for (std::size_t k = 0; k < all.size() && k < 10; ++k) ranked.push_back(all[k]);
                first_pass.push_back({{"ids", ids}, {"ranked_10", ranked}, {"texts", s["retrieved_texts"].size()},
                                      {"k", s["k"]}});
            }
        }
        std::fprintf(stderr, "[latency] %s %d/%d: %zu turns in %.0f ms\n", timing ? "run" : "warmup",
                     timing ? r - a.warmup + 1 : r + 1, timing ? a.runs : a.warmup, turns.size(),
                     ms_between(t_pass, Clock::now()));
    }
    return {{"schema", "magicselector-native-latency/1"},
            {"runs", a.runs}, {"warmup", a.warmup}, {"threads", a.threads}, {"verify", a.verify},
            {"turns", turns.size()}, {"options", ms::parse_json(options, MS_ERR_INTERNAL, "options")},
            {"cold_start_ms", ms_between(t0, t2)}, {"cold_start_breakdown", cold},
            {"peak_rss_mb", double(status_kb("VmHWM")) / 1024.0}, {"rss_mb", double(status_kb("VmRSS")) / 1024.0},
            {"cpu", cpu_description()}, {"samples", samples}, {"first_pass", first_pass},
            {"wall_s", ms_between(kStart, Clock::now()) / 1000.0}};
}

void write_out(const std::string &path, const std::string &text) {
    if (path == "-") {
        std::cout << text << "\n";
        return;
    }
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!(f << text << "\n")) ms::fail(MS_ERR_ARGUMENT, "--out: cannot write '" + tmp + "'");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) ms::fail(MS_ERR_ARGUMENT, "--out: cannot write '" + path + "'");
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
        std::fputs(kUsage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    try {
        const Args a = parse_args(argc, argv);
        const ms::json result = measure(a);
        write_out(a.out, result.dump(-1, ' ', false, ms::json::error_handler_t::replace));
        std::fprintf(stderr, "[latency] wrote %s: cold start %.0f ms, peak RSS %.0f MB\n", a.out.c_str(),
                     result["cold_start_ms"].get<double>(), result["peak_rss_mb"].get<double>());
        return 0;
    } catch (const ms::Error &e) {
        std::fprintf(stderr, "magicselector-native-latency: error: %s\n", e.what());
    } catch (const std::exception &e) {
        std::fprintf(stderr, "magicselector-native-latency: error: %s\n", e.what());
    }
    return 2;
}
