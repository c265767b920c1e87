// digest.cpp: SHA-256 and BLAKE2b-64, written from their specifications (no dependency for two small hashes).
#include "digest.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MS_SHA256_X86 1
#include <cpuid.h>
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define MS_SHA256_ARM 1
#include <arm_neon.h>
#include <sys/auxv.h>
#endif

namespace ms {
namespace {

constexpr uint32_t kSha256K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
inline uint64_t rotr64(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

void sha256_block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
        w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
    }
    for (int i = 16; i < 64; ++i) {
        const uint32_t s0 = rotr32(w[i - 15], 7) ^ rotr32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = rotr32(w[i - 2], 17) ^ rotr32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; ++i) {
        const uint32_t t1 = k + (rotr32(e, 6) ^ rotr32(e, 11) ^ rotr32(e, 25)) + ((e & f) ^ (~e & g)) + kSha256K[i] + w[i];
        const uint32_t t2 = (rotr32(a, 2) ^ rotr32(a, 13) ^ rotr32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

void sha256_blocks_portable(uint32_t h[8], const unsigned char *p, std::size_t blocks) {
    for (; blocks; --blocks, p += 64) sha256_block(h, p);
}

#ifdef MS_SHA256_X86
// The x86 SHA extensions (SHA-NI: sha256rnds2 / sha256msg1 / sha256msg2), about ten times the
// portable rounds; the state is kept as ABEF / CDGH, the layout the instructions take.
__attribute__((target("sha,sse4.1,ssse3"))) void sha256_blocks_shani(uint32_t h[8], const unsigned char *p, std::size_t blocks) {
    const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(&h[0])), 0xB1);  // CDAB
    __m128i state1 = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(&h[4])), 0x1B);  // EFGH
    __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);                                                      // ABEF
    state1 = _mm_blend_epi16(state1, tmp, 0xF0);                                                           // CDGH
    for (; blocks; --blocks, p += 64) {
        const __m128i abef = state0, cdgh = state1;
        __m128i w[4];  // the schedule's last four groups of four words; group i lives in w[i % 4]
        for (int j = 0; j < 4; ++j) w[j] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 16 * j)), byte_swap);
        for (int i = 0; i < 16; ++i) {
            if (i >= 4) {  // W[i] = msg2(msg1(W[i-4], W[i-3]) + W[i-3..i-1 shifted], W[i-1])
                __m128i next = _mm_sha256msg1_epu32(w[i & 3], w[(i + 1) & 3]);
                next = _mm_add_epi32(next, _mm_alignr_epi8(w[(i + 3) & 3], w[(i + 2) & 3], 4));
                w[i & 3] = _mm_sha256msg2_epu32(next, w[(i + 3) & 3]);
            }
            __m128i msg = _mm_add_epi32(w[i & 3], _mm_loadu_si128(reinterpret_cast<const __m128i *>(&kSha256K[4 * i])));
            state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
            msg = _mm_shuffle_epi32(msg, 0x0E);
            state0 = _mm_sha256rnds2_epu32(state0, state1, msg);
        }
        state0 = _mm_add_epi32(state0, abef);
        state1 = _mm_add_epi32(state1, cdgh);
    }
    tmp = _mm_shuffle_epi32(state0, 0x1B);        // FEBA
    state1 = _mm_shuffle_epi32(state1, 0xB1);     // DCHG
    state0 = _mm_blend_epi16(tmp, state1, 0xF0);  // DCBA
    state1 = _mm_alignr_epi8(state1, tmp, 8);     // ABEF
    _mm_storeu_si128(reinterpret_cast<__m128i *>(&h[0]), state0);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(&h[4]), state1);
}

bool cpu_has_sha_ni() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (b & (1u << 29)) != 0;  // CPUID.(EAX=7,ECX=0):EBX.SHA[bit 29]
}
#endif

#ifdef MS_SHA256_ARM
// The ARMv8 SHA-256 instructions (sha256h / sha256h2 / sha256su0 / sha256su1), state as ABCD / EFGH.
__attribute__((target("+sha2"))) void sha256_blocks_armv8(uint32_t h[8], const unsigned char *p, std::size_t blocks) {
    uint32x4_t abcd = vld1q_u32(&h[0]), efgh = vld1q_u32(&h[4]);
    for (; blocks; --blocks, p += 64) {
        const uint32x4_t abcd_saved = abcd, efgh_saved = efgh;
        uint32x4_t w[4];  // group i of the schedule lives in w[i % 4]
        for (int j = 0; j < 4; ++j) w[j] = vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(p + 16 * j)));
        for (int i = 0; i < 16; ++i) {
            const uint32x4_t wk = vaddq_u32(w[i & 3], vld1q_u32(&kSha256K[4 * i]));
            if (i < 12) w[i & 3] = vsha256su1q_u32(vsha256su0q_u32(w[i & 3], w[(i + 1) & 3]), w[(i + 2) & 3], w[(i + 3) & 3]);
            const uint32x4_t before = abcd;
            abcd = vsha256hq_u32(abcd, efgh, wk);
            efgh = vsha256h2q_u32(efgh, before, wk);
        }
        abcd = vaddq_u32(abcd, abcd_saved);
        efgh = vaddq_u32(efgh, efgh_saved);
    }
    vst1q_u32(&h[0], abcd);
    vst1q_u32(&h[4], efgh);
}

