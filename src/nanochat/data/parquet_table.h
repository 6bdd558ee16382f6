#pragma once
// Reads whole columns of any Parquet file, nested ones included, with rows assembled -- the
// datasets of conversations and questions (tasks/registry.h) as the Hugging Face hub publishes
// them: strings, integers, lists of strings (MMLU's choices: list<string>), structs of lists
// (ARC's choices: struct<text: list<string>, label: list<string>>) and lists of structs
// (SmolTalk's messages: list<struct<content: string, role: string>>). Format:
// https://github.com/apache/parquet-format (LogicalTypes.md "Nested types", the Dremel levels).
//
// Columns are named by their logical path: the schema path with the two wrapper levels of a list
// left out (the repeated group and its single child, "list"/"element" as pyarrow writes them,
// "list"/"item" or "bag"/"array" as older writers did): "messages.content", "choices",
// "choices.text". Supported: physical types BYTE_ARRAY, INT32, INT64 and BOOLEAN; at most one
// repeated level per column (a list, not a list of lists); everything else ParquetReader
// (parquet.h) supports (page kinds, encodings, codecs, CRCs). Each call reads the column's chunks
// of every row group. Errors throw nanochat::Error "<path>: ..." naming the column (and the byte
// offset, row group and page of a malformed page); allocation is bounded like ParquetReader's.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/data/parquet.h"

namespace nanochat::data {

/// One column of a file, rows assembled. A column that is not a list has one item per row; a
/// list column has row r's items at [offsets[r], offsets[r+1]) (an empty or null list has none).
struct ParquetColumn {
  std::string name;                  ///< the logical path ("messages.content")
  bool is_list = false;              ///< one repeated level on the path
  bool is_string = false;            ///< BYTE_ARRAY (strings); otherwise integers (ints)
  std::vector<int64_t> offsets;      ///< num_rows + 1 entries, offsets[0] = 0
  std::vector<uint8_t> valid;        ///< per item: 1 a value, 0 null
  std::vector<std::string> strings;  ///< per item when is_string ("" for null)
  std::vector<int64_t> ints;         ///< per item otherwise (0 for null; BOOLEAN as 0/1)
  int64_t num_rows() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t items(int64_t row) const { return offsets[static_cast<size_t>(row) + 1] - offsets[static_cast<size_t>(row)]; }
};

/// A Parquet file's footer, for reading columns whole (see the top of this file).
class ParquetTable {
 public:
  /// Opens `path` and reads its footer. Throws nanochat::Error naming the path when the file
  /// cannot be opened or is not a valid Parquet file.
  explicit ParquetTable(const std::string& path, const ParquetLimits& limits = {});
  ~ParquetTable();
  ParquetTable(const ParquetTable&) = delete;
  ParquetTable& operator=(const ParquetTable&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_rows() const { return num_rows_; }
  /// Logical names of all columns, in file order.
  std::vector<std::string> column_names() const;
  /// The column named `name` (a logical path, above), every row group. Throws nanochat::Error
  /// naming the file and listing the columns when there is none of that name, when its type or
  /// nesting is not supported, or when a page is malformed.
  ParquetColumn read_column(const std::string& name) const;

 private:
  struct Impl;
  std::string path_;
  int64_t num_rows_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanochat::data
