#pragma once
// Datasets of the Hugging Face hub as nanochat keeps them on disk (nanochat tasks/common.py
// load_hub_dataset and HubDataset, commit 92d63d4):
//
//   $NANOCHAT_BASE_DIR/task_data/<owner>--<name>/<subset>/<split>/
//     manifest.json      ["00000.parquet", "00001.parquet", ...]  (written last: the download is
//                        complete when it exists)
//     00000.parquet ...  the hub's parquet export of that subset and split, in the listing's order
//
// The files are fetched by `nanochat data download --tasks` (data/hub_download.h) or by nanochat
// itself, so a machine that ran nanochat reuses them. A table is the shards' rows in manifest
// order; nanochat reads every task through HubDataset.shuffle(42), i.e. row i of the task is row
// np.random.default_rng(42).permutation(rows)[i] of the table (core/np_random.h).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nanochat/data/parquet_table.h"

namespace nanochat::tasks {

/// One dataset of the hub that a task reads.
struct HubSource {
  std::string repo;    ///< "cais/mmlu"
  std::string subset;  ///< "all" ("default" when the dataset has none)
  std::string split;   ///< "test"
};

/// <base>/task_data/<repo with "/" -> "--">/<subset>/<split>; base "" means nanochat::base_dir().
std::string hub_dataset_dir(const HubSource& src, const std::string& base = "");

/// The command that fetches a task's data, for error messages: "nanochat data download --tasks
/// <spec>" (spec: a task name, or NAME/SUBSET/SPLIT for one dataset of it).
std::string hub_download_command(const std::string& spec);

/// The named columns of every shard of a downloaded dataset, concatenated in manifest order.
class HubTable {
 public:
  /// Reads <dir>/manifest.json and the listed shards' `columns` (logical names,
  /// data/parquet_table.h). Throws nanochat::Error naming the manifest and `download_command`
  /// when the dataset is not downloaded, and naming the shard when a file is missing, not Parquet
  /// or lacks a column.
  HubTable(const std::string& dir, const std::vector<std::string>& columns, const std::string& download_command);

  int64_t num_rows() const { return rows_; }
  const data::ParquetColumn& column(const std::string& name) const;
  /// Where physical row `row` comes from: "<shard path>: row <r>" (for errors about its content).
  std::string where(int64_t row) const;

 private:
  std::map<std::string, data::ParquetColumn> columns_;
  std::vector<std::string> shards_;
  std::vector<int64_t> shard_start_;  // first row of each shard
  int64_t rows_ = 0;
};

/// Row accessors of a column; throw nanochat::Error naming table.where(row) when the value is null
/// or the column's kind (string / integer / list) is not the one asked for.
std::string cell_string(const HubTable& t, const std::string& column, int64_t row);
int64_t cell_int(const HubTable& t, const std::string& column, int64_t row);
std::vector<std::string> cell_strings(const HubTable& t, const std::string& column, int64_t row);

}  // namespace nanochat::tasks
