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
#include "nanochat/data/parquet_format.h"
#include "nanochat/data/thrift_compact.h"

namespace nanochat::data {

using thrift::CType;
using namespace parquet_format;

namespace {

const char* type_name(int32_t t) {
  static const char* names[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return (t >= 0 && t < 8) ? names[t] : "UNKNOWN";
}

const char* ctype_name(CType t) {
  static const char* names[] = {"stop", "bool", "bool", "byte", "i16", "i32", "i64", "double", "binary", "list", "set", "map", "struct"};
  return names[static_cast<int>(t)];
}

// Checks a field's wire type; a mismatch means a corrupt or foreign footer.
void expect(thrift::Reader& r, CType got, CType want, const char* field) {
  bool ok = got == want || (want == CType::True && (got == CType::True || got == CType::False)) ||
            (want == CType::List && got == CType::Set);
  if (!ok) r.fail(str_cat("field ", field, " has Thrift type ", ctype_name(got), ", expected ", ctype_name(want)));
}

int32_t read_i32_field(thrift::Reader& r, CType t, const char* field) {
  expect(r, t, CType::I32, field);
  return r.read_i32();
}
int64_t read_i64_field(thrift::Reader& r, CType t, const char* field) {
  expect(r, t, CType::I64, field);
  return r.read_i64();
}

void pread_all(int fd, const std::string& path, int64_t offset, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t k = ::pread(fd, p, n, offset);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(path, ": byte offset ", offset, ": read failed: ", std::strerror(errno));
    }
    if (k == 0) fail(path, ": byte offset ", offset, ": unexpected end of file (was the file truncated while reading?)");
    p += k;
    n -= static_cast<size_t>(k);
    offset += k;
  }
}

uint32_t load_le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

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
  int32_t num_nulls = -1;                // v2
  int32_t num_rows = -1;                 // v2
  int32_t def_bytes = -1, rep_bytes = -1;  // v2
  bool is_compressed = true;             // v2
  bool has_body = false;
};

void parse_data_page_header(thrift::Reader& r, PageHeader& h) {
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1: h.num_values = read_i32_field(r, t, "DataPageHeader.num_values"); break;
      case 2: h.encoding = read_i32_field(r, t, "DataPageHeader.encoding"); break;
      case 3: h.def_encoding = read_i32_field(r, t, "DataPageHeader.definition_level_encoding"); break;
      case 4: h.rep_encoding = read_i32_field(r, t, "DataPageHeader.repetition_level_encoding"); break;
      default: r.skip(t);
    }
  }
  r.end_struct();
  if (h.num_values < 0 || h.encoding < 0) r.fail("data page header lacks num_values or encoding");
  h.has_body = true;
}

void parse_dict_page_header(thrift::Reader& r, PageHeader& h) {
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1: h.num_values = read_i32_field(r, t, "DictionaryPageHeader.num_values"); break;
      case 2: h.encoding = read_i32_field(r, t, "DictionaryPageHeader.encoding"); break;
      default: r.skip(t);
    }
  }
  r.end_struct();
  if (h.num_values < 0 || h.encoding < 0) r.fail("dictionary page header lacks num_values or encoding");
  h.has_body = true;
}

void parse_data_page_v2_header(thrift::Reader& r, PageHeader& h) {
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1: h.num_values = read_i32_field(r, t, "DataPageHeaderV2.num_values"); break;
      case 2: h.num_nulls = read_i32_field(r, t, "DataPageHeaderV2.num_nulls"); break;
      case 3: h.num_rows = read_i32_field(r, t, "DataPageHeaderV2.num_rows"); break;
      case 4: h.encoding = read_i32_field(r, t, "DataPageHeaderV2.encoding"); break;
      case 5: h.def_bytes = read_i32_field(r, t, "DataPageHeaderV2.definition_levels_byte_length"); break;
      case 6: h.rep_bytes = read_i32_field(r, t, "DataPageHeaderV2.repetition_levels_byte_length"); break;
      case 7:
        expect(r, t, CType::True, "DataPageHeaderV2.is_compressed");
        h.is_compressed = r.read_bool(t);
        break;
      default: r.skip(t);
    }
  }
  r.end_struct();
  if (h.num_values < 0 || h.num_nulls < 0 || h.encoding < 0 || h.def_bytes < 0 || h.rep_bytes < 0 || h.num_nulls > h.num_values) {
    r.fail("data page v2 header has missing or negative fields");
  }
  h.has_body = true;
}

