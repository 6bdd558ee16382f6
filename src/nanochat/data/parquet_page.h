#pragma once
// The page layer of Parquet column chunks (page headers, the RLE/bit-packed hybrid encoding of
// levels and dictionary indices), shared by ParquetReader (parquet.h) and ParquetTable
// (parquet_table.h). Format: https://github.com/apache/parquet-format (parquet.thrift, Encodings.md).
// Internal to data/.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nanochat/core/error.h"
#include "nanochat/data/parquet.h"
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

// ---- the pages of a column chunk -------------------------------------------------------------
/// One data or dictionary page of a column chunk, its header checked by PageWalker::next.
struct Page {
  PageHeader h;
  std::string_view payload;  // the page body as stored in the chunk (h.compressed_size bytes)
  std::string where;         // "<path>: byte offset <n> (<label>, page <k>)": the prefix of its errors
  /// Throws nanochat::Error "<where>: <what>".
  [[noreturn]] void fail(const std::string& what) const;
};

/// Walks the pages of one column chunk held in memory. Every page next() returns lies inside the
/// chunk, is at most max_page_bytes compressed and decompressed, matches its CRC when its header
/// stores one, is a data page (v1 or v2) or a dictionary page and has that type's header; index
/// pages are counted and skipped. Errors throw nanochat::Error naming the file, the byte offset,
/// the chunk's label and the page number.
class PageWalker {
 public:
  /// chunk: the column chunk's bytes, read from byte `start` of the file `path`; label names the
  /// chunk in messages ("row group 3", or "column \"x\", row group 3"). chunk and path must outlive
  /// the walker. stats (may be nullptr): its pages and crc_pages count every page read, so far as
  /// the walk got when a page fails.
  PageWalker(std::string_view chunk, int64_t start, const std::string& path, std::string label, int64_t max_page_bytes,
             PageStats* stats = nullptr);
  /// The next data or dictionary page. progress ("2 of 3 values") completes the error thrown when
  /// the chunk ends before its values do.
  Page next(const std::string& progress);

 private:
  std::string_view chunk_;
  int64_t start_;
  const std::string& path_;
  std::string label_;
  int64_t max_page_bytes_;
  PageStats* stats_;
  size_t pos_ = 0;
  int page_no_ = 0;
};

/// Splits n PLAIN-encoded BYTE_ARRAY values (each a 4-byte little-endian length, then its bytes)
/// off the front of v; what ("value", "dictionary entry") names them in the errors thrown via
/// p.fail when v is too short.
std::vector<std::string_view> split_plain_strings(const Page& p, std::string_view v, size_t n, const char* what);

/// The decompressed body of dictionary page p of a chunk compressed with `codec`. Throws when the
/// chunk already has a dictionary or data (seen_before) or the page's encoding is not PLAIN.
std::string dictionary_page_body(const Page& p, int32_t codec, bool seen_before);

/// Splits data page p (v1 or v2) of n entries in a column with maximum repetition / definition
/// levels max_rep / max_def: appends its levels to rep and def (each left alone when its maximum
/// is 0) and returns the encoded values, a view into `data`, which receives the page's
/// decompressed bytes. Throws via p.fail on an unsupported level encoding, a level run or length
/// that does not fit the page, or v2 levels stored for a level whose maximum is 0.
std::string_view split_data_page(const Page& p, int32_t codec, int max_rep, int max_def, size_t n,
                                 std::vector<uint32_t>& rep, std::vector<uint32_t>& def, std::string& data);

/// How many of def[from..] equal max_def (the entries of data page p that hold a value); all of
/// the page's entries when max_def is 0. Throws via p.fail on a level above max_def.
size_t count_defined(const Page& p, const std::vector<uint32_t>& def, size_t from, int max_def);

/// True when data page p's values are dictionary indices (PLAIN_DICTIONARY, RLE_DICTIONARY), false
/// for PLAIN; throws via p.fail for any other encoding.
bool dictionary_encoded(const Page& p);

/// Decodes the n dictionary indices of dictionary-encoded values (a bit-width byte, then the
/// RLE/bit-packed hybrid) into out (cleared first), each checked against dict_size.
void dictionary_indices(const Page& p, std::string_view values, size_t n, size_t dict_size, std::vector<uint32_t>& out);

}  // namespace nanochat::data::parquet_format
