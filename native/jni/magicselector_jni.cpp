// magicselector_jni.cpp: the JNI layer of the Kotlin class com.magicselector.MagicSelector over the C API (open, select, close; a failed call throws MagicSelectorException with the C API's status and message).
//
// Built into libmagicselector_jni.so with the static core: by the NDK for an app (android_demo/app's
// CMakeLists.txt, arm64-v8a) and by tests/test_jni_binding.py for the desktop JVM against the host
// build. Only the C API is used, so the binding sees what every other caller sees.
#include <jni.h>

#include <cstdint>
#include <string>

#include "magicselector.h"

namespace {

const char *kExceptionClass = "com/magicselector/MagicSelectorException";

jstring java_string(JNIEnv *env, const char *utf8);

// Throws MagicSelectorException(status, message); falls back to RuntimeException if the class is absent.
void throw_error(JNIEnv *env, int status, const std::string &message) {
    if (env->ExceptionCheck()) return;  // a pending Java exception (say OutOfMemoryError) wins
    jclass cls = env->FindClass(kExceptionClass);
    if (cls == nullptr) {
        env->ExceptionClear();
        jclass fallback = env->FindClass("java/lang/RuntimeException");
        if (fallback != nullptr) env->ThrowNew(fallback, message.c_str());
        return;
    }
    jmethodID init = env->GetMethodID(cls, "<init>", "(ILjava/lang/String;)V");
    jstring text = java_string(env, message.c_str());  // messages may quote the input
    if (init == nullptr || text == nullptr) return;  // NoSuchMethodError / OutOfMemoryError is pending
    jobject error = env->NewObject(cls, init, jint(status), text);
    if (error != nullptr) env->Throw(static_cast<jthrowable>(error));
}

void throw_last(JNIEnv *env, ms_status status, const char *what) {
    throw_error(env, int(status), std::string(what) + ": " + ms_last_error());
}

// Java strings are UTF-16; JNI's *StringUTF* calls speak "modified UTF-8" (NUL and characters past
// U+FFFF encoded differently), which is not the UTF-8 the core reads and writes. So the text crosses
// as UTF-16 and is converted here; a lone surrogate becomes bytes that are not UTF-8, which the core
// refuses as MS_ERR_ARGUMENT / MS_ERR_INPUT naming the field, as it refuses any invalid UTF-8.
std::string utf8_of(JNIEnv *env, jstring str, bool *ok) {
    *ok = false;
    const jsize n = env->GetStringLength(str);
    const jchar *u = env->GetStringChars(str, nullptr);
    if (u == nullptr) return {};  // OutOfMemoryError is pending
    std::string out;
    out.reserve(std::size_t(n) + 16);
    for (jsize i = 0; i < n; ++i) {
        uint32_t c = u[i];
        if (c >= 0xD800 && c <= 0xDBFF && i + 1 < n && u[i + 1] >= 0xDC00 && u[i + 1] <= 0xDFFF) {
            c = 0x10000 + ((c - 0xD800) << 10) + (uint32_t(u[++i]) - 0xDC00);
        }
        if (c < 0x80) {
            out += char(c);
        } else if (c < 0x800) {
            out += char(0xC0 | (c >> 6));
            out += char(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {  // a lone surrogate lands here as ED A0..BF xx: not UTF-8
            out += char(0xE0 | (c >> 12));
            out += char(0x80 | ((c >> 6) & 0x3F));
            out += char(0x80 | (c & 0x3F));
        } else {
            out += char(0xF0 | (c >> 18));
            out += char(0x80 | ((c >> 12) & 0x3F));
            out += char(0x80 | ((c >> 6) & 0x3F));
            out += char(0x80 | (c & 0x3F));
        }
    }
    env->ReleaseStringChars(str, u);
    *ok = true;
    return out;
}

// UTF-8 (what the core writes: valid, as its JSON replaces bad bytes) as a Java string; a malformed
// sequence becomes U+FFFD rather than a read past the end.
jstring java_string(JNIEnv *env, const char *utf8) {
    std::u16string out;
    const auto *p = reinterpret_cast<const unsigned char *>(utf8);
    while (*p) {
        uint32_t c = *p;
        int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
        if (extra < 0) {
            out += char16_t(0xFFFD);
            ++p;
            continue;
        }
        c = extra == 0 ? c : c & (0x3F >> extra);
        int k = 1;
        for (; k <= extra && (p[k] & 0xC0) == 0x80; ++k) c = (c << 6) | (p[k] & 0x3F);
        if (k <= extra) {
            out += char16_t(0xFFFD);
            p += k;
            continue;
        }
        p += k;
        if (c >= 0x10000) {
            c -= 0x10000;
            out += char16_t(0xD800 + (c >> 10));
            out += char16_t(0xDC00 + (c & 0x3FF));
        } else {
            out += char16_t(c);
        }
    }
    return env->NewString(reinterpret_cast<const jchar *>(out.data()), jsize(out.size()));
}

ms_selector *handle_of(jlong handle) { return reinterpret_cast<ms_selector *>(static_cast<intptr_t>(handle)); }

}  // namespace

extern "C" {

JNIEXPORT jlong JNICALL Java_com_magicselector_MagicSelector_nativeOpen(JNIEnv *env, jclass, jstring bundle_dir,
                                                                        jstring options_json) {
    if (bundle_dir == nullptr) {
        throw_error(env, MS_ERR_ARGUMENT, "bundleDir: must not be null");
        return 0;
    }
    bool ok_dir = false, ok_options = true;
    const std::string dir = utf8_of(env, bundle_dir, &ok_dir);
    const std::string options = options_json != nullptr ? utf8_of(env, options_json, &ok_options) : std::string();
    if (!ok_dir || !ok_options) return 0;  // OutOfMemoryError is pending
    ms_selector *sel = nullptr;
    const ms_status st = ms_open(dir.c_str(), options_json != nullptr ? options.c_str() : nullptr, &sel);
    if (st != MS_OK) {
        throw_last(env, st, "open");
        return 0;
    }
    return static_cast<jlong>(reinterpret_cast<intptr_t>(sel));
}

// The Selection as JSON, the text the C API returns.
JNIEXPORT jstring JNICALL Java_com_magicselector_MagicSelector_nativeSelect(JNIEnv *env, jclass, jlong handle,
                                                                           jstring request_json) {
    if (handle == 0) {
        throw_error(env, MS_ERR_ARGUMENT, "select: the selector is closed");
        return nullptr;
    }
    if (request_json == nullptr) {
        throw_error(env, MS_ERR_ARGUMENT, "request: must not be null");
        return nullptr;
    }
    bool ok = false;
    const std::string request = utf8_of(env, request_json, &ok);
    if (!ok) return nullptr;
    char *out = nullptr;
    const ms_status st = ms_select(handle_of(handle), request.c_str(), &out);
    if (st != MS_OK) {
        ms_free(out);
        throw_last(env, st, "select");
        return nullptr;
    }
    jstring result = java_string(env, out);
    ms_free(out);
    return result;
}

JNIEXPORT void JNICALL Java_com_magicselector_MagicSelector_nativeClose(JNIEnv *, jclass, jlong handle) {
    ms_close(handle_of(handle));
}

}  // extern "C"
