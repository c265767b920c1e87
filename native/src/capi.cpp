// capi.cpp: the C API (include/magicselector.h) over the Selector: every exception becomes a status and a thread-local message, never a crash.
#include <cstdlib>
#include <cstring>
#include <new>

#include "error.h"
#include "magicselector.h"
#include "selector.h"

struct ms_selector {
    std::unique_ptr<ms::Selector> selector;
};

namespace {

thread_local std::string last_error;

template <typename Body>
ms_status guarded(Body body) {
    try {
        body();
        last_error.clear();
        return MS_OK;
    } catch (const ms::Error &e) {
        last_error = e.what();
        return e.status();
    } catch (const std::bad_alloc &) {
        last_error = "out of memory";
        return MS_ERR_INTERNAL;
    } catch (const std::exception &e) {
        last_error = std::string("internal error: ") + e.what();
        return MS_ERR_INTERNAL;
    } catch (...) {
        last_error = "internal error";
        return MS_ERR_INTERNAL;
    }
}

char *copy_out(const std::string &text) {
    char *out = static_cast<char *>(std::malloc(text.size() + 1));
    if (!out) throw std::bad_alloc();
    std::memcpy(out, text.c_str(), text.size() + 1);
    return out;
}

}  // namespace

extern "C" {

ms_status ms_open(const char *bundle_dir, const char *options_json, ms_selector **out) {
    return guarded([&] {
        if (!out) ms::fail(MS_ERR_ARGUMENT, "out must not be NULL");
        *out = nullptr;
        if (!bundle_dir) ms::fail(MS_ERR_ARGUMENT, "bundle_dir must not be NULL");
        const ms::Options options = ms::Options::from_json(options_json ? options_json : "");
        std::unique_ptr<ms_selector> handle(new ms_selector);
        handle->selector = ms::Selector::open(bundle_dir, options);
        *out = handle.release();
    });
}

ms_status ms_select(ms_selector *selector, const char *request_json, char **out_json) {
    return guarded([&] {
        if (!out_json) ms::fail(MS_ERR_ARGUMENT, "out_json must not be NULL");
        *out_json = nullptr;
        if (!selector || !selector->selector) ms::fail(MS_ERR_ARGUMENT, "selector must not be NULL");
        if (!request_json) ms::fail(MS_ERR_ARGUMENT, "request_json must not be NULL");
        ms::Selector &s = *selector->selector;
        const ms::Request request = ms::Request::from_json(request_json, s.options().budget);
        // invalid UTF-8 from the caller is an error, not a JSON exception: dump replaces nothing
        *out_json = copy_out(s.select(request).dump(-1, ' ', false, ms::json::error_handler_t::replace));
    });
}

const char *ms_last_error(void) { return last_error.c_str(); }

void ms_free(char *str) { std::free(str); }

void ms_close(ms_selector *selector) { delete selector; }

}  // extern "C"
