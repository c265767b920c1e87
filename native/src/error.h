// error.h: the one error type of the native core: a status code and a message naming the field.
#pragma once

#include <stdexcept>
#include <string>

#include "magicselector.h"

namespace ms {

class Error : public std::runtime_error {
public:
    Error(ms_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
    ms_status status() const noexcept { return status_; }

private:
    ms_status status_;
};

[[noreturn]] inline void fail(ms_status status, const std::string &message) { throw Error(status, message); }

}  // namespace ms