PageHeader parse_page_header(thrift::Reader& r) {
  PageHeader h;
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1: h.type = read_i32_field(r, t, "PageHeader.type"); break;
      case 2: h.uncompressed_size = read_i32_field(r, t, "PageHeader.uncompressed_page_size"); break;
      case 3: h.compressed_size = read_i32_field(r, t, "PageHeader.compressed_page_size"); break;
      case 4:
        h.has_crc = true;
        h.crc = static_cast<uint32_t>(read_i32_field(r, t, "PageHeader.crc"));
        break;
      case 5:
        expect(r, t, CType::Struct, "PageHeader.data_page_header");
        if (h.type == kDataPage) parse_data_page_header(r, h); else r.skip(t);
        break;
      case 7:
        expect(r, t, CType::Struct, "PageHeader.dictionary_page_header");
        if (h.type == kDictionaryPage) parse_dict_page_header(r, h); else r.skip(t);
        break;
      case 8:
        expect(r, t, CType::Struct, "PageHeader.data_page_header_v2");
        if (h.type == kDataPageV2) parse_data_page_v2_header(r, h); else r.skip(t);
        break;
      default: r.skip(t);
    }
  }
  r.end_struct();
  if (h.type < 0 || h.uncompressed_size < 0 || h.compressed_size < 0) r.fail("page header lacks type or sizes (or they are negative)");
  return h;
}

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

int bit_width(int max_level) {
  int w = 0;
  while ((1 << w) <= max_level) ++w;
  return w;
}

}  // namespace

std::string encoding_name(int32_t e) {
  switch (e) {
    case kPlain: return "PLAIN";
    case 1: return "GROUP_VAR_INT";
    case kPlainDictionary: return "PLAIN_DICTIONARY";
    case kRle: return "RLE";
    case kBitPacked: return "BIT_PACKED";
    case kDeltaBinaryPacked: return "DELTA_BINARY_PACKED";
    case kDeltaLengthByteArray: return "DELTA_LENGTH_BYTE_ARRAY";
    case kDeltaByteArray: return "DELTA_BYTE_ARRAY";
    case kRleDictionary: return "RLE_DICTIONARY";
    case kByteStreamSplit: return "BYTE_STREAM_SPLIT";
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

namespace {

// Raw footer structures, before the text column is picked out.
struct RawColumnMeta {
  bool present = false;
  int32_t type = -1;
  std::vector<int32_t> encodings;
  std::vector<std::string> path;
  int32_t codec = -1;
  int64_t num_values = -1, total_uncompressed = -1, total_compressed = -1, data_page_offset = -1;
  int64_t dictionary_page_offset = -1;
  bool has_dictionary_page_offset = false;
};
struct RawColumnChunk {
  std::string file_path;
  RawColumnMeta meta;
};
struct RawRowGroup {
  std::vector<RawColumnChunk> columns;
  int64_t total_byte_size = -1, num_rows = -1;
};

RawColumnMeta parse_column_meta(thrift::Reader& r) {
  RawColumnMeta m;
  m.present = true;
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1: m.type = read_i32_field(r, t, "ColumnMetaData.type"); break;
      case 2: {
        expect(r, t, CType::List, "ColumnMetaData.encodings");
        CType e;
        int64_t n;
        r.read_list_header(e, n);
        if (e != CType::I32) r.fail("ColumnMetaData.encodings is not a list of i32");
        for (int64_t i = 0; i < n; ++i) m.encodings.push_back(r.read_i32());
        break;
      }
      case 3: {
        expect(r, t, CType::List, "ColumnMetaData.path_in_schema");
        CType e;
        int64_t n;
        r.read_list_header(e, n);
        if (e != CType::Binary) r.fail("ColumnMetaData.path_in_schema is not a list of strings");
        for (int64_t i = 0; i < n; ++i) m.path.emplace_back(r.read_binary());
        break;
      }
      case 4: m.codec = read_i32_field(r, t, "ColumnMetaData.codec"); break;
      case 5: m.num_values = read_i64_field(r, t, "ColumnMetaData.num_values"); break;
      case 6: m.total_uncompressed = read_i64_field(r, t, "ColumnMetaData.total_uncompressed_size"); break;
      case 7: m.total_compressed = read_i64_field(r, t, "ColumnMetaData.total_compressed_size"); break;
      case 9: m.data_page_offset = read_i64_field(r, t, "ColumnMetaData.data_page_offset"); break;
      case 11:
        m.dictionary_page_offset = read_i64_field(r, t, "ColumnMetaData.dictionary_page_offset");
        m.has_dictionary_page_offset = true;
        break;
      default: r.skip(t);
    }
  }
  r.end_struct();
  return m;
}

RawColumnChunk parse_column_chunk(thrift::Reader& r) {
  RawColumnChunk c;
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1:
        expect(r, t, CType::Binary, "ColumnChunk.file_path");
        c.file_path = std::string(r.read_binary());
        break;
      case 3:
        expect(r, t, CType::Struct, "ColumnChunk.meta_data");
        c.meta = parse_column_meta(r);
        break;
      default: r.skip(t);
    }
  }
  r.end_struct();
  return c;
}

