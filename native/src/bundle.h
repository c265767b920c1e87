// bundle.h: a bundle folder as the native core reads it: the manifest, and listed files confined to the folder with their sizes and sha256 checked.
#pragma once

#include <string>

#include "json.h"

namespace ms {

class Bundle {
public:
    // Reads `dir`/manifest.json (at most 16 MB, format magicselector-bundle version 1). A missing,
    // unreadable or foreign manifest is MS_ERR_BUNDLE naming it.
    static Bundle open(const std::string &dir);

    // The bytes of a file the manifest lists: the path must stay inside the folder (no absolute
    // path, no "..", no link out of it), name a regular file of the listed size, and with `verify`
    // hash to the listed sha256; anything else is MS_ERR_BUNDLE naming the file.
    std::string read(const std::string &rel, bool verify = true) const;

    // The path of a listed file checked as `read` checks it, hashed in pieces instead of held (a
    // model another library opens by path).
    std::string checked_path(const std::string &rel, bool verify = true) const;

    // The file a manifest section names (section.file, or section.<key>.file / section.<key> for a
    // nested entry), "" where the section or key is absent; a non-string is MS_ERR_BUNDLE.
    std::string section_file(const std::string &section, const std::string &key = "") const;

    const json &manifest() const { return manifest_; }
    const std::string &dir() const { return dir_; }

private:
    std::string dir_;
    std::string real_dir_;
    json manifest_;
};

// Reads a whole regular file of at most `max_bytes` (MS_ERR_BUNDLE naming `path` otherwise).
std::string read_regular_file(const std::string &path, std::size_t max_bytes);

}  // namespace ms
