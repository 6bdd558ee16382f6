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
  const auto* base = reinterpret_cast<const uint8_t*>(chunk.data());
  const size_t size = chunk.size();
  const size_t want = static_cast<size_t>(rg.num_rows);
  rows.reserve(std::min(want, size));

  std::string dict_buf;
  std::vector<std::string_view> dict;
  bool have_dict = false;
  int64_t text_bytes = 0;
  std::vector<uint32_t> levels, indices;
  size_t pos = 0;
  int page_no = 0;
  while (rows.size() < want) {
    const int64_t page_off = c.start + static_cast<int64_t>(pos);
    if (pos >= size) {
      fail_at(page_off, str_cat("row group ", i, ": column chunk ends after ", rows.size(), " of ", want, " values"));
    }
    thrift::Reader hr(base + pos, size - pos, path_, page_off);
    PageHeader h = parse_page_header(hr);
    const size_t body = pos + hr.pos();
    const int64_t body_off = c.start + static_cast<int64_t>(body);
    const std::string where = str_cat(path_, ": byte offset ", page_off, " (row group ", i, ", page ", page_no, ")");
    auto page_fail = [&](const std::string& what) -> void { fail(where, ": ", what); };
    if (static_cast<size_t>(h.compressed_size) > size - body) {
      page_fail(str_cat("page of ", h.compressed_size, " bytes runs past the end of its column chunk (", size - body,
                        " bytes left)"));
    }
    if (h.compressed_size > limits_.max_page_bytes || h.uncompressed_size > limits_.max_page_bytes) {
      page_fail(str_cat("page size ", std::max(h.compressed_size, h.uncompressed_size),
                        " exceeds the reader's limit of ", limits_.max_page_bytes, " bytes"));
    }
    std::string_view payload(chunk.data() + body, static_cast<size_t>(h.compressed_size));
    pos = body + static_cast<size_t>(h.compressed_size);
    page_no++;
    if (stats) {
      stats->pages++;
      stats->crc_pages += h.has_crc;
    }
    if (h.has_crc) {
      uint32_t crc = static_cast<uint32_t>(
          crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
      if (crc != h.crc)
        page_fail(str_cat("page CRC mismatch (stored ", h.crc, ", computed ", crc, "): the page is corrupt"));
    }
    if (h.type == kIndexPage) continue;
    if (h.type != kDataPage && h.type != kDataPageV2 && h.type != kDictionaryPage)
      page_fail(str_cat("unknown page type ", h.type));
    if (!h.has_body) page_fail("page header lacks its type-specific header");
    (void)body_off;

    if (h.type == kDictionaryPage) {
      if (have_dict || !rows.empty())
        page_fail("unexpected second dictionary page (or dictionary page after data pages)");
      if (h.encoding != kPlain && h.encoding != kPlainDictionary)
        page_fail("dictionary page encoding " + encoding_name(h.encoding) + " is not supported");
      dict_buf = decompress(c.codec, payload, static_cast<size_t>(h.uncompressed_size), where);
      if (static_cast<uint64_t>(h.num_values) > dict_buf.size() / 4)
        page_fail(str_cat("dictionary claims ", h.num_values, " values in ", dict_buf.size(), " bytes"));
      dict.reserve(static_cast<size_t>(h.num_values));
      size_t p = 0;
      for (int32_t k = 0; k < h.num_values; ++k) {
        if (dict_buf.size() - p < 4) page_fail(str_cat("dictionary entry ", k, " is truncated"));
        uint32_t len = load_le32(reinterpret_cast<const uint8_t*>(dict_buf.data() + p));
        p += 4;
        if (len > dict_buf.size() - p)
          page_fail(str_cat("dictionary entry ", k, " of ", len, " bytes runs past the page"));
        dict.emplace_back(dict_buf.data() + p, len);
        p += len;
      }
      have_dict = true;
      continue;
    }

    // ---- data page (v1 or v2) ----
    const size_t n = static_cast<size_t>(h.num_values);
    if (n > want - rows.size())
      page_fail(str_cat("page holds ", n, " values but only ", want - rows.size(), " rows of the row group remain"));
    std::string data;         // decompressed levels + values (v1) or values only (v2)
    std::string_view values;  // the encoded values
    levels.clear();
    const int bw = bit_width(max_def_);
    if (h.type == kDataPage) {
      data = decompress(c.codec, payload, static_cast<size_t>(h.uncompressed_size), where);
      size_t p = 0;
      if (max_def_ > 0) {
        if (h.def_encoding != kRle)
          page_fail("definition level encoding " + encoding_name(h.def_encoding) + " is not supported (only RLE)");
        if (data.size() < 4) page_fail("definition levels length is truncated");
        uint32_t len = load_le32(reinterpret_cast<const uint8_t*>(data.data()));
        if (len > data.size() - 4)
          page_fail(str_cat("definition levels length ", len, " exceeds the page's ", data.size() - 4, " bytes"));
        decode_hybrid(reinterpret_cast<const uint8_t*>(data.data()) + 4, len, bw, n, levels,
                      [&](const std::string& w) { page_fail("definition levels: " + w); });
        p = 4 + len;
      }
      values = std::string_view(data).substr(p);
    } else {  // v2: [rep levels][def levels] uncompressed, then values (compressed if is_compressed)
      const uint64_t lv = static_cast<uint64_t>(h.rep_bytes) + static_cast<uint64_t>(h.def_bytes);
      if (lv > payload.size() || lv > static_cast<uint64_t>(h.uncompressed_size))
        page_fail("v2 level lengths exceed the page size");
      if (h.rep_bytes != 0) page_fail("v2 page has repetition levels but column \"text\" is not repeated");
      if (max_def_ > 0) {
        decode_hybrid(reinterpret_cast<const uint8_t*>(payload.data()) + h.rep_bytes, static_cast<size_t>(h.def_bytes),
                      bw, n, levels, [&](const std::string& w) { page_fail("definition levels: " + w); });
      } else if (h.def_bytes != 0) {
        page_fail("v2 page has definition levels but column \"text\" is REQUIRED");
      }
      std::string_view enc = payload.substr(static_cast<size_t>(lv));
      size_t raw = static_cast<size_t>(h.uncompressed_size) - static_cast<size_t>(lv);
      if (h.is_compressed && c.codec != static_cast<int32_t>(Codec::Uncompressed)) {
        data = decompress(c.codec, enc, raw, where);
      } else {
        if (enc.size() != raw) page_fail("uncompressed v2 page: sizes in the header disagree");
        data = std::string(enc);
      }
      values = data;
    }
    size_t non_null = n;
    if (max_def_ > 0) {
      non_null = 0;
      for (uint32_t l : levels) {
        if (l > static_cast<uint32_t>(max_def_))
          page_fail(str_cat("definition level ", l, " exceeds the maximum ", max_def_));
        non_null += (l == static_cast<uint32_t>(max_def_));
      }
    }
    if (h.type == kDataPageV2 && static_cast<size_t>(h.num_nulls) != n - non_null) {
      page_fail(str_cat("v2 header says ", h.num_nulls, " nulls but the definition levels have ", n - non_null));
    }
    // Decode the non-null values, then place them at the defined rows.
    std::vector<std::string_view> vals;
    vals.reserve(std::min(non_null, values.size() + 1));
    if (h.encoding == kPlain) {
      size_t p = 0;
      for (size_t k = 0; k < non_null; ++k) {
        if (values.size() - p < 4) page_fail(str_cat("value ", k, " of ", non_null, ": length prefix is truncated"));
        uint32_t len = load_le32(reinterpret_cast<const uint8_t*>(values.data() + p));
        p += 4;
        if (len > values.size() - p)
          page_fail(str_cat("value ", k, " of ", len, " bytes runs past the end of the page"));
        vals.push_back(values.substr(p, len));
        p += len;
      }
    } else if (h.encoding == kPlainDictionary || h.encoding == kRleDictionary) {
      if (!have_dict) page_fail("dictionary-encoded page without a dictionary page");
      if (non_null > 0) {
        if (values.empty()) page_fail("dictionary-encoded page lacks its bit width byte");
        int ibw = static_cast<uint8_t>(values[0]);
        indices.clear();
        decode_hybrid(reinterpret_cast<const uint8_t*>(values.data()) + 1, values.size() - 1, ibw, non_null, indices,
                      [&](const std::string& w) { page_fail("dictionary indices: " + w); });
        for (uint32_t ix : indices) {
          if (ix >= dict.size())
            page_fail(str_cat("dictionary index ", ix, " out of range (dictionary has ", dict.size(), " entries)"));
          vals.push_back(dict[ix]);
        }
      }
    } else {
      page_fail("value encoding " + encoding_name(h.encoding) +
                " is not supported (supported: PLAIN, PLAIN_DICTIONARY, RLE_DICTIONARY)");
    }
    for (auto v : vals) text_bytes += static_cast<int64_t>(v.size());
    if (text_bytes > limits_.max_row_group_bytes) {
      page_fail(str_cat("row group text exceeds the reader's limit of ", limits_.max_row_group_bytes, " bytes"));
    }
    if (max_def_ == 0) {
      for (auto v : vals) rows.emplace_back(v);
    } else {
      size_t k = 0;
      for (uint32_t l : levels) {
        if (l == static_cast<uint32_t>(max_def_))
          rows.emplace_back(vals[k++]);
        else
          rows.emplace_back();
      }
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
