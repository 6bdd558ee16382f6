#pragma once
// The footer of a Parquet file (FileMetaData, Thrift compact protocol), parsed for ParquetReader
// (data/parquet.h), and the Thrift field readers its page-header parser shares. Internal to data/.
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/data/parquet.h"
#include "nanochat/data/thrift_compact.h"

namespace nanochat::data::parquet_format {

/// Physical type name ("BYTE_ARRAY"; "UNKNOWN" out of range).
const char* type_name(int32_t t);
/// Checks a field's wire type; a mismatch means a corrupt or foreign file (r.fail() throws).
void expect(thrift::Reader& r, thrift::CType got, thrift::CType want, const char* field);
/// An i32 / i64 field's value, after expect().
int32_t read_i32_field(thrift::Reader& r, thrift::CType t, const char* field);
int64_t read_i64_field(thrift::Reader& r, thrift::CType t, const char* field);

/// What the reader keeps of a footer.
struct Footer {
  std::vector<ParquetReader::SchemaNode> schema;  ///< in pre-order, as stored
  int64_t num_rows = 0;                           ///< FileMetaData.num_rows (= sum over row groups)
  std::string created_by;
  std::vector<RowGroupInfo> row_groups;  ///< the "text" column chunk of each
  int max_def = 0;                       ///< maximum definition level of "text"
};

/// Parses the footer `bytes` that start at byte `start` of the file `path`, in passes: the
/// FileMetaData struct, the schema tree's leaves (which one is "text": a REQUIRED or OPTIONAL
/// BYTE_ARRAY column), then every row group's "text" chunk (checked against the schema, `limits`
/// and the data region [4, start)). Throws nanochat::Error "<path>: byte offset <n>: ..." (or
/// "<path>: ..." for a missing or unusable "text" column).
Footer parse_footer(const std::string& bytes, const std::string& path, int64_t start, const ParquetLimits& limits);

/// One column (leaf of the schema tree) as ParquetTable reads it.
struct TableLeaf {
  std::vector<std::string> path;  ///< names from the root's child down to the leaf
  std::vector<size_t> nodes;      ///< their indices in the schema
  int max_def = 0, max_rep = 0;   ///< maximum definition / repetition levels
  int rep_def = 0;                ///< definition level of the innermost repeated node (0: none)
  int32_t type = -1;              ///< physical type
};

/// A footer with every column's chunks (for ParquetTable, parquet_table.h).
struct TableFooter {
  std::vector<ParquetReader::SchemaNode> schema;
  int64_t num_rows = 0;
  std::vector<TableLeaf> leaves;                     ///< in column order
  std::vector<int64_t> group_rows;                   ///< rows per row group
  std::vector<std::vector<ColumnChunkInfo>> chunks;  ///< [row group][column]
};

/// Parses a footer like parse_footer, without picking a "text" column: every column's chunk of
/// every row group is checked and kept. Same errors as parse_footer.
TableFooter parse_table_footer(const std::string& bytes, const std::string& path, int64_t start,
                               const ParquetLimits& limits);

}  // namespace nanochat::data::parquet_format
