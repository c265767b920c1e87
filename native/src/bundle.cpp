// bundle.cpp: the manifest and the confined, size- and sha256-checked reads of a bundle's files.
#include "bundle.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "digest.h"

namespace ms {
namespace {

constexpr std::size_t kMaxManifestBytes = 16u << 20;
constexpr std::size_t kMaxFileBytes = std::size_t(4) << 30;  // a bundle's largest file is a model: far below

std::string real_path(const std::string &path) {
    char buf[PATH_MAX];
    if (!realpath(path.c_str(), buf)) return "";
    return buf;
}

// A manifest path that cannot leave the folder by its spelling: relative, no empty, "." or ".."
// component, no backslash or NUL (links are checked on the resolved path).
bool plain_relative(const std::string &rel) {
    if (rel.empty() || rel.size() > 4096 || rel[0] == '/' || rel.find('\\') != std::string::npos ||
        rel.find('\0') != std::string::npos) {
        return false;
    }
    std::size_t start = 0;
    while (start <= rel.size()) {
        std::size_t end = rel.find('/', start);
        if (end == std::string::npos) end = rel.size();
        const std::string part = rel.substr(start, end - start);
        if (part.empty() || part == "." || part == "..") return false;
        start = end + 1;
    }
    return true;
}

}  // namespace

std::string read_regular_file(const std::string &path, std::size_t max_bytes) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail(MS_ERR_BUNDLE, path + ": cannot be opened (" + std::strerror(errno) + ")");
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(MS_ERR_BUNDLE, path + ": not a regular file");
    }
    if (st.st_size < 0 || std::size_t(st.st_size) > max_bytes) {
        ::close(fd);
        fail(MS_ERR_BUNDLE, path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    std::string data(std::size_t(st.st_size), '\0');
    std::size_t got = 0;
    while (got < data.size()) {
        const ssize_t n = ::read(fd, &data[got], data.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            ::close(fd);
            fail(MS_ERR_BUNDLE, path + ": could not be read whole");
        }
        got += std::size_t(n);
    }
    ::close(fd);
    return data;
}

Bundle Bundle::open(const std::string &dir) {
    Bundle b;
    b.dir_ = dir;
    b.real_dir_ = real_path(dir);
    if (b.real_dir_.empty()) fail(MS_ERR_BUNDLE, dir + ": no such bundle folder");
    const std::string path = dir + "/manifest.json";
    b.manifest_ = parse_json(read_regular_file(path, kMaxManifestBytes), MS_ERR_BUNDLE, path);
    const json &m = b.manifest_;
    if (!m.is_object() || m.value("format", json()) != "magicselector-bundle") {
        fail(MS_ERR_BUNDLE, path + ": not a magicselector bundle manifest (field 'format')");
    }
    if (m.value("format_version", json()) != 1) {
        fail(MS_ERR_BUNDLE, path + ": field 'format_version' is not 1 (a bundle of another version)");
    }
    if (!m.contains("files") || !m["files"].is_object()) fail(MS_ERR_BUNDLE, path + ": field 'files' must be an object");
    return b;
}

namespace {

struct Listed {
    std::string path, where;
    uint64_t size = 0;
    std::string sha256;  // "" where the manifest lists none
};

}  // namespace

static Listed listed(const json &files, const std::string &dir, const std::string &real_dir, const std::string &rel) {
    Listed out;
    out.where = dir + "/manifest.json: files['" + rel.substr(0, 120) + "']";
    auto it = files.find(rel);
    if (it == files.end() || !it->is_object()) fail(MS_ERR_BUNDLE, dir + ": '" + rel.substr(0, 120) + "' is not listed in the manifest");
    if (!plain_relative(rel)) fail(MS_ERR_BUNDLE, out.where + ": the path leaves the bundle folder");
    const std::string path = dir + "/" + rel;
    out.path = real_path(path);
    if (out.path.empty()) fail(MS_ERR_BUNDLE, path + ": missing from the bundle (listed in manifest.json)");
    if (out.path.compare(0, real_dir.size() + 1, real_dir + "/") != 0) fail(MS_ERR_BUNDLE, path + ": a link out of the bundle folder");
    const json size = it->value("size", json());
    if (!size.is_number_unsigned()) fail(MS_ERR_BUNDLE, out.where + ".size must be a non-negative integer");
    out.size = size.get<uint64_t>();
    if (out.size > kMaxFileBytes) fail(MS_ERR_BUNDLE, out.where + ".size is past what a bundle file can be");
    const json sha = it->value("sha256", json());
    if (sha.is_string()) out.sha256 = sha.get<std::string>();
    return out;
}

std::string Bundle::read(const std::string &rel, bool verify) const {
    const Listed f = listed(manifest_["files"], dir_, real_dir_, rel);
    const std::string data = read_regular_file(f.path, std::size_t(f.size));
    if (data.size() != f.size) {
        fail(MS_ERR_BUNDLE, dir_ + "/" + rel + ": " + std::to_string(data.size()) + " bytes, the manifest lists " +
                                std::to_string(f.size) + " (truncated or replaced)");
    }
    if (verify) {
        if (f.sha256.empty()) fail(MS_ERR_BUNDLE, f.where + " has no sha256");
        if (sha256_hex(data.data(), data.size()) != f.sha256) {
            fail(MS_ERR_BUNDLE, dir_ + "/" + rel + ": its sha256 is not the manifest's (damaged or tampered); rebuild the bundle");
        }
    }
    return data;
}

std::string Bundle::checked_path(const std::string &rel, bool verify) const {
    const Listed f = listed(manifest_["files"], dir_, real_dir_, rel);
    const int fd = ::open(f.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail(MS_ERR_BUNDLE, f.path + ": cannot be opened (" + std::strerror(errno) + ")");
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) != f.size) {
        ::close(fd);
        fail(MS_ERR_BUNDLE, dir_ + "/" + rel + ": not a regular file of the " + std::to_string(f.size) + " bytes the manifest lists");
    }
    if (verify) {
        if (f.sha256.empty()) {
            ::close(fd);
            fail(MS_ERR_BUNDLE, f.where + " has no sha256");
        }
        Sha256 h;
        std::string buf(1 << 20, '\0');
        uint64_t got = 0;
        for (;;) {
            const ssize_t n = ::read(fd, &buf[0], buf.size());
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            h.update(buf.data(), std::size_t(n));
            got += uint64_t(n);
        }
        if (got != f.size || h.hex() != f.sha256) {
            ::close(fd);
            fail(MS_ERR_BUNDLE, dir_ + "/" + rel + ": its sha256 is not the manifest's (damaged or tampered); rebuild the bundle");
        }
    }
    ::close(fd);
    return f.path;
}

std::string Bundle::section_file(const std::string &section, const std::string &key) const {
    auto it = manifest_.find(section);
    if (it == manifest_.end() || it->is_null()) return "";
    if (!it->is_object()) fail(MS_ERR_BUNDLE, dir_ + "/manifest.json: section '" + section + "' must be an object");
    const json *node = &*it;
    std::string where = section;
    if (!key.empty()) {
        auto k = node->find(key);
        if (k == node->end() || k->is_null()) return "";
        node = &*k;
        where += "." + key;
        if (node->is_string()) return node->get<std::string>();
        if (!node->is_object()) fail(MS_ERR_BUNDLE, dir_ + "/manifest.json: " + where + " must be a path or an object");
    }
    auto f = node->find("file");
    if (f == node->end()) return "";
    if (!f->is_string()) fail(MS_ERR_BUNDLE, dir_ + "/manifest.json: " + where + ".file must be a path (a string)");
    return f->get<std::string>();
}

}  // namespace ms
