// Whole columns of a Parquet file, nested ones assembled from their levels (parquet_table.h).
#include "nanochat/data/parquet_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "nanochat/core/error.h"
#include "nanochat/data/codec.h"
#include "nanochat/data/parquet_footer.h"
#include "nanochat/data/parquet_format.h"
#include "nanochat/data/parquet_page.h"

namespace nanochat::data {

using namespace parquet_format;

struct ParquetTable::Impl {
  int fd = -1;
  ParquetLimits limits;
  TableFooter footer;
  std::vector<std::string> names;  // logical name per leaf
  ~Impl() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// The logical name of a leaf: its path without the repeated group of a list and, when that group
// has a single child, without the child (the element wrapper) either.
std::string logical_name(const TableFooter& f, const TableLeaf& leaf) {
  std::string out;
  bool skip_next = false;
  for (size_t k = 0; k < leaf.nodes.size(); ++k) {
    const auto& s = f.schema[leaf.nodes[k]];
    const bool is_leaf = k + 1 == leaf.nodes.size();
    if (skip_next) {
      skip_next = false;
      continue;
    }
    if (s.repetition == kRepeated && !is_leaf) {
      skip_next = s.num_children == 1;
      continue;
    }
    out += (out.empty() ? "" : ".") + s.name;
  }
  return out;
}

// The decoded levels and values of one column chunk.
struct ChunkData {
  std::vector<uint32_t> def, rep;    // per entry (empty when the maximum level is 0)
  std::vector<std::string> strings;  // per non-null entry (BYTE_ARRAY)
  std::vector<int64_t> ints;         // per non-null entry (other types)
  size_t entries = 0;
};

// Decodes `n` PLAIN values of physical type `type` from `v`, appending to d.
template <typename Fail>
void decode_plain(int32_t type, std::string_view v, size_t n, ChunkData& d, const Fail& page_fail) {
  const auto* u = reinterpret_cast<const uint8_t*>(v.data());
  if (type == kByteArray) {
    size_t p = 0;
    for (size_t k = 0; k < n; ++k) {
      if (v.size() - p < 4) page_fail(str_cat("value ", k, " of ", n, ": length prefix is truncated"));
      const uint32_t len = load_le32(u + p);
      p += 4;
      if (len > v.size() - p) page_fail(str_cat("value ", k, " of ", len, " bytes runs past the end of the page"));
      d.strings.emplace_back(v.substr(p, len));
      p += len;
    }
  } else if (type == kInt32 || type == kInt64) {
    const size_t w = type == kInt32 ? 4 : 8;
    if (n > v.size() / w) page_fail(str_cat(n, " values of ", w, " bytes do not fit in ", v.size(), " bytes"));
    for (size_t k = 0; k < n; ++k) {
      uint64_t x = 0;
      for (size_t b = 0; b < w; ++b) x |= static_cast<uint64_t>(u[k * w + b]) << (8 * b);
      d.ints.push_back(type == kInt32 ? static_cast<int64_t>(static_cast<int32_t>(x)) : static_cast<int64_t>(x));
    }
  } else if (type == kBoolean) {
    if (n > v.size() * 8) page_fail(str_cat(n, " booleans do not fit in ", v.size(), " bytes"));
    for (size_t k = 0; k < n; ++k) d.ints.push_back((u[k / 8] >> (k % 8)) & 1);
  } else {
    page_fail(str_cat("physical type ", type_name(type), " is not supported (BYTE_ARRAY, INT32, INT64, BOOLEAN)"));
  }
}

// Reads and decodes column chunk c (leaf `leaf`, row group g) into levels and values.
ChunkData read_chunk(int fd, const std::string& path, const ParquetLimits& limits, const ColumnChunkInfo& c,
                     const TableLeaf& leaf, size_t g, const std::string& name) {
  ChunkData d;
  if (c.total_compressed_size == 0 || c.num_values == 0) return d;
  std::string chunk(static_cast<size_t>(c.total_compressed_size), '\0');
  pread_all(fd, path, c.start, chunk.data(), chunk.size());
  const auto* base = reinterpret_cast<const uint8_t*>(chunk.data());
  const size_t size = chunk.size();
  const size_t want = static_cast<size_t>(c.num_values);
  ChunkData dict;
  bool have_dict = false;
  int64_t bytes = 0;
  std::vector<uint32_t> indices;
  size_t pos = 0;
  int page_no = 0;
  while (d.entries < want) {
    const int64_t page_off = c.start + static_cast<int64_t>(pos);
    const std::string where =
        str_cat(path, ": byte offset ", page_off, " (column \"", name, "\", row group ", g, ", page ", page_no, ")");
    auto page_fail = [&](const std::string& what) -> void { fail(where, ": ", what); };
    if (pos >= size) page_fail(str_cat("column chunk ends after ", d.entries, " of ", want, " values"));
    thrift::Reader hr(base + pos, size - pos, path, page_off);
    PageHeader h = parse_page_header(hr);
    const size_t body = pos + hr.pos();
    if (static_cast<size_t>(h.compressed_size) > size - body)
      page_fail(str_cat("page of ", h.compressed_size, " bytes runs past the end of its column chunk"));
    if (h.compressed_size > limits.max_page_bytes || h.uncompressed_size > limits.max_page_bytes)
      page_fail(str_cat("page size exceeds the reader's limit of ", limits.max_page_bytes, " bytes"));
    std::string_view payload(chunk.data() + body, static_cast<size_t>(h.compressed_size));
    pos = body + static_cast<size_t>(h.compressed_size);
    page_no++;
    if (h.has_crc) {
      const auto crc = static_cast<uint32_t>(
          crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
      if (crc != h.crc) page_fail(str_cat("page CRC mismatch (stored ", h.crc, ", computed ", crc, ")"));
    }
    if (h.type == kIndexPage) continue;
    if (h.type != kDataPage && h.type != kDataPageV2 && h.type != kDictionaryPage)
      page_fail(str_cat("unknown page type ", h.type));
    if (!h.has_body) page_fail("page header lacks its type-specific header");
    if (h.type == kDictionaryPage) {
      if (have_dict || d.entries > 0) page_fail("unexpected second dictionary page (or one after data pages)");
      if (h.encoding != kPlain && h.encoding != kPlainDictionary)
        page_fail("dictionary page encoding " + encoding_name(h.encoding) + " is not supported");
      const std::string raw = decompress(c.codec, payload, static_cast<size_t>(h.uncompressed_size), where);
      decode_plain(leaf.type, raw, static_cast<size_t>(h.num_values), dict, page_fail);
      have_dict = true;
      continue;
    }
    const size_t n = static_cast<size_t>(h.num_values);
    if (n > want - d.entries)
      page_fail(str_cat("page holds ", n, " values but only ", want - d.entries, " of the chunk remain"));
    std::string data;
    std::string_view values;
    const size_t def0 = d.def.size();
    auto levels = [&](const uint8_t* p, size_t len, int max, std::vector<uint32_t>& out, const char* what) {
      decode_hybrid(p, len, bit_width(max), n, out, [&](const std::string& w) { page_fail(str_cat(what, ": ", w)); });
    };
    if (h.type == kDataPage) {
      data = decompress(c.codec, payload, static_cast<size_t>(h.uncompressed_size), where);
      size_t p = 0;
      const auto* u = reinterpret_cast<const uint8_t*>(data.data());
      for (int pass = 0; pass < 2; ++pass) {
        const int max = pass == 0 ? leaf.max_rep : leaf.max_def;
        if (max == 0) continue;
        const int32_t enc = pass == 0 ? h.rep_encoding : h.def_encoding;
        if (enc != kRle) page_fail("level encoding " + encoding_name(enc) + " is not supported (only RLE)");
        if (data.size() - p < 4) page_fail("levels length is truncated");
        const uint32_t len = load_le32(u + p);
        if (len > data.size() - p - 4) page_fail(str_cat("levels length ", len, " exceeds the page"));
        levels(u + p + 4, len, max, pass == 0 ? d.rep : d.def, pass == 0 ? "repetition levels" : "definition levels");
        p += 4 + len;
      }
      values = std::string_view(data).substr(p);
    } else {
      const uint64_t lv = static_cast<uint64_t>(h.rep_bytes) + static_cast<uint64_t>(h.def_bytes);
      if (lv > payload.size() || lv > static_cast<uint64_t>(h.uncompressed_size))
        page_fail("v2 level lengths exceed the page size");
      const auto* u = reinterpret_cast<const uint8_t*>(payload.data());
      if (leaf.max_rep > 0) levels(u, static_cast<size_t>(h.rep_bytes), leaf.max_rep, d.rep, "repetition levels");
      if (leaf.max_def > 0)
        levels(u + h.rep_bytes, static_cast<size_t>(h.def_bytes), leaf.max_def, d.def, "definition levels");
      const std::string_view enc = payload.substr(static_cast<size_t>(lv));
      const size_t raw = static_cast<size_t>(h.uncompressed_size) - static_cast<size_t>(lv);
      if (h.is_compressed && c.codec != static_cast<int32_t>(Codec::Uncompressed)) {
        data = decompress(c.codec, enc, raw, where);
      } else {
        if (enc.size() != raw) page_fail("uncompressed v2 page: sizes in the header disagree");
        data = std::string(enc);
      }
      values = data;
    }
    size_t non_null = n;
    if (leaf.max_def > 0) {
      non_null = 0;
      for (size_t k = def0; k < d.def.size(); ++k) {
        if (d.def[k] > static_cast<uint32_t>(leaf.max_def))
          page_fail(str_cat("definition level ", d.def[k], " exceeds the maximum ", leaf.max_def));
        non_null += d.def[k] == static_cast<uint32_t>(leaf.max_def);
      }
    }
    if (h.encoding == kPlain) {
      decode_plain(leaf.type, values, non_null, d, page_fail);
    } else if (h.encoding == kPlainDictionary || h.encoding == kRleDictionary) {
      if (!have_dict) page_fail("dictionary-encoded page without a dictionary page");
      if (non_null > 0) {
        if (values.empty()) page_fail("dictionary-encoded page lacks its bit width byte");
        indices.clear();
        decode_hybrid(reinterpret_cast<const uint8_t*>(values.data()) + 1, values.size() - 1,
                      static_cast<uint8_t>(values[0]), non_null, indices,
                      [&](const std::string& w) { page_fail("dictionary indices: " + w); });
        const size_t dn = leaf.type == kByteArray ? dict.strings.size() : dict.ints.size();
        for (uint32_t ix : indices) {
          if (ix >= dn) page_fail(str_cat("dictionary index ", ix, " out of range (dictionary has ", dn, " entries)"));
          if (leaf.type == kByteArray) {
            d.strings.push_back(dict.strings[ix]);
          } else {
            d.ints.push_back(dict.ints[ix]);
          }
        }
      }
    } else {
      page_fail("value encoding " + encoding_name(h.encoding) +
                " is not supported (supported: PLAIN, PLAIN_DICTIONARY, RLE_DICTIONARY)");
    }
    if (leaf.type == kByteArray) {
      for (size_t k = d.strings.size() - non_null; k < d.strings.size(); ++k) bytes += d.strings[k].size();
    } else {
      bytes += static_cast<int64_t>(non_null * 8);
    }
    if (bytes > limits.max_row_group_bytes)
      page_fail(str_cat("the column chunk exceeds the reader's limit of ", limits.max_row_group_bytes, " bytes"));
    d.entries += n;
  }
  return d;
}

}  // namespace

ParquetTable::ParquetTable(const std::string& path, const ParquetLimits& limits)
    : path_(path), impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (impl_->fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(impl_->fd, &st) != 0) fail(path, ": cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, ": not a regular file");
  const int64_t file_size = st.st_size;
  if (file_size < 12) fail(path, ": file is ", file_size, " bytes, too small to be a Parquet file (needs at least 12)");
  uint8_t head[4], tail[8];
  pread_all(impl_->fd, path, 0, head, 4);
  pread_all(impl_->fd, path, file_size - 8, tail, 8);
  if (std::memcmp(head, kMagic, 4) != 0 || std::memcmp(tail + 4, kMagic, 4) != 0)
    fail(path, ": not a Parquet file (magic bytes \"PAR1\" missing at the start or the end: truncated?)");
  const uint32_t footer_len = load_le32(tail);
  if (footer_len == 0 || footer_len > static_cast<uint64_t>(file_size - 12))
    fail(path, ": byte offset ", file_size - 8, ": footer length ", footer_len, " does not fit in the file");
  const int64_t start = file_size - 8 - footer_len;
  std::string bytes(footer_len, '\0');
  pread_all(impl_->fd, path, start, bytes.data(), footer_len);
  impl_->footer = parse_table_footer(bytes, path, start, limits);
  num_rows_ = impl_->footer.num_rows;
  for (const auto& leaf : impl_->footer.leaves) impl_->names.push_back(logical_name(impl_->footer, leaf));
}

ParquetTable::~ParquetTable() = default;

std::vector<std::string> ParquetTable::column_names() const { return impl_->names; }

ParquetColumn ParquetTable::read_column(const std::string& name) const {
  const TableFooter& f = impl_->footer;
  size_t k = 0;
  while (k < impl_->names.size() && impl_->names[k] != name) ++k;
  if (k == impl_->names.size()) {
    std::string all;
    for (const auto& n : impl_->names) all += (all.empty() ? "" : ", ") + n;
    fail(path_, ": has no column \"", name, "\" (columns: ", all.empty() ? "none" : all, ")");
  }
  const TableLeaf& leaf = f.leaves[k];
  if (leaf.max_rep > 1) fail(path_, ": column \"", name, "\" is a list of lists, which this reader does not support");
  if (leaf.type != kByteArray && leaf.type != kInt32 && leaf.type != kInt64 && leaf.type != kBoolean)
    fail(path_, ": column \"", name, "\" has physical type ", type_name(leaf.type),
         "; supported: BYTE_ARRAY, INT32, INT64, BOOLEAN");
  ParquetColumn col;
  col.name = name;
  col.is_list = leaf.max_rep == 1;
  col.is_string = leaf.type == kByteArray;
  col.offsets.push_back(0);
  for (size_t g = 0; g < f.chunks.size(); ++g) {
    ChunkData d = read_chunk(impl_->fd, path_, impl_->limits, f.chunks[g][k], leaf, g, name);
    const size_t rows_before = col.offsets.size();
    size_t v = 0;  // next non-null value
    int64_t items = col.offsets.back();
    for (size_t e = 0; e < d.entries; ++e) {
      const uint32_t def = leaf.max_def > 0 ? d.def[e] : 0;
      const bool new_row = leaf.max_rep == 0 || d.rep[e] == 0;
      if (e == 0 && !new_row)
        fail(path_, ": row group ", g, ": column \"", name, "\" starts with repetition level ", d.rep[0],
             " (a chunk must start a row)");
      if (new_row && e > 0) col.offsets.push_back(items);
      if (leaf.max_rep == 1 && static_cast<int>(def) < leaf.rep_def) continue;  // empty or null list
      const bool present = static_cast<int>(def) == leaf.max_def;
      col.valid.push_back(present);
      if (col.is_string) {
        col.strings.push_back(present ? std::move(d.strings[v]) : std::string());
      } else {
        col.ints.push_back(present ? d.ints[v] : 0);
      }
      v += present;
      items++;
    }
    if (d.entries > 0) col.offsets.push_back(items);
    const int64_t rows = static_cast<int64_t>(col.offsets.size() - rows_before);
    if (rows != f.group_rows[g])
      fail(path_, ": row group ", g, ": column \"", name, "\" holds ", rows, " rows but the row group has ",
           f.group_rows[g]);
  }
  return col;
}

}  // namespace nanochat::data
