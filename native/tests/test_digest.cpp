// test_digest.cpp: SHA-256 on the CPU's instructions (x86 SHA-NI, ARMv8 SHA2, where present) gives the portable rounds' digests and the FIPS 180-4 examples, whatever the input's length and how it is fed in pieces.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "digest.h"

using ms_test::check;
using ms_test::failures;

namespace {

std::string digest(const std::string &data, bool cpu, const std::vector<std::size_t> &pieces = {}) {
    ms::Sha256 h(cpu);
    std::size_t at = 0;
    for (std::size_t piece : pieces) {
        if (at + piece > data.size()) break;
        h.update(data.data() + at, piece);
        at += piece;
    }
    h.update(data.data() + at, data.size() - at);
    return h.hex();
}

}  // namespace

int main() {
    const struct { std::string input, hex; } known[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {std::string(1000000, 'a'), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    };
    for (bool cpu : {false, true}) {
        for (const auto &k : known) {
            check(digest(k.input, cpu) == k.hex, std::string(cpu ? "cpu" : "portable") + " digest of a " +
                                                     std::to_string(k.input.size()) + "-byte FIPS example");
        }
    }
    std::mt19937 rng(42);
    std::string data(5000, '\0');
    for (char &c : data) c = char(rng() & 0xff);
    for (std::size_t n = 0; n <= data.size(); n += (n < 300 ? 1 : 97)) {
        const std::string part = data.substr(0, n);
        const std::vector<std::size_t> pieces = {rng() % 130, rng() % 70, 64, rng() % 200};
        const std::string want = digest(part, false);
        check(digest(part, true) == want, "cpu digest of " + std::to_string(n) + " bytes");
        check(digest(part, true, pieces) == want && digest(part, false, pieces) == want,
              "digest of " + std::to_string(n) + " bytes fed in pieces");
    }
    check(ms::sha256_hex(data.data(), data.size()) == digest(data, false), "sha256_hex");
    std::printf("sha256 on %s: %s\n", ms::sha256_cpu_instructions() ? "the CPU's SHA instructions" : "the portable rounds",
                failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
