// Hub datasets on disk (hub.h).
#include "nanochat/tasks/hub.h"

#include <filesystem>
#include <fstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "nanochat/core/error.h"
#include "nanochat/core/paths.h"

namespace nanochat::tasks {

namespace fs = std::filesystem;

std::string hub_dataset_dir(const HubSource& src, const std::string& base) {
  std::string slug = src.repo;
  for (size_t p = slug.find('/'); p != std::string::npos; p = slug.find('/', p + 2)) slug.replace(p, 1, "--");
  const std::string root = base.empty() ? nanochat::base_dir() : base;
  return (fs::path(root) / "task_data" / slug / src.subset / src.split).string();
}

std::string hub_download_command(const std::string& spec) { return "nanochat data download --tasks " + spec; }

namespace {

void append(data::ParquetColumn& to, data::ParquetColumn&& from) {
  if (to.offsets.empty()) {
    to = std::move(from);
    return;
  }
  const int64_t base = to.offsets.back();
  for (size_t r = 1; r < from.offsets.size(); ++r) to.offsets.push_back(base + from.offsets[r]);
  to.valid.insert(to.valid.end(), from.valid.begin(), from.valid.end());
  for (auto& s : from.strings) to.strings.push_back(std::move(s));
  to.ints.insert(to.ints.end(), from.ints.begin(), from.ints.end());
}

}  // namespace

HubTable::HubTable(const std::string& dir, const std::vector<std::string>& columns,
                   const std::string& download_command) {
  const fs::path manifest = fs::path(dir) / "manifest.json";
  std::ifstream in(manifest);
  if (!in)
    fail(manifest.string(), ": not found: the dataset is not downloaded (run `", download_command,
         "` on a machine with network, or copy the folder from one that ran nanochat)");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    fail(manifest.string(), ": not valid JSON (", e.what(), "); delete it and run `", download_command, "`");
  }
  if (!j.is_array() || j.empty())
    fail(manifest.string(), ": expected a non-empty JSON list of parquet file names; delete it and run `",
         download_command, "`");
  for (const auto& name : j) {
    if (!name.is_string() || name.get<std::string>().find('/') != std::string::npos)
      fail(manifest.string(), ": entry ", name.dump(), " is not a file name in the folder");
    const std::string path = (fs::path(dir) / name.get<std::string>()).string();
    if (!fs::exists(path))
      fail(path, ": listed in ", manifest.string(), " but missing; delete the manifest and run `", download_command,
           "`");
    data::ParquetTable table(path);
    shards_.push_back(path);
    shard_start_.push_back(rows_);
    for (const auto& c : columns) {
      data::ParquetColumn col = table.read_column(c);
      append(columns_[c], std::move(col));
    }
    rows_ += table.num_rows();
  }
}

const data::ParquetColumn& HubTable::column(const std::string& name) const {
  auto it = columns_.find(name);
  NC_CHECK(it != columns_.end(), "column ", name, " was not loaded");
  return it->second;
}

std::string HubTable::where(int64_t row) const {
  size_t s = shards_.size();
  while (s > 0 && shard_start_[s - 1] > row) --s;
  if (s == 0) return str_cat("row ", row);
  return str_cat(shards_[s - 1], ": row ", row - shard_start_[s - 1]);
}

namespace {
const data::ParquetColumn& checked(const HubTable& t, const std::string& column, int64_t row, bool list, bool string) {
  const auto& c = t.column(column);
  if (c.is_list != list || c.is_string != string)
    fail(t.where(row), ": column \"", column, "\" is ", c.is_list ? "a list of " : "",
         c.is_string ? "strings" : "integers", ", expected ", list ? "a list of " : "",
         string ? "strings" : "integers");
  return c;
}
}  // namespace

std::string cell_string(const HubTable& t, const std::string& column, int64_t row) {
  const auto& c = checked(t, column, row, false, true);
  const auto i = static_cast<size_t>(c.offsets[static_cast<size_t>(row)]);
  if (!c.valid[i]) fail(t.where(row), ": column \"", column, "\" is null");
  return c.strings[i];
}

int64_t cell_int(const HubTable& t, const std::string& column, int64_t row) {
  const auto& c = checked(t, column, row, false, false);
  const auto i = static_cast<size_t>(c.offsets[static_cast<size_t>(row)]);
  if (!c.valid[i]) fail(t.where(row), ": column \"", column, "\" is null");
  return c.ints[i];
}

std::vector<std::string> cell_strings(const HubTable& t, const std::string& column, int64_t row) {
  const auto& c = checked(t, column, row, true, true);
  std::vector<std::string> out;
  for (int64_t i = c.offsets[static_cast<size_t>(row)]; i < c.offsets[static_cast<size_t>(row) + 1]; ++i) {
    if (!c.valid[static_cast<size_t>(i)]) fail(t.where(row), ": column \"", column, "\" has a null item");
    out.push_back(c.strings[static_cast<size_t>(i)]);
  }
  return out;
}

}  // namespace nanochat::tasks
