#pragma once
// Uncompressed ("stored") zip archives as PyTorch's torch.save writes them (its zip checkpoint
// format): every record's bytes are stored as they are, each record's data starts at a multiple of
// `align` bytes of the file (torch uses 64) by padding the local header's extra field, and the
// archive ends with a central directory. Only what torch checkpoints need: no compression, no
// encryption, no zip64 when writing (archives stay under 4 GiB); the reader also
// takes zip64 records.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace nanochat {

/// zlib CRC32 of n bytes, continuing from `crc` (0 to start).
uint32_t zip_crc32(uint32_t crc, const void* data, size_t n);

/// Writes a stored zip archive record by record. Not thread-safe.
class ZipWriter {
 public:
  /// Creates (truncates) `path`. Throws nanochat::Error naming the path when it cannot.
  explicit ZipWriter(const std::string& path, size_t align = 64);
  ~ZipWriter();
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;

  /// Appends record `name` holding n bytes at data, its data aligned to `align` bytes.
  /// Throws nanochat::Error naming the path on I/O failure or past 4 GiB.
  void add(const std::string& name, const void* data, size_t n);
  /// Writes the central directory, flushes, fsyncs and closes. Throws on I/O failure.
  void finish();

 private:
  struct Entry {
    std::string name;
    uint32_t crc, size, offset;
  };
  void put(const void* p, size_t n);
  std::string path_;
  size_t align_;
  std::FILE* f_ = nullptr;
  uint64_t pos_ = 0;
  std::vector<Entry> entries_;
};

/// A stored zip archive read whole into memory. Every record's CRC32 is checked when it is opened.
class ZipReader {
 public:
  /// Reads `path`. Throws nanochat::Error naming the path when it cannot be read, is not a zip
  /// archive, is truncated, or holds a compressed, encrypted or zip64 record.
  explicit ZipReader(const std::string& path);
  /// The same for an archive already in memory; `what` names it in messages.
  static ZipReader from_bytes(std::string bytes, const std::string& what);
  /// Record names in central-directory order.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  /// The bytes of record `name` (a view into the reader). Throws nanochat::Error naming the
  /// archive and the record when it is missing or its CRC32 does not match.
  std::string_view get(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  ZipReader() = default;
  struct Rec {
    uint64_t offset, size;
    uint32_t crc;
  };
  void parse_central_directory();
  std::string path_;
  std::string bytes_;
  std::vector<std::string> order_;
  std::map<std::string, Rec> index_;
};

}  // namespace nanochat
