#pragma once
// The Parquet writer of nanochat's shards (the reader is data/parquet.h, which includes this).
// Layout: exactly nanochat's — one OPTIONAL BYTE_ARRAY column "text" (STRING logical type),
// PLAIN encoding, no dictionary, no statistics, data page v1, ZSTD (level 3), row groups of 1024
// rows, data pages of about 1 MiB, each with its CRC-32 in the page header (data/verify.h checks
// it through the reader). It writes "<path>.tmp" and renames it on close().
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanochat::data {

/// Writes nanochat-layout Parquet shards (see the file comment). Documents are buffered per row
/// group; every `row_group_size` documents a row group is compressed and appended. close()
/// writes the footer, fsyncs and renames "<path>.tmp" to `path`; the destructor of a writer that
/// was not closed removes the temporary file (so an interrupted shard never looks complete).
/// Throws nanochat::Error naming the path on I/O failure.
class ParquetWriter {
 public:
  explicit ParquetWriter(const std::string& path, int row_group_size = 1024, int zstd_level = 3,
                         int64_t page_bytes = int64_t(1) << 20);
  ~ParquetWriter();
  ParquetWriter(const ParquetWriter&) = delete;
  ParquetWriter& operator=(const ParquetWriter&) = delete;

  /// Appends one document (any bytes; nanochat's text is UTF-8).
  void write(std::string_view doc);
  /// Flushes the last (possibly short) row group, writes the footer and renames into place.
  void close();
  int64_t rows_written() const { return rows_; }

 private:
  void flush_row_group();
  void append(const std::string& bytes);
  std::string file_metadata() const;  // the footer's FileMetaData (thrift compact)

  std::string path_, tmp_path_;
  int row_group_size_;
  int zstd_level_;
  int64_t page_bytes_;
  int fd_ = -1;
  int64_t offset_ = 0;
  int64_t rows_ = 0;
  bool closed_ = false;
  std::vector<std::string> pending_;
  struct RgMeta {
    int64_t num_rows, data_page_offset, compressed, uncompressed;
  };
  std::vector<RgMeta> rgs_;
};

}  // namespace nanochat::data
