// json.h: JSON for the native core: nlohmann/json as llama.cpp vendors it, and a parse that refuses
// instead of throwing its own exceptions or recursing without bound.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "error.h"

namespace ms {

using json = nlohmann::json;

// nlohmann's parser recurses once per nesting level: a request of a million '[' would overflow the
// stack. Nothing the core reads nests deeper than a few levels, so deeper text is refused up front.
constexpr int kMaxJsonDepth = 64;

// Parses `text`; malformed or too deeply nested text is ms::Error(status, "<what>: ..."). A
// `callback` (nlohmann's parser_callback_t) sees every element as it is read and may leave it out of
// the result by returning false: a large table goes straight into the caller's own structure.
inline json parse_json(const std::string &text, ms_status status, const std::string &what,
                       int max_depth = kMaxJsonDepth, const json::parser_callback_t &callback = nullptr) {
    int depth = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') {
                ++i;  // an escaped character, '"' included, never ends the string
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) {
                fail(status, what + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
            }
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    json parsed = json::parse(text, callback, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
        fail(status, what + ": not valid JSON");
    }
    return parsed;
}

}  // namespace ms