RawRowGroup parse_row_group(thrift::Reader& r) {
  RawRowGroup g;
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1: {
        expect(r, t, CType::List, "RowGroup.columns");
        CType e;
        int64_t n;
        r.read_list_header(e, n);
        if (e != CType::Struct) r.fail("RowGroup.columns is not a list of structs");
        for (int64_t i = 0; i < n; ++i) g.columns.push_back(parse_column_chunk(r));
        break;
      }
      case 2: g.total_byte_size = read_i64_field(r, t, "RowGroup.total_byte_size"); break;
      case 3: g.num_rows = read_i64_field(r, t, "RowGroup.num_rows"); break;
      default: r.skip(t);
    }
  }
  r.end_struct();
  return g;
}

ParquetReader::SchemaNode parse_schema_element(thrift::Reader& r) {
  ParquetReader::SchemaNode s;
  bool has_name = false;
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1: s.type = read_i32_field(r, t, "SchemaElement.type"); break;
      case 3: s.repetition = read_i32_field(r, t, "SchemaElement.repetition_type"); break;
      case 4:
        expect(r, t, CType::Binary, "SchemaElement.name");
        s.name = std::string(r.read_binary());
        has_name = true;
        break;
      case 5: s.num_children = read_i32_field(r, t, "SchemaElement.num_children"); break;
      case 6: s.converted_type = read_i32_field(r, t, "SchemaElement.converted_type"); break;
      case 10: {
        expect(r, t, CType::Struct, "SchemaElement.logicalType");
        // A union: the id of its single set field says which logical type (1 = STRING).
        r.begin_struct();
        int16_t lid;
        CType lt;
        while (r.next_field(lid, lt)) {
          s.logical_type = lid;
          r.skip(lt);
        }
        r.end_struct();
        break;
      }
      default: r.skip(t);
    }
  }
  r.end_struct();
  if (!has_name) r.fail("schema element without a name");
  if (s.num_children < 0) r.fail("schema element with a negative number of children");
  return s;
}

// The footer being read: names its first byte in errors ("<path>: byte offset <n>: <what>").
struct FooterCtx {
  const std::string& path;
  int64_t start;
  [[noreturn]] void bad(const std::string& what) const { fail(path, ": byte offset ", start, ": ", what); }
};

