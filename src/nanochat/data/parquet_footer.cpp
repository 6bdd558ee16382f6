// The footer (FileMetaData) of a Parquet file, read in passes for ParquetReader (parquet_footer.h).
#include "nanochat/data/parquet_footer.h"

#include <utility>

#include "nanochat/core/error.h"
#include "nanochat/data/parquet_format.h"

namespace nanochat::data::parquet_format {

using thrift::CType;

namespace {

const char* ctype_name(CType t) {
  static const char* names[] = {"stop",   "bool",   "bool", "byte", "i16", "i32",   "i64",
                                "double", "binary", "list", "set",  "map", "struct"};
  return names[static_cast<int>(t)];
}

}  // namespace

const char* type_name(int32_t t) {
  static const char* names[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return (t >= 0 && t < 8) ? names[t] : "UNKNOWN";
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
      case 1:
        m.type = read_i32_field(r, t, "ColumnMetaData.type");
        break;
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
      case 4:
        m.codec = read_i32_field(r, t, "ColumnMetaData.codec");
        break;
      case 5:
        m.num_values = read_i64_field(r, t, "ColumnMetaData.num_values");
        break;
      case 6:
        m.total_uncompressed = read_i64_field(r, t, "ColumnMetaData.total_uncompressed_size");
        break;
      case 7:
        m.total_compressed = read_i64_field(r, t, "ColumnMetaData.total_compressed_size");
        break;
      case 9:
        m.data_page_offset = read_i64_field(r, t, "ColumnMetaData.data_page_offset");
        break;
      case 11:
        m.dictionary_page_offset = read_i64_field(r, t, "ColumnMetaData.dictionary_page_offset");
        m.has_dictionary_page_offset = true;
        break;
      default:
        r.skip(t);
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
      default:
        r.skip(t);
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
      case 2:
        g.total_byte_size = read_i64_field(r, t, "RowGroup.total_byte_size");
        break;
      case 3:
        g.num_rows = read_i64_field(r, t, "RowGroup.num_rows");
        break;
      default:
        r.skip(t);
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
      case 1:
        s.type = read_i32_field(r, t, "SchemaElement.type");
        break;
      case 3:
        s.repetition = read_i32_field(r, t, "SchemaElement.repetition_type");
        break;
      case 4:
        expect(r, t, CType::Binary, "SchemaElement.name");
        s.name = std::string(r.read_binary());
        has_name = true;
        break;
      case 5:
        s.num_children = read_i32_field(r, t, "SchemaElement.num_children");
        break;
      case 6:
        s.converted_type = read_i32_field(r, t, "SchemaElement.converted_type");
        break;
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
      default:
        r.skip(t);
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
      default:
        r.skip(t);
    }
  }
  r.end_struct();
  if (!has_schema || !has_rows || !has_groups)
    ctx.bad("footer (FileMetaData) lacks the schema, num_rows or row_groups");
  if (meta.groups.size() > static_cast<size_t>(INT32_MAX)) ctx.bad("too many row groups");
  return meta;
}

// A leaf (column) of the schema tree: its path and its maximum definition / repetition levels.
struct Leaf {
  std::vector<std::string> path;
  int def, rep;
  size_t node;                // index in the schema
  std::vector<size_t> nodes;  // schema indices from the root's child down to the leaf
};

// Pass 2: the leaves of the schema tree, in column order (the order of every row group's chunks).
std::vector<Leaf> schema_leaves(const std::vector<ParquetReader::SchemaNode>& schema, const FooterCtx& ctx) {
  if (schema.empty()) ctx.bad("empty schema");
  std::vector<Leaf> leaves;
  size_t next = 1;
  std::vector<std::string> cur;
  std::vector<size_t> cur_nodes;
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
      if (!cur_nodes.empty()) cur_nodes.pop_back();
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
      cur_nodes.push_back(next);
      stack.push_back({s.num_children, def, rep});
    } else {
      std::vector<std::string> p = cur;
      p.push_back(s.name);
      std::vector<size_t> nodes = cur_nodes;
      nodes.push_back(next);
      leaves.push_back({std::move(p), def, rep, next, std::move(nodes)});
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
  if (leaf.rep > 0)
    fail(path, ": column \"text\" is REPEATED (a list); only REQUIRED or OPTIONAL string columns are supported");
  return static_cast<size_t>(text_leaf);
}

