// dialogue.cpp: input limits, history bounding and the history fold, as runtime/dialogue/ (messages.py, bounds.py, fold.py) does them.
#include "dialogue.h"

#include <algorithm>

#include "error.h"
#include "unicode.h"

namespace ms {
namespace {

using unicode::py_isspace;

// " ".join(text.split())
std::u32string collapse(const std::u32string &text) {
    std::u32string out;
    out.reserve(text.size());
    size_t i = 0, n = text.size();
    while (i < n) {
        while (i < n && py_isspace(text[i])) ++i;
        if (i == n) break;
        if (!out.empty()) out.push_back(U' ');
        while (i < n && !py_isspace(text[i])) out.push_back(text[i++]);
    }
    return out;
}

// text.strip() (Python whitespace)
std::u32string strip_space(const std::u32string &text) {
    size_t a = 0, b = text.size();
    while (a < b && py_isspace(text[a])) ++a;
    while (b > a && py_isspace(text[b - 1])) --b;
    return text.substr(a, b - a);
}

// The last `keep` code points of `text` (all of it when it is shorter).
std::u32string last_chars(const std::u32string &text, long keep) {
    if (keep < 0) keep = 0;
    if (static_cast<long>(text.size()) <= keep) return text;
    return text.substr(text.size() - static_cast<size_t>(keep));
}

// the tail of a list as Python's items[-n:] gives it (n == 0 is the whole list)
template <typename T>
std::vector<T> python_tail(const std::vector<T> &items, int n) {
    long size = static_cast<long>(items.size());
    long start = n > 0 ? std::max(0L, size - n) : n == 0 ? 0 : std::min(size, static_cast<long>(-static_cast<long>(n)));
    return std::vector<T>(items.begin() + start, items.end());
}

struct Exchange {
    std::string role;
    std::u32string content;
};

// _exchanges: user and assistant turns, an assistant's consecutive messages merged (no tool names here)
std::vector<Exchange> exchanges(const std::vector<Turn> &history) {
    std::vector<Exchange> out;
    for (const Turn &t : history) {
        if (t.role == "system" || t.role == "tool") continue;
        std::u32string text = unicode::decode_utf8(t.content, "history content");
        if (!out.empty() && t.role == "assistant" && out.back().role == "assistant") {
            std::u32string &prev = out.back().content;
            if (!prev.empty() && !text.empty()) prev.push_back(U' ');
            prev += text;
        } else {
            out.push_back({t.role, std::move(text)});
        }
    }
    return out;
}

// _questions: each question sentence (from the last sentence end up to its "?"), stripped, joined by " "
std::u32string questions(const std::u32string &text) {
    std::u32string out;
    size_t start = 0;
    bool any = false;
    for (size_t i = 0; i < text.size(); ++i) {
        char32_t c = text[i];
        if (c != U'.' && c != U'!' && c != U'?' && c != U'\n') continue;
        if (c == U'?') {
            std::u32string q = strip_space(text.substr(start, i - start) + U"?");
            if (any) out.push_back(U' ');
            out += q;
            any = true;
        }
        start = i + 1;
    }
    return out;
}

void check_mode(const std::string &mode) {
    if (mode != "none" && mode != "user" && mode != "questions" && mode != "all")
        fail(MS_ERR_ARGUMENT, "history mode: unknown mode '" + mode + "'; choose one of none, user, questions, all");
}

}  // namespace

std::string validate_query(const std::string &utf8, const InputLimits &limits) {
    std::u32string text = collapse(unicode::decode_utf8(utf8, "query"));
    if (text.empty()) fail(MS_ERR_INPUT, "query: the utterance is empty (or only whitespace); nothing to select tools for");
    if (static_cast<long>(text.size()) > limits.max_query_chars)
        fail(MS_ERR_INPUT, "query: the utterance is " + std::to_string(text.size()) + " characters long; the limit is " +
                               std::to_string(limits.max_query_chars) +
                               " (max_query_chars). Pass the user's request, not a document");
    return unicode::encode_utf8(text);
}

namespace {

const char *const kRoles[] = {"user", "assistant", "system", "tool"};

// One message as _Clip left it: its role and content as read, or why validate_history refuses it.
struct ReadMessage {
    size_t index;
    std::u32string role, content;
    std::string error;  // empty: a valid message
};

// the last max_history_chars code points of the turns' text (older turns dropped, the oldest kept clipped)
std::vector<Turn> keep_recent(std::vector<ReadMessage> &read, const InputLimits &limits) {
    std::reverse(read.begin(), read.end());  // oldest first, as validate_history reads them
    std::vector<Turn> turns;
    turns.reserve(read.size());
    for (const ReadMessage &r : read) {
        if (!r.error.empty()) fail(MS_ERR_INPUT, r.error);
        std::string role = unicode::encode_utf8(r.role);
        if (role == "developer") role = "system";
        if (role == "function") role = "tool";
        turns.push_back({role, unicode::encode_utf8(collapse(r.content))});
    }
    turns = python_tail(turns, limits.max_history_turns);
    std::vector<Turn> kept;
    long budget = limits.max_history_chars;
    for (size_t j = turns.size(); j-- > 0;) {
        if (budget <= 0) break;
        std::u32string content = last_chars(unicode::decode_utf8(turns[j].content, "history content"), budget);
        budget -= static_cast<long>(content.size());
        kept.push_back({turns[j].role, unicode::encode_utf8(content)});
    }
    std::reverse(kept.begin(), kept.end());
    return kept;
}

std::string unknown_role(size_t index, const std::string &role) {
    return "history[" + std::to_string(index) + "].role: unknown role " + role +
           "; roles are user, assistant, system, tool, developer, function";
}

bool known_role(const std::u32string &role) {
    std::string r = unicode::encode_utf8(role);
    return r == "developer" || r == "function" || std::find(std::begin(kRoles), std::end(kRoles), r) != std::end(kRoles);
}

const char *json_type(const nlohmann::json &v) {
    if (v.is_boolean()) return "bool";
    if (v.is_number_integer()) return "int";
    if (v.is_number()) return "float";
    return v.type_name();
}

// One string value as _Clip charges it: its last max(left, at_least) code points kept, their count
// taken from the budget `left`.
std::u32string clip_value(const std::string &utf8, const std::string &where, long &left, long at_least) {
    std::u32string text = last_chars(unicode::decode_utf8(utf8, where), std::max(left, at_least));
    left -= static_cast<long>(text.size());
    return text;
}

// _Clip's walk over a history of `total` messages, for both readers: the last max_history_turns of
// them, newest first, until the budget of 4 x max_history_chars is spent (the newest one always
// read). read_one(j, left) reads message j and charges it to `left` as _Clip does: each value two,
// each key its length, each string its characters (a role at least its last 64). Older messages
// the budget does not reach are never read, so junk in one is never refused. Then keep_recent.
template <class ReadOne>
std::vector<Turn> read_recent(size_t total, const InputLimits &limits, ReadOne read_one) {
    const size_t first = total > static_cast<size_t>(limits.max_history_turns) ? total - limits.max_history_turns : 0;
    long left = 4L * limits.max_history_chars;
    std::vector<ReadMessage> read;
    for (size_t j = total; j-- > first;) {
        if (!read.empty() && left <= 0) break;
        read.push_back(read_one(j, left));
    }
    return keep_recent(read, limits);
}

}  // namespace

std::vector<Turn> bounded_history(const std::vector<Turn> &history, const InputLimits &limits) {
    return read_recent(history.size(), limits, [&](size_t j, long &left) {
        const std::string where = "history[" + std::to_string(j) + "]";
        ReadMessage r{j, U"", U"", ""};
        left -= 2 + 4 + 2;  // the message object, "role", its value
        r.role = clip_value(history[j].role, where + ".role", left, 64);
        left -= 7 + 2;  // "content", its value
        r.content = clip_value(history[j].content, where + ".content", left, 0);
        if (!known_role(r.role)) r.error = unknown_role(j, "'" + unicode::encode_utf8(r.role) + "'");
        return r;
    });
}

std::vector<Turn> bounded_history_json(const nlohmann::json &history, const InputLimits &limits) {
    if (history.is_null()) return {};
    if (!history.is_array()) fail(MS_ERR_INPUT, std::string("history must be a list of messages, got ") + json_type(history));
    return read_recent(history.size(), limits, [&](size_t j, long &left) {
        const std::string where = "history[" + std::to_string(j) + "]";
        const nlohmann::json &m = history[j];
        ReadMessage r{j, U"", U"", ""};
        const nlohmann::json *role = nullptr, *content = nullptr;
        if (m.is_object()) {
            for (auto it = m.begin(); it != m.end(); ++it)
                if (it.key() != "role" && it.key() != "content")
                    fail(MS_ERR_UNSUPPORTED, where + "." + it.key().substr(0, 60) +
                                                 ": this core reads messages of role and content only (other message shapes are the Python runtime's)");
            left -= 2;  // the message object
            if (m.contains("role")) role = &m["role"], left -= 4;
        } else if (m.is_array() && m.size() == 2 && m[0].is_string()) {  // a [role, content] pair
            role = &m[0];
        } else {
            left -= 2 + (m.is_string() ? std::min<long>(static_cast<long>(m.get_ref<const std::string &>().size()), std::max(left, 0L)) : 0);
            r.error = where + ": a message is {'role': ..., 'content': ...}, got " + json_type(m);
            return r;
        }
        if (role) {
            if (m.is_object()) left -= 2;  // its value (a pair's role string is charged alone)
            if (role->is_string()) r.role = clip_value(role->get_ref<const std::string &>(), where + ".role", left, 64);
        }
        if (m.is_object() && m.contains("content")) content = &m["content"], left -= 7;
        if (m.is_array()) content = &m[1];
        if (content) {
            left -= 2;
            if (content->is_string()) {
                r.content = clip_value(content->get_ref<const std::string &>(), where + ".content", left, 0);
            } else if (content->is_array() || content->is_object()) {
                fail(MS_ERR_UNSUPPORTED, where + ".content: this core reads string content only (content parts and MCP results are the Python runtime's)");
            }
        }
        // validate_history's checks, in its order
        std::string role_name = role && role->is_string() ? unicode::encode_utf8(r.role) : std::string();
        if (role_name == "developer") role_name = "system";
        if (!role || !role->is_string() || !known_role(r.role)) {
            r.error = unknown_role(j, role && role->is_string() ? "'" + role_name + "'" : role ? role->dump().substr(0, 40) : "None");
        } else if (!content) {
            r.error = where + ".content must be a string or a list of content parts (missing)";
        } else if (content->is_null() && (role_name == "user" || role_name == "system")) {
            r.error = where + ".content must be a string or a list of content parts, got null";
        } else if (!content->is_null() && !content->is_string()) {
            r.error = where + ".content: content must be a string or a list of content parts, got " + json_type(*content);
        }
        return r;
    });
}

std::vector<Turn> recent_turns(const std::vector<Turn> &history, const std::string &mode, int turns) {
    check_mode(mode);
    std::vector<Turn> keep;
    if (mode == "none") return keep;
    std::vector<Exchange> merged = exchanges(history);
    for (const Exchange &e : merged) {
        if (mode == "all" || e.role == "user") {
            keep.push_back({e.role, unicode::encode_utf8(e.content)});
        } else if (mode == "questions") {
            std::u32string asked = questions(e.content);
            if (!asked.empty()) keep.push_back({"assistant", unicode::encode_utf8(asked)});
        }
    }
    return python_tail(keep, turns);
}

std::string retrieval_text(const std::string &query, const std::vector<Turn> &history, const std::string &mode, int turns) {
    check_mode(mode);
    if (mode == "none" || history.empty()) return query;
    std::vector<Turn> recent = recent_turns(history, mode, turns);
    std::string out = query;
    for (size_t j = recent.size(); j-- > 0;) {
        if (recent[j].content.empty()) continue;
        out += " | ";
        out += recent[j].content;
    }
    return out;
}

std::vector<std::string> selection_texts(const std::string &query, const std::vector<Turn> &history,
                                         const std::vector<std::string> &subtasks, bool decompose,
                                         const std::string &mode, int turns, int max_subtasks, int *folded_index) {
    std::vector<std::string> texts{query};
    size_t n = std::min(subtasks.size(), static_cast<size_t>(std::max(max_subtasks, 0)));
    for (size_t i = 0; i < n; ++i)
        if (std::find(texts.begin(), texts.end(), subtasks[i]) == texts.end()) texts.push_back(subtasks[i]);
    if (folded_index) *folded_index = -1;
    if (decompose && mode != "none" && !history.empty()) {
        std::string folded = retrieval_text(query, history, mode, turns);
        if (std::find(texts.begin(), texts.end(), folded) == texts.end()) {
            texts.push_back(folded);
            if (folded_index) *folded_index = static_cast<int>(texts.size()) - 1;
        }
    }
    return texts;
}

}  // namespace ms