// FileMetaData as read from the footer, before the text column is picked out.
struct RawFileMeta {
  std::vector<ParquetReader::SchemaNode> schema;
  int64_t num_rows = 0;
  std::vector<RawRowGroup> groups;
  std::string created_by;
};

// Pass 1: the FileMetaData struct (schema, num_rows, row_groups, created_by; the rest skipped).
RawFileMeta parse_file_metadata(thrift::Reader& r, const FooterCtx& ctx) {
  RawFileMeta meta;
  bool has_schema = false, has_rows = false, has_groups = false;
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 2: {
        expect(r, t, CType::List, "FileMetaData.schema");
        CType e;
        int64_t n;
        r.read_list_header(e, n);
        if (e != CType::Struct) r.fail("FileMetaData.schema is not a list of structs");
        for (int64_t i = 0; i < n; ++i) meta.schema.push_back(parse_schema_element(r));
        has_schema = true;
        break;
      }
      case 3:
        meta.num_rows = read_i64_field(r, t, "FileMetaData.num_rows");
        has_rows = true;
        break;
      case 4: {
        expect(r, t, CType::List, "FileMetaData.row_groups");
        CType e;
        int64_t n;
        r.read_list_header(e, n);
        if (e != CType::Struct) r.fail("FileMetaData.row_groups is not a list of structs");
        for (int64_t i = 0; i < n; ++i) meta.groups.push_back(parse_row_group(r));
        has_groups = true;
        break;
      }
      case 6:
        expect(r, t, CType::Binary, "FileMetaData.created_by");
        meta.created_by = std::string(r.read_binary());
        break;
      default: r.skip(t);
    }
  }
  r.end_struct();
  if (!has_schema || !has_rows || !has_groups) ctx.bad("footer (FileMetaData) lacks the schema, num_rows or row_groups");
  if (meta.groups.size() > static_cast<size_t>(INT32_MAX)) ctx.bad("too many row groups");
  return meta;
}

// A leaf (column) of the schema tree: its path and its maximum definition / repetition levels.
struct Leaf {
  std::vector<std::string> path;
  int def, rep;
  size_t node;  // index in the schema
};

// Pass 2: the leaves of the schema tree, in column order (the order of every row group's chunks).
std::vector<Leaf> schema_leaves(const std::vector<ParquetReader::SchemaNode>& schema, const FooterCtx& ctx) {
  if (schema.empty()) ctx.bad("empty schema");
  std::vector<Leaf> leaves;
  size_t next = 1;
  std::vector<std::string> cur;
  // Iterative depth-first walk (the schema comes in pre-order); stack = children left per group.
  struct Frame {
    int32_t left;
    int def, rep;
  };
  std::vector<Frame> stack{{schema[0].num_children, 0, 0}};
  while (!stack.empty()) {
    if (stack.back().left == 0) {
      stack.pop_back();
      if (!cur.empty()) cur.pop_back();
      continue;
    }
    stack.back().left--;
    if (next >= schema.size()) ctx.bad("schema tree declares more children than it has elements");
    const ParquetReader::SchemaNode& s = schema[next];
    int def = stack.back().def, rep = stack.back().rep;
    if (s.repetition == kOptional) def++;
    if (s.repetition == kRepeated) def++, rep++;
    if (s.num_children > 0) {
      if (stack.size() > 100) ctx.bad("schema nested too deeply");
      cur.push_back(s.name);
      stack.push_back({s.num_children, def, rep});
    } else {
      std::vector<std::string> p = cur;
      p.push_back(s.name);
      leaves.push_back({std::move(p), def, rep, next});
    }
    next++;
  }
  if (next != schema.size()) ctx.bad("schema has elements outside the tree of its root");
  return leaves;
}

