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
void decode_plain(const Page& p, int32_t type, std::string_view v, size_t n, ChunkData& d) {
  const auto* u = reinterpret_cast<const uint8_t*>(v.data());
  if (type == kByteArray) {
    for (std::string_view s : split_plain_strings(p, v, n, "value")) d.strings.emplace_back(s);
  } else if (type == kInt32 || type == kInt64) {
    const size_t w = type == kInt32 ? 4 : 8;
    if (n > v.size() / w) p.fail(str_cat(n, " values of ", w, " bytes do not fit in ", v.size(), " bytes"));
    for (size_t k = 0; k < n; ++k) {
      uint64_t x = 0;
      for (size_t b = 0; b < w; ++b) x |= static_cast<uint64_t>(u[k * w + b]) << (8 * b);
      d.ints.push_back(type == kInt32 ? static_cast<int64_t>(static_cast<int32_t>(x)) : static_cast<int64_t>(x));
    }
  } else if (type == kBoolean) {
    if (n > v.size() * 8) p.fail(str_cat(n, " booleans do not fit in ", v.size(), " bytes"));
    for (size_t k = 0; k < n; ++k) d.ints.push_back((u[k / 8] >> (k % 8)) & 1);
  } else {
    p.fail(str_cat("physical type ", type_name(type), " is not supported (BYTE_ARRAY, INT32, INT64, BOOLEAN)"));
  }
}

// Reads and decodes column chunk c (leaf `leaf`, row group g) into levels and values; the page
// layer (PageWalker and the page helpers in parquet_page.h) is shared with ParquetReader.
ChunkData read_chunk(int fd, const std::string& path, const ParquetLimits& limits, const ColumnChunkInfo& c,
                     const TableLeaf& leaf, size_t g, const std::string& name) {
  ChunkData d;
  if (c.total_compressed_size == 0 || c.num_values == 0) return d;
  std::string chunk(static_cast<size_t>(c.total_compressed_size), '\0');
  pread_all(fd, path, c.start, chunk.data(), chunk.size());
  const size_t want = static_cast<size_t>(c.num_values);
  const bool strings = leaf.type == kByteArray;
  PageWalker pages(chunk, c.start, path, str_cat("column \"", name, "\", row group ", g), limits.max_page_bytes);
  ChunkData dict;
  bool have_dict = false;
  int64_t bytes = 0;
  std::string data;
  std::vector<uint32_t> indices;
  while (d.entries < want) {
    const Page p = pages.next(str_cat(d.entries, " of ", want, " values"));
    if (p.h.type == kDictionaryPage) {
      const std::string raw = dictionary_page_body(p, c.codec, have_dict || d.entries > 0);
      decode_plain(p, leaf.type, raw, static_cast<size_t>(p.h.num_values), dict);
      have_dict = true;
      continue;
    }
    const size_t n = static_cast<size_t>(p.h.num_values);
    if (n > want - d.entries)
      p.fail(str_cat("page holds ", n, " values but only ", want - d.entries, " of the chunk remain"));
    const size_t def0 = d.def.size();
    const std::string_view values = split_data_page(p, c.codec, leaf.max_rep, leaf.max_def, n, d.rep, d.def, data);
    const size_t non_null = count_defined(p, d.def, def0, leaf.max_def);
    if (!dictionary_encoded(p)) {
      decode_plain(p, leaf.type, values, non_null, d);
    } else {
      if (!have_dict) p.fail("dictionary-encoded page without a dictionary page");
      dictionary_indices(p, values, non_null, strings ? dict.strings.size() : dict.ints.size(), indices);
      for (uint32_t ix : indices) {
        if (strings)
          d.strings.push_back(dict.strings[ix]);
        else
          d.ints.push_back(dict.ints[ix]);
      }
    }
    if (strings) {
      for (size_t k = d.strings.size() - non_null; k < d.strings.size(); ++k) bytes += d.strings[k].size();
    } else {
      bytes += static_cast<int64_t>(non_null * 8);
    }
    if (bytes > limits.max_row_group_bytes)
      p.fail(str_cat("the column chunk exceeds the reader's limit of ", limits.max_row_group_bytes, " bytes"));
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
