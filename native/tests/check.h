// check.h: the native tests' one assertion, which counts failures and names each on stderr so a test runs to its end.
#pragma once

#include <cstdio>
#include <string>

namespace ms_test {

inline int failures = 0;

inline void check(bool ok, const std::string &what) {
    if (!ok) {
        ++failures;
        std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    }
}

}  // namespace ms_test
