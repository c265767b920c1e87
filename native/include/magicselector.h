/* magicselector.h: the C API of the native selection core (open a bundle, select, last error, close). */
#ifndef MAGICSELECTOR_H
#define MAGICSELECTOR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every call returns one of these; on anything but MS_OK, ms_last_error() says what and which field. */
typedef enum ms_status {
    MS_OK = 0,
    MS_ERR_ARGUMENT = 1,    /* a NULL pointer or a malformed request (JSON, a field of the wrong type) */
    MS_ERR_INPUT = 2,       /* a query, history or budget that cannot be used (too long, not UTF-8, < 1) */
    MS_ERR_BUNDLE = 3,      /* a bundle that is missing, truncated, tampered or foreign */
    MS_ERR_UNSUPPORTED = 4, /* a configuration this core cannot honour (reranker, LLM decomposer) */
    MS_ERR_UNKNOWN_TOOL = 5,/* a tool id the catalog does not hold */
    MS_ERR_INTERNAL = 6     /* out of memory or a bug: never a crash */
} ms_status;

typedef struct ms_selector ms_selector;

/* Opens the bundle folder `bundle_dir`. `options_json` may be NULL or a JSON object of
   SelectorConfig settings this core honours (e.g. {"threads": 1}); a setting it cannot honour is
   MS_ERR_UNSUPPORTED naming it. On success *out holds a selector to pass to ms_close.
   Every file the core reads is checked against the manifest's sha256 unless {"verify": false}; the
   embedder's GGUF is hashed on one short-lived helper thread while the other files load ("threads"
   counts the embedder's inference threads only), and opened only once its hash matched. */
ms_status ms_open(const char *bundle_dir, const char *options_json, ms_selector **out);

/* One turn. `request_json`: {"query": str, "history": [{"role": str, "content": str}, ...],
   "max_tools": int|null, "max_schema_tokens": int|null, "format": "mcp"|"openai"|"openai-responses"|"anthropic"}.
   A null or missing bound is the selector's: {"max_tools": 5} ships (ms_open's {"max_tools": null} lifts it).
   On success *out_json is the Selection as JSON (ids in order, k, scores, why, subtasks,
   retrieved_texts, timings_ms), to be released with ms_free. */
ms_status ms_select(ms_selector *selector, const char *request_json, char **out_json);

/* The message of the last failed call on this thread (never NULL; "" after a success). */
const char *ms_last_error(void);

/* Releases a string returned by this API. NULL is allowed. */
void ms_free(char *str);

/* Closes a selector. NULL is allowed. */
void ms_close(ms_selector *selector);

#ifdef __cplusplus
}
#endif

#endif /* MAGICSELECTOR_H */
