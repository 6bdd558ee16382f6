#pragma once
// A small Parquet reader and writer for one text column — the shard layout of nanochat's
// pretraining data (docs/nanochat.md 5.2; format: https://github.com/apache/parquet-format).
//
// Reader: finds the top-level column named "text" (BYTE_ARRAY, REQUIRED or OPTIONAL; other columns
// are skipped, nested ones included) and decodes it one row group at a time, reading only that
// row group's column chunk from disk. Supported: data pages v1 and v2, PLAIN and dictionary
// (PLAIN_DICTIONARY / RLE_DICTIONARY + a dictionary page) encodings, definition levels in the
// RLE/bit-packed hybrid encoding, page CRCs (checked when present), codecs UNCOMPRESSED, SNAPPY,
// GZIP and ZSTD. A null value (OPTIONAL column, definition level 0) is returned as an EMPTY
// string, so row indices always match other Parquet readers'.
// Every malformed, truncated or unsupported input throws nanochat::Error of the form
// "<path>: byte offset <n>: <what is wrong>" — never a crash, hang or partial result. Allocation
// is bounded by the file size, the bytes actually decompressed and the ParquetLimits below.
//
// Writer: ParquetWriter, in data/parquet_writer.h (included here), writes exactly nanochat's
// layout (one OPTIONAL string column "text", ZSTD, a CRC-32 in every page header).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nanochat/data/parquet_writer.h"

namespace nanochat::data {

/// Parquet Encoding enum name ("PLAIN", "RLE_DICTIONARY", ...).
std::string encoding_name(int32_t encoding);

/// Hard limits of the reader (defaults fit any real text shard; the fuzzer lowers them).
struct ParquetLimits {
  int64_t max_page_bytes = int64_t(256) << 20;     // one page, compressed or decompressed
  int64_t max_row_group_rows = int64_t(1) << 22;   // rows in one row group
  int64_t max_row_group_bytes = int64_t(4) << 30;  // total text bytes decoded from one row group
};

/// Footer metadata of the "text" column chunk in one row group.
struct ColumnChunkInfo {
  int32_t codec = 0;               // CompressionCodec (see codec.h)
  std::vector<int32_t> encodings;  // Encoding enum values listed in the footer
  int64_t num_values = 0;
  int64_t total_compressed_size = 0;  // bytes on disk (all pages incl. headers)
  int64_t total_uncompressed_size = 0;
  int64_t data_page_offset = 0;
  int64_t dictionary_page_offset = -1;  // -1: none
  int64_t start = 0;                    // first byte of the chunk (dictionary page if any)
};

/// Counts of what read_row_group() decoded (the shard check's summary, data/verify.h).
struct PageStats {
  int64_t pages = 0;        // pages read (dictionary, data and index pages)
  int64_t crc_pages = 0;    // of them, pages whose header carries a CRC (checked)
  int64_t chunk_bytes = 0;  // bytes of the column chunk on disk
  int64_t text_bytes = 0;   // bytes of text decoded
};

/// One row group as listed in the footer.
struct RowGroupInfo {
  int64_t num_rows = 0;
  int64_t total_byte_size = 0;  // uncompressed size of all its columns (footer value)
  ColumnChunkInfo text;         // the "text" column's chunk
};

/// Reads the "text" column of a Parquet file. The constructor reads and validates the footer;
/// read_row_group() reads one column chunk with pread, so a const reader may be used from several
/// threads at once. Throws nanochat::Error (naming the path) when the file cannot be opened, is
/// not Parquet, is corrupt, or has no usable "text" column.
class ParquetReader {
 public:
  explicit ParquetReader(const std::string& path, const ParquetLimits& limits = {});
  ~ParquetReader();
  ParquetReader(ParquetReader&& o) noexcept;
  ParquetReader& operator=(ParquetReader&& o) noexcept;
  ParquetReader(const ParquetReader&) = delete;
  ParquetReader& operator=(const ParquetReader&) = delete;

  const std::string& path() const { return path_; }
  int64_t file_size() const { return file_size_; }
  int num_row_groups() const { return static_cast<int>(row_groups_.size()); }
  /// Total rows (footer FileMetaData.num_rows, checked to equal the sum over row groups).
  int64_t num_rows() const { return num_rows_; }
  /// Rows of row group i (0 <= i < num_row_groups(), else nanochat::Error).
  int64_t row_group_num_rows(int i) const;
  const RowGroupInfo& row_group(int i) const;
  /// All "text" values of row group i in row order (nulls -> ""). Reads only that chunk, checks
  /// every page's CRC when its header carries one, and decodes every page; adds to *stats if given.
  std::vector<std::string> read_row_group(int i, PageStats* stats = nullptr) const;

  /// The schema tree as text, e.g. "message schema {\n  optional binary text (STRING);\n}".
  std::string schema_string() const;
  /// Codec of the text column ("ZSTD"); "A,B" when row groups differ; "none" without row groups.
  std::string codec_name() const;
  /// Union of the text column's encodings over all row groups ("PLAIN,RLE").
  std::string encodings_string() const;
  /// FileMetaData.created_by ("" when absent).
  const std::string& created_by() const { return created_by_; }
  /// True when the text column is OPTIONAL (has definition levels).
  bool text_optional() const { return max_def_ > 0; }

  struct SchemaNode {
    std::string name;
    int32_t type = -1;        // physical Type; -1 for groups
    int32_t repetition = -1;  // 0 REQUIRED, 1 OPTIONAL, 2 REPEATED, -1 absent
    int32_t num_children = 0;
    int32_t converted_type = -1;
    int32_t logical_type = -1;  // LogicalType union field id (1 = STRING), -1 absent
  };

 private:
  [[noreturn]] void fail_at(int64_t offset, const std::string& what) const;
  void read_footer();

  std::string path_;
  ParquetLimits limits_;
  int fd_ = -1;
  int64_t file_size_ = 0;
  int64_t footer_start_ = 0;
  int64_t num_rows_ = 0;
  std::string created_by_;
  std::vector<SchemaNode> schema_;
  std::vector<RowGroupInfo> row_groups_;
  int max_def_ = 0;
};

}  // namespace nanochat::data
