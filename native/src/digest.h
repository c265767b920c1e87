// digest.h: the two hashes the core reads bundles with: SHA-256 (the manifest's file checks) and BLAKE2b-64 (the index's tool keys).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ms {

// SHA-256 (FIPS 180-4) fed in pieces; `hex()` is the lowercase digest, as hashlib's hexdigest().
class Sha256 {
public:
    // `cpu_instructions`: the CPU's SHA-256 instructions where it has them (x86 SHA-NI, ARMv8 SHA2), else the
    // portable rounds; false always takes the portable rounds (the test compares the two).
    explicit Sha256(bool cpu_instructions = true) : cpu_instructions_(cpu_instructions) {}
    void update(const void *data, std::size_t size);
    std::string hex();

private:
    uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    unsigned char block_[64] = {0};
    std::size_t filled_ = 0;
    uint64_t total_ = 0;
    bool cpu_instructions_ = true;
};

// Whether Sha256 runs on this CPU's SHA-256 instructions (x86 SHA-NI, ARMv8 SHA2); the portable rounds otherwise.
bool sha256_cpu_instructions();

// The lowercase hex SHA-256 of `size` bytes.
std::string sha256_hex(const void *data, std::size_t size);

// BLAKE2b with an 8-byte digest and no key (RFC 7693), as hashlib.blake2b(digest_size=8), read little-endian.
uint64_t blake2b_64(const void *data, std::size_t size);

}  // namespace ms
