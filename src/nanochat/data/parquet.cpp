#include "nanochat/data/parquet.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>

#include "nanochat/core/error.h"
#include "nanochat/data/codec.h"
#include "nanochat/data/parquet_footer.h"
#include "nanochat/data/parquet_format.h"
#include "nanochat/data/parquet_page.h"
#include "nanochat/data/thrift_compact.h"

namespace nanochat::data {

using thrift::CType;
using namespace parquet_format;

std::string encoding_name(int32_t e) {
  switch (e) {
    case kPlain:
      return "PLAIN";
    case 1:
      return "GROUP_VAR_INT";
    case kPlainDictionary:
      return "PLAIN_DICTIONARY";
    case kRle:
      return "RLE";
    case kBitPacked:
      return "BIT_PACKED";
    case kDeltaBinaryPacked:
      return "DELTA_BINARY_PACKED";
    case kDeltaLengthByteArray:
      return "DELTA_LENGTH_BYTE_ARRAY";
    case kDeltaByteArray:
      return "DELTA_BYTE_ARRAY";
    case kRleDictionary:
      return "RLE_DICTIONARY";
    case kByteStreamSplit:
      return "BYTE_STREAM_SPLIT";
  }
  return str_cat("encoding(", e, ")");
}

// =============================================================================================
// ParquetReader
// =============================================================================================

ParquetReader::ParquetReader(const std::string& path, const ParquetLimits& limits) : path_(path), limits_(limits) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(path, ": cannot open: ", std::strerror(errno));
  try {
    struct stat st;
    if (::fstat(fd_, &st) != 0) fail(path, ": cannot stat: ", std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(path, ": not a regular file");
    file_size_ = st.st_size;
    read_footer();
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

ParquetReader::~ParquetReader() {
  if (fd_ >= 0) ::close(fd_);
}

ParquetReader::ParquetReader(ParquetReader&& o) noexcept
    : path_(std::move(o.path_)),
      limits_(o.limits_),
      fd_(o.fd_),
      file_size_(o.file_size_),
      footer_start_(o.footer_start_),
      num_rows_(o.num_rows_),
      created_by_(std::move(o.created_by_)),
      schema_(std::move(o.schema_)),
      row_groups_(std::move(o.row_groups_)),
      max_def_(o.max_def_) {
  o.fd_ = -1;
}

ParquetReader& ParquetReader::operator=(ParquetReader&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    limits_ = o.limits_;
    fd_ = o.fd_;
    o.fd_ = -1;
    file_size_ = o.file_size_;
    footer_start_ = o.footer_start_;
    num_rows_ = o.num_rows_;
    created_by_ = std::move(o.created_by_);
    schema_ = std::move(o.schema_);
    row_groups_ = std::move(o.row_groups_);
    max_def_ = o.max_def_;
  }
  return *this;
}

void ParquetReader::fail_at(int64_t offset, const std::string& what) const {
  fail(path_, ": byte offset ", offset, ": ", what);
}

// Finds and checks the footer (magic bytes, length), then parses it (parquet_footer.h).
void ParquetReader::read_footer() {
  if (file_size_ < 12)
    fail(path_, ": file is ", file_size_, " bytes, too small to be a Parquet file (needs at least 12)");
  uint8_t head[4];
  pread_all(fd_, path_, 0, head, 4);
  if (std::memcmp(head, kMagic, 4) != 0) fail_at(0, "not a Parquet file (magic bytes \"PAR1\" missing at the start)");
  uint8_t tail[8];
  pread_all(fd_, path_, file_size_ - 8, tail, 8);
  if (std::memcmp(tail + 4, "PARE", 4) == 0) fail_at(file_size_ - 4, "encrypted Parquet footers are not supported");
  if (std::memcmp(tail + 4, kMagic, 4) != 0) {
    fail_at(file_size_ - 4, "magic bytes \"PAR1\" missing at the end (file truncated or not Parquet)");
  }
  uint32_t footer_len = load_le32(tail);
  if (footer_len == 0 || footer_len > static_cast<uint64_t>(file_size_ - 12)) {
    fail_at(file_size_ - 8, str_cat("footer length ", footer_len, " does not fit in a file of ", file_size_, " bytes"));
  }
  footer_start_ = file_size_ - 8 - footer_len;
  std::string bytes(footer_len, '\0');
  pread_all(fd_, path_, footer_start_, bytes.data(), footer_len);

  Footer footer = parse_footer(bytes, path_, footer_start_, limits_);
  schema_ = std::move(footer.schema);
  num_rows_ = footer.num_rows;
  created_by_ = std::move(footer.created_by);
  row_groups_ = std::move(footer.row_groups);
  max_def_ = footer.max_def;
}

int64_t ParquetReader::row_group_num_rows(int i) const { return row_group(i).num_rows; }

const RowGroupInfo& ParquetReader::row_group(int i) const {
  if (i < 0 || i >= num_row_groups())
    fail(path_, ": row group ", i, " does not exist (the file has ", num_row_groups(), ")");
  return row_groups_[static_cast<size_t>(i)];
}

std::vector<std::string> ParquetReader::read_row_group(int i, PageStats* stats) const {
  const RowGroupInfo& rg = row_group(i);
  const ColumnChunkInfo& c = rg.text;
  std::vector<std::string> rows;
  if (rg.num_rows == 0) return rows;
  std::string chunk(static_cast<size_t>(c.total_compressed_size), '\0');
  pread_all(fd_, path_, c.start, chunk.data(), chunk.size());
  const size_t want = static_cast<size_t>(rg.num_rows);
  rows.reserve(std::min(want, chunk.size()));

  PageWalker pages(chunk, c.start, path_, str_cat("row group ", i), limits_.max_page_bytes, stats);
  std::string dict_buf, data;
  std::vector<std::string_view> dict, vals;
  bool have_dict = false;
  int64_t text_bytes = 0;
  std::vector<uint32_t> levels, no_rep, indices;
  while (rows.size() < want) {
    const Page p = pages.next(str_cat(rows.size(), " of ", want, " values"));
    if (p.h.type == kDictionaryPage) {
      dict_buf = dictionary_page_body(p, c.codec, have_dict || !rows.empty());
      dict = split_plain_strings(p, dict_buf, static_cast<size_t>(p.h.num_values), "dictionary entry");
      have_dict = true;
      continue;
    }
    const size_t n = static_cast<size_t>(p.h.num_values);
    if (n > want - rows.size())
      p.fail(str_cat("page holds ", n, " values but only ", want - rows.size(), " rows of the row group remain"));
    levels.clear();
    const std::string_view values = split_data_page(p, c.codec, 0, max_def_, n, no_rep, levels, data);
    const size_t non_null = count_defined(p, levels, 0, max_def_);
    if (p.h.type == kDataPageV2 && static_cast<size_t>(p.h.num_nulls) != n - non_null)
      p.fail(str_cat("v2 header says ", p.h.num_nulls, " nulls but the definition levels have ", n - non_null));
    if (dictionary_encoded(p)) {
      if (!have_dict) p.fail("dictionary-encoded page without a dictionary page");
      dictionary_indices(p, values, non_null, dict.size(), indices);
      vals.clear();
      for (uint32_t ix : indices) vals.push_back(dict[ix]);
    } else {
      vals = split_plain_strings(p, values, non_null, "value");
    }
    for (auto v : vals) text_bytes += static_cast<int64_t>(v.size());
    if (text_bytes > limits_.max_row_group_bytes)
      p.fail(str_cat("row group text exceeds the reader's limit of ", limits_.max_row_group_bytes, " bytes"));
    size_t k = 0;  // the values go to the defined rows; the others are null (empty)
    for (size_t r = 0; r < n; ++r) {
      if (max_def_ == 0 || levels[r] == static_cast<uint32_t>(max_def_))
        rows.emplace_back(vals[k++]);
      else
        rows.emplace_back();
    }
  }
  if (stats) {
    stats->chunk_bytes += c.total_compressed_size;
    stats->text_bytes += text_bytes;
  }
  return rows;
}

std::string ParquetReader::schema_string() const {
  static const char* reps[] = {"required", "optional", "repeated"};
  static const char* logical[] = {"",          "STRING", "MAP",     "LIST",    "ENUM", "DECIMAL", "DATE", "TIME",
                                  "TIMESTAMP", "",       "INTEGER", "UNKNOWN", "JSON", "BSON",    "UUID", "FLOAT16"};
  std::string out = "message " + (schema_.empty() ? std::string("schema") : schema_[0].name) + " {\n";
  std::vector<int32_t> left{schema_.empty() ? 0 : schema_[0].num_children};
  size_t next = 1;
  while (!left.empty()) {
    if (left.back() == 0 || next >= schema_.size()) {
      left.pop_back();
      if (!left.empty()) out += std::string(2 * left.size(), ' ') + "}\n";
      continue;
    }
    left.back()--;
    const SchemaNode& s = schema_[next++];
    std::string ind(2 * left.size(), ' ');
    const char* rep = (s.repetition >= 0 && s.repetition < 3) ? reps[s.repetition] : "required";
    std::string ann;
    if (s.logical_type > 0 && s.logical_type < 16 && logical[s.logical_type][0]) {
      ann = str_cat(" (", logical[s.logical_type], ")");
    } else if (s.converted_type == 0) {
      ann = " (UTF8)";
    }
    if (s.num_children > 0) {
      out += ind + rep + " group " + s.name + ann + " {\n";
      left.push_back(s.num_children);
    } else {
      std::string ty = s.type == kByteArray           ? "binary"
                       : s.type == kFixedLenByteArray ? "fixed_len_byte_array"
                                                      : type_name(s.type);
      std::transform(ty.begin(), ty.end(), ty.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      out += ind + rep + " " + ty + " " + s.name + ann + ";\n";
    }
  }
  return out + "}";
}

std::string ParquetReader::codec_name() const {
  if (row_groups_.empty()) return "none";
  std::vector<std::string> names;
  for (const auto& g : row_groups_) {
    std::string n = data::codec_name(g.text.codec);
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ',';
    out += n;
  }
  return out;
}

std::string ParquetReader::encodings_string() const {
  std::set<int32_t> all;
  for (const auto& g : row_groups_) all.insert(g.text.encodings.begin(), g.text.encodings.end());
  std::string out;
  for (int32_t e : all) {
    if (!out.empty()) out += ',';
    out += encoding_name(e);
  }
  return out;
}

}  // namespace nanochat::data