// The leaf whose path is ["text"], checked to be a REQUIRED or OPTIONAL BYTE_ARRAY column.
size_t find_text_leaf(const std::vector<Leaf>& leaves, const std::vector<ParquetReader::SchemaNode>& schema,
                      const std::string& path) {
  int text_leaf = -1;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].path.size() == 1 && leaves[i].path[0] == "text") text_leaf = static_cast<int>(i);
  }
  if (text_leaf < 0) {
    for (size_t i = 1; i < schema.size(); ++i) {
      if (schema[i].name == "text" && schema[i].num_children > 0) {
        fail(path, ": column \"text\" is a group (nested), not a string column");
      }
    }
    std::string names;
    for (const auto& l : leaves) {
      std::string n;
      for (const auto& part : l.path) n += (n.empty() ? "" : ".") + part;
      names += (names.empty() ? "" : ", ") + n;
    }
    fail(path, ": has no column named \"text\" (columns: ", names.empty() ? "none" : names,
         "); nanochat shards store documents in a string column \"text\"");
  }
  const Leaf& leaf = leaves[static_cast<size_t>(text_leaf)];
  const ParquetReader::SchemaNode& tn = schema[leaf.node];
  if (tn.type != kByteArray) {
    fail(path, ": column \"text\" has physical type ", type_name(tn.type), "; expected BYTE_ARRAY (a string column)");
  }
  if (leaf.rep > 0) fail(path, ": column \"text\" is REPEATED (a list); only REQUIRED or OPTIONAL string columns are supported");
  return static_cast<size_t>(text_leaf);
}

// Pass 3, for row group g: its "text" column chunk, checked against the schema (n_leaves columns),
// the reader's limits and the data region [4, ctx.start).
RowGroupInfo text_chunk_info(const RawRowGroup& rg, size_t g, size_t text_leaf, size_t n_leaves,
                             const ParquetLimits& limits, const FooterCtx& ctx) {
  std::string where = str_cat("row group ", g, ": ");
  if (rg.num_rows < 0) ctx.bad(where + "missing or negative num_rows");
  if (rg.num_rows > limits.max_row_group_rows) {
    ctx.bad(str_cat(where, rg.num_rows, " rows exceed the reader's limit of ", limits.max_row_group_rows));
  }
  if (rg.columns.size() != n_leaves) {
    ctx.bad(str_cat(where, "has ", rg.columns.size(), " column chunks but the schema has ", n_leaves, " columns"));
  }
  const RawColumnChunk& cc = rg.columns[text_leaf];
  if (!cc.file_path.empty()) fail(ctx.path, ": ", where, "column \"text\" is stored in another file (", cc.file_path, "); not supported");
  const RawColumnMeta& m = cc.meta;
  if (!m.present) ctx.bad(where + "column \"text\" has no ColumnMetaData (encrypted columns are not supported)");
  if (m.path != std::vector<std::string>{"text"}) ctx.bad(where + "column chunk path does not match the schema's \"text\" column");
  if (m.type != kByteArray) ctx.bad(where + "column chunk type is not BYTE_ARRAY");
  if (m.num_values != rg.num_rows) {
    ctx.bad(str_cat(where, "column \"text\" has ", m.num_values, " values but the row group has ", rg.num_rows, " rows"));
  }
  if (m.codec < 0 || m.total_compressed < 0 || m.data_page_offset < 0 || m.total_uncompressed < 0) {
    ctx.bad(where + "column metadata lacks codec, sizes or data_page_offset");
  }
  RowGroupInfo info;
  info.num_rows = rg.num_rows;
  info.total_byte_size = rg.total_byte_size;
  ColumnChunkInfo& c = info.text;
  c.codec = m.codec;
  c.encodings = m.encodings;
  c.num_values = m.num_values;
  c.total_compressed_size = m.total_compressed;
  c.total_uncompressed_size = m.total_uncompressed;
  c.data_page_offset = m.data_page_offset;
  c.start = m.data_page_offset;
  if (m.has_dictionary_page_offset && m.dictionary_page_offset > 0 && m.dictionary_page_offset < m.data_page_offset) {
    c.dictionary_page_offset = m.dictionary_page_offset;
    c.start = m.dictionary_page_offset;
  }
  if (rg.num_rows > 0 && (c.start < 4 || c.total_compressed_size > ctx.start - c.start)) {
    ctx.bad(str_cat(where, "column chunk [", c.start, ", +", c.total_compressed_size, ") lies outside the data region [4, ",
                    ctx.start, ")"));
  }
  if (rg.num_rows > 0 && c.total_compressed_size == 0) ctx.bad(where + "column chunk of non-empty row group has 0 bytes");
  return info;
}

}  // namespace