// Pass 3, for row group g: the chunk of column `leaf` (dotted name `name`), checked against the
// schema (n_leaves columns), the reader's limits and the data region [4, ctx.start). A column that
// is not repeated holds one value (or null) per row; a repeated one at least one level per row.
ColumnChunkInfo column_chunk_info(const RawRowGroup& rg, size_t g, size_t leaf, const std::vector<std::string>& path,
                                  bool repeated, int32_t type, size_t n_leaves, const FooterCtx& ctx) {
  std::string name;
  for (const auto& part : path) name += (name.empty() ? "" : ".") + part;
  std::string where = str_cat("row group ", g, ": ");
  if (rg.columns.size() != n_leaves) {
    ctx.bad(str_cat(where, "has ", rg.columns.size(), " column chunks but the schema has ", n_leaves, " columns"));
  }
  const RawColumnChunk& cc = rg.columns[leaf];
  if (!cc.file_path.empty())
    fail(ctx.path, ": ", where, "column \"", name, "\" is stored in another file (", cc.file_path, "); not supported");
  const RawColumnMeta& m = cc.meta;
  if (!m.present)
    ctx.bad(str_cat(where, "column \"", name, "\" has no ColumnMetaData (encrypted columns are not supported)"));
  if (m.path != path) ctx.bad(str_cat(where, "column chunk path does not match the schema's \"", name, "\" column"));
  if (m.type != type) ctx.bad(str_cat(where, "column chunk type is not ", type_name(type)));
  if (repeated ? m.num_values < rg.num_rows : m.num_values != rg.num_rows) {
    ctx.bad(str_cat(where, "column \"", name, "\" has ", m.num_values, " values but the row group has ", rg.num_rows,
                    " rows"));
  }
  if (m.codec < 0 || m.total_compressed < 0 || m.data_page_offset < 0 || m.total_uncompressed < 0) {
    ctx.bad(where + "column metadata lacks codec, sizes or data_page_offset");
  }
  ColumnChunkInfo c;
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
    ctx.bad(str_cat(where, "column chunk [", c.start, ", +", c.total_compressed_size,
                    ") lies outside the data region [4, ", ctx.start, ")"));
  }
  if (rg.num_rows > 0 && c.total_compressed_size == 0)
    ctx.bad(where + "column chunk of non-empty row group has 0 bytes");
  return c;
}

void check_group_rows(const RawRowGroup& rg, size_t g, const ParquetLimits& limits, const FooterCtx& ctx) {
  std::string where = str_cat("row group ", g, ": ");
  if (rg.num_rows < 0) ctx.bad(where + "missing or negative num_rows");
  if (rg.num_rows > limits.max_row_group_rows) {
    ctx.bad(str_cat(where, rg.num_rows, " rows exceed the reader's limit of ", limits.max_row_group_rows));
  }
}

// Pass 3 for the "text" column of row group g.
RowGroupInfo text_chunk_info(const RawRowGroup& rg, size_t g, size_t text_leaf, size_t n_leaves,
                             const ParquetLimits& limits, const FooterCtx& ctx) {
  check_group_rows(rg, g, limits, ctx);
  RowGroupInfo info;
  info.num_rows = rg.num_rows;
  info.total_byte_size = rg.total_byte_size;
  info.text = column_chunk_info(rg, g, text_leaf, {"text"}, false, kByteArray, n_leaves, ctx);
  return info;
}

}  // namespace

Footer parse_footer(const std::string& bytes, const std::string& path, int64_t start, const ParquetLimits& limits) {
  const FooterCtx ctx{path, start};
  thrift::Reader r(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, start);
  RawFileMeta meta = parse_file_metadata(r, ctx);
  Footer footer;
  footer.schema = std::move(meta.schema);
  footer.num_rows = meta.num_rows;
  footer.created_by = std::move(meta.created_by);

  const std::vector<Leaf> leaves = schema_leaves(footer.schema, ctx);
  const size_t text_leaf = find_text_leaf(leaves, footer.schema, path);
  footer.max_def = leaves[text_leaf].def;

  int64_t total = 0;
  for (size_t g = 0; g < meta.groups.size(); ++g) {
    RowGroupInfo info = text_chunk_info(meta.groups[g], g, text_leaf, leaves.size(), limits, ctx);
    total += info.num_rows;
    if (total > (int64_t(1) << 50)) ctx.bad("row counts overflow");
    footer.row_groups.push_back(std::move(info));
  }
  if (total != footer.num_rows)
    ctx.bad(str_cat("footer says ", footer.num_rows, " rows but its row groups hold ", total));
  return footer;
}

}  // namespace nanochat::data::parquet_format

namespace nanochat::data::parquet_format {

TableFooter parse_table_footer(const std::string& bytes, const std::string& path, int64_t start,
                               const ParquetLimits& limits) {
  const FooterCtx ctx{path, start};
  thrift::Reader r(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, start);
  RawFileMeta meta = parse_file_metadata(r, ctx);
  TableFooter footer;
  footer.schema = std::move(meta.schema);
  footer.num_rows = meta.num_rows;
  const std::vector<Leaf> leaves = schema_leaves(footer.schema, ctx);
  for (const Leaf& l : leaves) {
    int rep_def = 0, d = 0;  // definition level at the innermost repeated node
    for (size_t n : l.nodes) {
      const auto& s = footer.schema[n];
      if (s.repetition == kOptional || s.repetition == kRepeated) d++;
      if (s.repetition == kRepeated) rep_def = d;
    }
    footer.leaves.push_back({l.path, l.nodes, l.def, l.rep, rep_def, footer.schema[l.node].type});
  }
  int64_t total = 0;
  for (size_t g = 0; g < meta.groups.size(); ++g) {
    check_group_rows(meta.groups[g], g, limits, ctx);
    footer.group_rows.push_back(meta.groups[g].num_rows);
    std::vector<ColumnChunkInfo> chunks;
    for (size_t k = 0; k < leaves.size(); ++k) {
      chunks.push_back(column_chunk_info(meta.groups[g], g, k, leaves[k].path, leaves[k].rep > 0,
                                         footer.schema[leaves[k].node].type, leaves.size(), ctx));
    }
    footer.chunks.push_back(std::move(chunks));
    total += meta.groups[g].num_rows;
    if (total > (int64_t(1) << 50)) ctx.bad("row counts overflow");
  }
  if (total != footer.num_rows)
    ctx.bad(str_cat("footer says ", footer.num_rows, " rows but its row groups hold ", total));
  return footer;
}

}  // namespace nanochat::data::parquet_format