bool cpu_has_sha2() {
    return (getauxval(AT_HWCAP) & (1ul << 6)) != 0;  // HWCAP_SHA2 (Linux and Android, arm64)
}
#endif

using Sha256Blocks = void (*)(uint32_t *, const unsigned char *, std::size_t);

Sha256Blocks sha256_blocks(bool cpu_instructions) {
#ifdef MS_SHA256_X86
    static const bool has_sha_ni = cpu_has_sha_ni();  // asked once; a constant of the machine
    if (cpu_instructions && has_sha_ni) return sha256_blocks_shani;
#elif defined(MS_SHA256_ARM)
    static const bool has_sha2 = cpu_has_sha2();  // asked once; a constant of the machine
    if (cpu_instructions && has_sha2) return sha256_blocks_armv8;
#else
    (void)cpu_instructions;
#endif
    return sha256_blocks_portable;
}

constexpr uint64_t kBlake2bIv[8] = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
                                    0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
                                    0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};
constexpr uint8_t kSigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

void blake2b_compress(uint64_t h[8], const unsigned char *block, uint64_t counter, bool last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; ++i) {
        uint64_t x = 0;
        for (int j = 7; j >= 0; --j) x = (x << 8) | block[8 * i + j];
        m[i] = x;
    }
    for (int i = 0; i < 8; ++i) {
        v[i] = h[i];
        v[i + 8] = kBlake2bIv[i];
    }
    v[12] ^= counter;  // messages here are far under 2^64 bytes: the counter's high word stays 0
    if (last) v[14] = ~v[14];
    auto g = [&v](int a, int b, int c, int d, uint64_t x, uint64_t y) {
        v[a] = v[a] + v[b] + x; v[d] = rotr64(v[d] ^ v[a], 32);
        v[c] = v[c] + v[d];     v[b] = rotr64(v[b] ^ v[c], 24);
        v[a] = v[a] + v[b] + y; v[d] = rotr64(v[d] ^ v[a], 16);
        v[c] = v[c] + v[d];     v[b] = rotr64(v[b] ^ v[c], 63);
    };
    for (int r = 0; r < 12; ++r) {
        const uint8_t *s = kSigma[r];
        g(0, 4, 8, 12, m[s[0]], m[s[1]]);
        g(1, 5, 9, 13, m[s[2]], m[s[3]]);
        g(2, 6, 10, 14, m[s[4]], m[s[5]]);
        g(3, 7, 11, 15, m[s[6]], m[s[7]]);
        g(0, 5, 10, 15, m[s[8]], m[s[9]]);
        g(1, 6, 11, 12, m[s[10]], m[s[11]]);
        g(2, 7, 8, 13, m[s[12]], m[s[13]]);
        g(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; ++i) h[i] ^= v[i] ^ v[i + 8];
}

}  // namespace

bool sha256_cpu_instructions() {
#ifdef MS_SHA256_X86
    return sha256_blocks(true) == sha256_blocks_shani;
#elif defined(MS_SHA256_ARM)
    return sha256_blocks(true) == sha256_blocks_armv8;
#else
    return false;
#endif
}

void Sha256::update(const void *data, std::size_t size) {
    const auto *p = static_cast<const unsigned char *>(data);
    if (size == 0) return;  // (data may then be null, which memcpy must not see)
    const Sha256Blocks blocks = sha256_blocks(cpu_instructions_);
    total_ += size;
    if (filled_) {  // complete the held block first
        const std::size_t take = std::min<std::size_t>(64 - filled_, size);
        std::memcpy(block_ + filled_, p, take);
        filled_ += take;
        p += take;
        size -= take;
        if (filled_ < 64) return;
        blocks(h_, block_, 1);
        filled_ = 0;
    }
    if (size >= 64) {  // whole blocks straight from the caller's buffer
        blocks(h_, p, size / 64);
        p += size / 64 * 64;
        size %= 64;
    }
    std::memcpy(block_, p, size);
    filled_ = size;
}

std::string Sha256::hex() {
    const uint64_t bits = total_ * 8;
    const unsigned char pad = 0x80;
    update(&pad, 1);
    const unsigned char zero = 0;
    while (filled_ != 56) update(&zero, 1);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    update(length, 8);
    static const char hex[] = "0123456789abcdef";
    std::string out(64, '0');
    for (int i = 0; i < 8; ++i) {
        for (int j = 0; j < 8; ++j) out[std::size_t(8 * i + j)] = hex[(h_[i] >> (28 - 4 * j)) & 0xf];
    }
    return out;
}

std::string sha256_hex(const void *data, std::size_t size) {
    Sha256 h;
    h.update(data, size);
    return h.hex();
}

uint64_t blake2b_64(const void *data, std::size_t size) {
    uint64_t h[8];
    for (int i = 0; i < 8; ++i) h[i] = kBlake2bIv[i];
    h[0] ^= 0x01010000ULL ^ 8;  // depth 1, fanout 1, no key, an 8-byte digest
    const auto *p = static_cast<const unsigned char *>(data);
    unsigned char block[128];
    std::size_t done = 0;
    while (size - done > 128) {  // every block but the last (which may be full) is compressed here
        blake2b_compress(h, p + done, done + 128, false);
        done += 128;
    }
    std::memset(block, 0, sizeof block);
    if (size - done) std::memcpy(block, p + done, size - done);
    blake2b_compress(h, block, size, true);
    return h[0];  // the first 8 bytes of the digest, little-endian, are h[0]
}

}  // namespace ms
