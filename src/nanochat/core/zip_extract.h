#pragma once
// Unpacking an ordinary zip archive (records stored or deflated, as Python's zipfile and `zip`
// write them; APPNOTE.TXT 4.3): the central directory is read, each file record is inflated with
// zlib (raw deflate) and checked against its CRC32. Used for nanochat's eval_bundle.zip. No
// encryption, no zip64, no other compression methods.
#include <string>
#include <vector>

namespace nanochat {

/// Writes every file record of the archive at `zip_path` whose name starts with `prefix` under
/// `dest_dir`, at its name with `prefix` removed (folders are created; directory records are
/// skipped). Returns the relative paths written. Throws nanochat::Error naming the archive and the
/// record for: a file that is not a zip archive, an encrypted record or another method than
/// stored/deflate, a CRC32 or size mismatch, a name that is absolute or climbs out with "..", or a
/// file that cannot be written.
std::vector<std::string> extract_zip(const std::string& zip_path, const std::string& dest_dir,
                                     const std::string& prefix = "");

}  // namespace nanochat
