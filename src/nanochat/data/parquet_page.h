#pragma once
// The page layer of Parquet column chunks (page headers, the RLE/bit-packed hybrid encoding of
// levels and dictionary indices), shared by ParquetReader (parquet.h) and ParquetTable
// (parquet_table.h). Format: https://github.com/apache/parquet-format (parquet.thrift, Encodings.md).
// Internal to data/.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/data/thrift_compact.h"

namespace nanochat::data::parquet_format {

/// Reads exactly n bytes at `offset` of fd (retrying short reads); throws nanochat::Error
/// "<path>: byte offset <n>: ..." on a read error or end of file.
void pread_all(int fd, const std::string& path, int64_t offset, void* buf, size_t n);

inline uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// ---- page headers --------------------------------------------------------------------------
struct PageHeader {
  int32_t type = -1;
  int32_t uncompressed_size = -1;
  int32_t compressed_size = -1;
  bool has_crc = false;
  uint32_t crc = 0;
  // data page v1 / v2 / dictionary page
  int32_t num_values = -1;
  int32_t encoding = -1;
  int32_t def_encoding = -1;
  int32_t rep_encoding = -1;
  int32_t num_nulls = -1;                  // v2
  int32_t num_rows = -1;                   // v2
  int32_t def_bytes = -1, rep_bytes = -1;  // v2
  bool is_compressed = true;               // v2
  bool has_body = false;
};

/// Parses one PageHeader (and its data / dictionary / v2 header) at the reader's position.
/// Throws via r.fail() on a malformed header.
PageHeader parse_page_header(thrift::Reader& r);

// ---- RLE / bit-packed hybrid -----------------------------------------------------------------
// Decodes exactly n values of bit width bw (0..32) from [p, p+size) and appends them to out.
// Values of a bit-packed run beyond n (padding of the last group) are ignored; the run may be
// shorter than its declared groups when those groups would only hold padding.
template <typename Fail>
void decode_hybrid(const uint8_t* p, size_t size, int bw, size_t n, std::vector<uint32_t>& out, const Fail& fail_fn) {
  if (bw < 0 || bw > 32) fail_fn(str_cat("bit width ", bw, " is out of range 0..32"));
  size_t pos = 0;
  const size_t value_bytes = static_cast<size_t>((bw + 7) / 8);
  const uint64_t max_value = bw == 32 ? 0xffffffffull : ((1ull << bw) - 1);
  out.reserve(out.size() + n);
  size_t need = n;
  while (need > 0) {
    // run header: ULEB128 varint
    uint64_t header = 0;
    for (int shift = 0;; shift += 7) {
      if (pos >= size) fail_fn(str_cat("RLE/bit-packed data ends after ", n - need, " of ", n, " values"));
      if (shift > 35) fail_fn("RLE run header varint is too long");
      uint8_t b = p[pos++];
      header |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    if (header & 1) {  // bit-packed: (header >> 1) groups of 8 values
      uint64_t count = (header >> 1) * 8;
      size_t take = static_cast<size_t>(std::min<uint64_t>(count, need));
      size_t bytes_needed = (take * static_cast<size_t>(bw) + 7) / 8;
      if (bytes_needed > size - pos) fail_fn("bit-packed run is truncated");
      for (size_t i = 0; i < take; ++i) {
        uint64_t bit = static_cast<uint64_t>(i) * static_cast<uint64_t>(bw);
        size_t byte = static_cast<size_t>(bit / 8);
        int shift = static_cast<int>(bit % 8);
        uint64_t word = 0;
        size_t nb = static_cast<size_t>((shift + bw + 7) / 8);
        for (size_t k = 0; k < nb; ++k) word |= static_cast<uint64_t>(p[pos + byte + k]) << (8 * k);
        out.push_back(static_cast<uint32_t>((word >> shift) & max_value));
      }
      // Skip the whole run (or whatever is left of it when the final padding was cut off).
      uint64_t run_bytes = (header >> 1) * static_cast<uint64_t>(bw);
      pos += static_cast<size_t>(std::min<uint64_t>(run_bytes, size - pos));
      need -= take;
    } else {  // RLE run: (header >> 1) repeats of one value
      uint64_t count = header >> 1;
      if (value_bytes > size - pos) fail_fn("RLE run value is truncated");
      uint64_t v = 0;
      for (size_t k = 0; k < value_bytes; ++k) v |= static_cast<uint64_t>(p[pos + k]) << (8 * k);
      pos += value_bytes;
      if (v > max_value) fail_fn(str_cat("RLE run value ", v, " does not fit in ", bw, " bits"));
      size_t take = static_cast<size_t>(std::min<uint64_t>(count, need));
      out.insert(out.end(), take, static_cast<uint32_t>(v));
      need -= take;
    }
  }
}

inline int bit_width(int max_level) {
  int w = 0;
  while ((1 << w) <= max_level) ++w;
  return w;
}

}  // namespace nanochat::data::parquet_format