// Finds and checks the footer (magic bytes, length), then reads it in passes: the FileMetaData,
// the schema (which leaf is "text"), and the "text" chunk of every row group.
void ParquetReader::read_footer() {
  if (file_size_ < 12) fail(path_, ": file is ", file_size_, " bytes, too small to be a Parquet file (needs at least 12)");
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
  std::string footer(footer_len, '\0');
  pread_all(fd_, path_, footer_start_, footer.data(), footer_len);

  const FooterCtx ctx{path_, footer_start_};
  thrift::Reader r(reinterpret_cast<const uint8_t*>(footer.data()), footer.size(), path_, footer_start_);
  RawFileMeta meta = parse_file_metadata(r, ctx);
  schema_ = std::move(meta.schema);
  num_rows_ = meta.num_rows;
  created_by_ = std::move(meta.created_by);

  const std::vector<Leaf> leaves = schema_leaves(schema_, ctx);
  const size_t text_leaf = find_text_leaf(leaves, schema_, path_);
  max_def_ = leaves[text_leaf].def;

  int64_t total = 0;
  for (size_t g = 0; g < meta.groups.size(); ++g) {
    RowGroupInfo info = text_chunk_info(meta.groups[g], g, text_leaf, leaves.size(), limits_, ctx);
    total += info.num_rows;
    if (total > (int64_t(1) << 50)) fail_at(footer_start_, "row counts overflow");
    row_groups_.push_back(std::move(info));
  }
  if (total != num_rows_) {
    fail_at(footer_start_, str_cat("footer says ", num_rows_, " rows but its row groups hold ", total));
  }
}

int64_t ParquetReader::row_group_num_rows(int i) const { return row_group(i).num_rows; }

