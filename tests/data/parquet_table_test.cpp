// ParquetTable against pyarrow: every column of nested.parquet (a list of strings, a list of
// structs, a struct of a list and an integer, booleans, int32, strings; nulls at every level,
// empty lists, dictionary and plain pages, several row groups and pages) read as pyarrow reads it
// (nested.json, tools/tasks/make_task_fixtures.py); and the errors for a missing column or file.
#include "nanochat/data/parquet_table.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "nanochat/core/error.h"

namespace nanochat::data {
namespace {

const std::string kDir = std::string(NANOCHAT_TEST_DATA) + "/tasks";

nlohmann::json rows() {
  std::ifstream f(kDir + "/nested.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// The items pyarrow gives for `path` in row j: a list of nullable values (path "a.b" descends
// into struct fields and, through a list, into each element).
std::vector<nlohmann::json> items_of(const nlohmann::json& row, const std::vector<std::string>& path, bool& is_list) {
  std::vector<nlohmann::json> cur{row};
  for (const auto& key : path) {
    std::vector<nlohmann::json> next;
    for (const auto& v : cur) {
      if (v.is_null()) {
        if (!is_list) next.push_back(nullptr);  // a null struct: its field is null
        continue;
      }
      const auto& f = v.at(key);
      if (f.is_array()) {
        is_list = true;
        for (const auto& e : f) next.push_back(e);
      } else {
        next.push_back(f);
      }
    }
    cur = std::move(next);
  }
  return cur;
}

TEST(ParquetTable, NestedColumnsMatchPyarrow) {
  ParquetTable t(kDir + "/nested.parquet");
  const auto want = rows();
  ASSERT_EQ(t.num_rows(), static_cast<int64_t>(want.size()));
  EXPECT_EQ(t.column_names(),
            (std::vector<std::string>{"id", "flag", "tags", "msgs.content", "msgs.role", "pair.a", "pair.n", "name"}));
  const std::vector<std::pair<std::string, std::vector<std::string>>> cols = {{"id", {"id"}},
                                                                              {"flag", {"flag"}},
                                                                              {"tags", {"tags"}},
                                                                              {"msgs.content", {"msgs", "content"}},
                                                                              {"msgs.role", {"msgs", "role"}},
                                                                              {"pair.a", {"pair", "a"}},
                                                                              {"pair.n", {"pair", "n"}},
                                                                              {"name", {"name"}}};
  for (const auto& [name, path] : cols) {
    const ParquetColumn c = t.read_column(name);
    ASSERT_EQ(c.num_rows(), t.num_rows()) << name;
    for (int64_t r = 0; r < c.num_rows(); ++r) {
      bool list = false;
      // the list column's items: null lists and null structs above the list give none
      std::vector<nlohmann::json> expect;
      if (name == "tags" || name == "pair.a" || name.rfind("msgs.", 0) == 0) {
        const auto& row = want[static_cast<size_t>(r)];
        const auto& outer = row.at(path[0]);
        if (!outer.is_null()) {
          const auto& lst = path.size() == 1 ? outer : (name == "pair.a" ? outer.at("a") : outer);
          if (!lst.is_null())
            for (const auto& e : lst)
              expect.push_back(name.rfind("msgs.", 0) == 0 ? (e.is_null() ? nlohmann::json() : e.at(path[1])) : e);
        }
        list = true;
      } else {
        expect = items_of(want[static_cast<size_t>(r)], path, list);
      }
      EXPECT_EQ(c.is_list, list) << name;
      ASSERT_EQ(c.items(r), static_cast<int64_t>(expect.size())) << name << " row " << r;
      for (size_t k = 0; k < expect.size(); ++k) {
        const size_t i = static_cast<size_t>(c.offsets[static_cast<size_t>(r)]) + k;
        const auto& e = expect[k];
        ASSERT_EQ(c.valid[i] != 0, !e.is_null()) << name << " row " << r << " item " << k;
        if (e.is_null()) continue;
        if (e.is_string()) {
          ASSERT_TRUE(c.is_string) << name;
          EXPECT_EQ(c.strings[i], e.get<std::string>()) << name << " row " << r;
        } else if (e.is_boolean()) {
          EXPECT_EQ(c.ints[i], e.get<bool>() ? 1 : 0) << name << " row " << r;
        } else {
          EXPECT_EQ(c.ints[i], e.get<int64_t>()) << name << " row " << r;
        }
      }
    }
  }
}

TEST(ParquetTable, ErrorsNameTheFileAndColumn) {
  ParquetTable t(kDir + "/nested.parquet");
  try {
    t.read_column("msgs");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("nested.parquet: has no column \"msgs\""), std::string::npos) << m;
    EXPECT_NE(m.find("msgs.content, msgs.role"), std::string::npos) << m;
  }
  EXPECT_THROW(ParquetTable(kDir + "/missing.parquet"), Error);
  EXPECT_THROW(ParquetTable(kDir + "/nested.json"), Error);
}

// Every truncation and random byte flips of nested.parquet: each read of every column either
// succeeds or throws nanochat::Error naming the file -- no crash, hang or other exception (the
// sanitizer build checks the memory accesses).
TEST(ParquetTable, CorruptFilesFailCleanly) {
  const std::string good = [] {
    std::ifstream f(kDir + "/nested.parquet", std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }();
  const auto path =
      (std::filesystem::temp_directory_path() / ("nc_pt_" + std::to_string(::getpid()) + ".parquet")).string();
  auto attempt = [&](const std::string& bytes) {
    {
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f << bytes;
    }
    try {
      ParquetTable t(path);
      for (const auto& c : t.column_names()) t.read_column(c);
      return 0;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      return 1;
    }
  };
  int errors = 0;
  for (size_t n = 0; n < good.size(); n += 7) errors += attempt(good.substr(0, n));
  EXPECT_EQ(errors, static_cast<int>((good.size() + 6) / 7));  // every truncation is detected
  std::mt19937 rng(7);
  errors = 0;
  const int trials = 300;
  for (int trial = 0; trial < trials; ++trial) {
    std::string b = good;
    for (int k = 0, flips = 1 + static_cast<int>(rng() % 3); k < flips; ++k) {
      size_t at = rng() % b.size();
      if (trial % 2 == 0) at = b.size() - 1 - rng() % 600;  // half in the footer
      b[at] = static_cast<char>(b[at] ^ (1 + rng() % 255));
    }
    errors += attempt(b);
  }
  EXPECT_GT(errors, trials / 4);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace nanochat::data
