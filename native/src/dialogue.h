// dialogue.h: the turn's input limits, the bounded history and the history fold (runtime/dialogue/: messages, bounds, fold).
#pragma once

#include <string>
#include <vector>

#include "json.h"

namespace ms {

// One message of the benchmark format {role, content}; the Python runtime's other shapes (OpenAI
// tool_calls, Anthropic blocks, MCP results, Responses items) stay Python-only.
struct Turn {
    std::string role;
    std::string content;
};

struct InputLimits {
    int max_query_chars = 16000, max_history_turns = 32, max_history_chars = 16000, max_subtasks = 8;
};

// validate_query: whitespace runs collapsed to one space (Python's str.split()); an empty one, one
// longer than max_query_chars code points or invalid UTF-8 is MS_ERR_INPUT naming "query".
std::string validate_query(const std::string &utf8, const InputLimits &);

// bounded_history: the last max_history_turns messages, read newest first within 4 x max_history_chars
// (keys, roles and contents counted as the Python _Clip counts them), roles checked ("developer" is
// "system", "function" is "tool"), contents' whitespace collapsed, then the most recent
// max_history_chars code points (older turns dropped, the oldest kept one clipped at its start).
// A bad message is MS_ERR_INPUT naming history[i] by its index in `history`.
std::vector<Turn> bounded_history(const std::vector<Turn> &, const InputLimits &);

// bounded_history over the request's raw "history" JSON (null or a list), read as the Python runtime
// reads the benchmark format: messages {role, content} or [role, content] pairs, content a string or
// null (an assistant's or tool's); only the messages the budget reaches are read and checked, so junk
// in an older one is never refused. A bad message is MS_ERR_INPUT naming history[i] and its field;
// another message shape (tool_calls, content parts, MCP results: Python-only) is MS_ERR_UNSUPPORTED.
std::vector<Turn> bounded_history_json(const nlohmann::json &history, const InputLimits &);

// retrieval_text: the utterance, then the earlier turns a history mode keeps ("none", "user",
// "questions", "all"), most recent first, joined by " | ". An unknown mode is MS_ERR_ARGUMENT.
std::string retrieval_text(const std::string &query, const std::vector<Turn> &history, const std::string &mode, int turns);

// The turns a history mode keeps, oldest first (recent_turns).
std::vector<Turn> recent_turns(const std::vector<Turn> &history, const std::string &mode, int turns);

// The texts one selection retrieves with, in order (Selector._retrieval_texts): the utterance, its
// sub-tasks (the first max_subtasks), and with a decomposer and a history mode the history-folded
// utterance; duplicates once. `folded_index` gets the folded text's index, or -1.
std::vector<std::string> selection_texts(const std::string &query, const std::vector<Turn> &history,
                                         const std::vector<std::string> &subtasks, bool decompose,
                                         const std::string &mode, int turns, int max_subtasks, int *folded_index = nullptr);

}  // namespace ms