const RowGroupInfo& ParquetReader::row_group(int i) const {
  if (i < 0 || i >= num_row_groups()) fail(path_, ": row group ", i, " does not exist (the file has ", num_row_groups(), ")");
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
      page_fail(str_cat("page of ", h.compressed_size, " bytes runs past the end of its column chunk (", size - body, " bytes left)"));
    }
    if (h.compressed_size > limits_.max_page_bytes || h.uncompressed_size > limits_.max_page_bytes) {
      page_fail(str_cat("page size ", std::max(h.compressed_size, h.uncompressed_size), " exceeds the reader's limit of ", limits_.max_page_bytes, " bytes"));
    }
    std::string_view payload(chunk.data() + body, static_cast<size_t>(h.compressed_size));
    pos = body + static_cast<size_t>(h.compressed_size);
    page_no++;
    if (stats) {
      stats->pages++;
      stats->crc_pages += h.has_crc;
    }
    if (h.has_crc) {
      uint32_t crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
      if (crc != h.crc) page_fail(str_cat("page CRC mismatch (stored ", h.crc, ", computed ", crc, "): the page is corrupt"));
    }
    if (h.type == kIndexPage) continue;
    if (h.type != kDataPage && h.type != kDataPageV2 && h.type != kDictionaryPage) page_fail(str_cat("unknown page type ", h.type));
    if (!h.has_body) page_fail("page header lacks its type-specific header");
    (void)body_off;

    if (h.type == kDictionaryPage) {
      if (have_dict || !rows.empty()) page_fail("unexpected second dictionary page (or dictionary page after data pages)");
      if (h.encoding != kPlain && h.encoding != kPlainDictionary) page_fail("dictionary page encoding " + encoding_name(h.encoding) + " is not supported");
      dict_buf = decompress(c.codec, payload, static_cast<size_t>(h.uncompressed_size), where);
      if (static_cast<uint64_t>(h.num_values) > dict_buf.size() / 4) page_fail(str_cat("dictionary claims ", h.num_values, " values in ", dict_buf.size(), " bytes"));
      dict.reserve(static_cast<size_t>(h.num_values));
      size_t p = 0;
      for (int32_t k = 0; k < h.num_values; ++k) {
        if (dict_buf.size() - p < 4) page_fail(str_cat("dictionary entry ", k, " is truncated"));
        uint32_t len = load_le32(reinterpret_cast<const uint8_t*>(dict_buf.data() + p));
        p += 4;
        if (len > dict_buf.size() - p) page_fail(str_cat("dictionary entry ", k, " of ", len, " bytes runs past the page"));
        dict.emplace_back(dict_buf.data() + p, len);
        p += len;
      }
      have_dict = true;
      continue;
    }

    // ---- data page (v1 or v2) ----
    const size_t n = static_cast<size_t>(h.num_values);
    if (n > want - rows.size()) page_fail(str_cat("page holds ", n, " values but only ", want - rows.size(), " rows of the row group remain"));
    std::string data;        // decompressed levels + values (v1) or values only (v2)
    std::string_view values;  // the encoded values
    levels.clear();
    const int bw = bit_width(max_def_);
    if (h.type == kDataPage) {
      data = decompress(c.codec, payload, static_cast<size_t>(h.uncompressed_size), where);
      size_t p = 0;
      if (max_def_ > 0) {
        if (h.def_encoding != kRle) page_fail("definition level encoding " + encoding_name(h.def_encoding) + " is not supported (only RLE)");
        if (data.size() < 4) page_fail("definition levels length is truncated");
        uint32_t len = load_le32(reinterpret_cast<const uint8_t*>(data.data()));
        if (len > data.size() - 4) page_fail(str_cat("definition levels length ", len, " exceeds the page's ", data.size() - 4, " bytes"));
        decode_hybrid(reinterpret_cast<const uint8_t*>(data.data()) + 4, len, bw, n, levels,
                      [&](const std::string& w) { page_fail("definition levels: " + w); });
        p = 4 + len;
      }
      values = std::string_view(data).substr(p);
    } else {  // v2: [rep levels][def levels] uncompressed, then values (compressed if is_compressed)
      const uint64_t lv = static_cast<uint64_t>(h.rep_bytes) + static_cast<uint64_t>(h.def_bytes);
      if (lv > payload.size() || lv > static_cast<uint64_t>(h.uncompressed_size)) page_fail("v2 level lengths exceed the page size");
      if (h.rep_bytes != 0) page_fail("v2 page has repetition levels but column \"text\" is not repeated");
      if (max_def_ > 0) {
        decode_hybrid(reinterpret_cast<const uint8_t*>(payload.data()) + h.rep_bytes, static_cast<size_t>(h.def_bytes), bw, n, levels,
                      [&](const std::string& w) { page_fail("definition levels: " + w); });
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
        if (l > static_cast<uint32_t>(max_def_)) page_fail(str_cat("definition level ", l, " exceeds the maximum ", max_def_));
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
        if (len > values.size() - p) page_fail(str_cat("value ", k, " of ", len, " bytes runs past the end of the page"));
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
          if (ix >= dict.size()) page_fail(str_cat("dictionary index ", ix, " out of range (dictionary has ", dict.size(), " entries)"));
          vals.push_back(dict[ix]);
        }
      }
    } else {
      page_fail("value encoding " + encoding_name(h.encoding) + " is not supported (supported: PLAIN, PLAIN_DICTIONARY, RLE_DICTIONARY)");
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
  static const char* logical[] = {"", "STRING", "MAP", "LIST", "ENUM", "DECIMAL", "DATE", "TIME", "TIMESTAMP", "", "INTEGER", "UNKNOWN", "JSON", "BSON", "UUID", "FLOAT16"};
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
      std::string ty = s.type == kByteArray ? "binary" : s.type == kFixedLenByteArray ? "fixed_len_byte_array" : type_name(s.type);
      std::transform(ty.begin(), ty.end(), ty.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
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
