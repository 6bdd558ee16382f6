// scripts/demo_corpus.sh end to end, offline: the extractors run on tiny package trees cut from the
// real Debian packages (tests/fixtures/corpus, see tools/fixtures/make_corpus_fixtures.py), the
// result is packed by the nanochat binary, and the shards are checked for clean, expected text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nanochat/data/pack.h"
#include "nanochat/data/parquet.h"

namespace fs = std::filesystem;
using namespace nanochat::data;

namespace {

std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) {
    *rc = -1;
    return "popen failed";
  }
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
  int status = ::pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// True when s holds "(...?...)" without spaces or parentheses inside: a pronunciation whose
// IPA letters the dictionary build replaced by '?'.
bool has_mangled_pronunciation(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '(') continue;
    bool q = false;
    for (size_t j = i + 1; j < s.size(); ++j) {
      char c = s[j];
      if (c == ')') {
        if (q) return true;
        break;
      }
      if (c == '(' || c == ' ' || c == '\n' || c == '\t') break;
      q = q || c == '?';
    }
  }
  return false;
}

}  // namespace

TEST(DemoCorpus, OfflineBuildFromPackageSnippetsGivesCleanShards) {
  fs::path d = fs::temp_directory_path() / ("nc_corpus_" + std::to_string(::getpid()));
  fs::remove_all(d);
  const std::string src = NANOCHAT_SOURCE_DIR;
  const std::string cmd = "NANOCHAT_BASE_DIR=" + (d / "base").string() + " timeout 120 bash " + src +
                          "/scripts/demo_corpus.sh --trees " + std::string(NANOCHAT_TEST_DATA) + "/corpus --out " +
                          (d / "data").string() + " --bin " + NANOCHAT_BINARY + " --val-docs 4";
  int rc = 0;
  std::string log = run(cmd, &rc);
  ASSERT_EQ(rc, 0) << log;
  for (const char* s : {"austen: 12 docs", "web: 2 docs", "gcide: 1 docs", "pydoc: 2 docs", "wordnet: 4 docs"}) {
    EXPECT_NE(log.find(s), std::string::npos) << s << "\n" << log;
  }

  auto files = list_parquet_files((d / "data").string());
  ASSERT_EQ(files.size(), 2u);  // one train shard + validation
  std::vector<std::string> docs;
  for (const auto& f : files) {
    ParquetReader r(f);
    for (int g = 0; g < r.num_row_groups(); ++g) {
      auto rows = r.read_row_group(g);
      docs.insert(docs.end(), rows.begin(), rows.end());
    }
  }
  EXPECT_EQ(docs.size(), 21u);
  EXPECT_EQ(ParquetReader(files.back()).num_rows(), 4);
  auto find = [&](const std::string& prefix) -> std::string {
    for (const auto& x : docs) {
      if (x.rfind(prefix, 0) == 0) return x;
    }
    return "";
  };
  // Austen: one document per chapter, title + chapter heading, paragraphs unwrapped.
  std::string pp = find("Pride and Prejudice\n\nChapter 1\n\n");
  ASSERT_FALSE(pp.empty());
  EXPECT_NE(pp.find("It is a truth universally acknowledged, that a single man in possession of a good fortune, must "
                    "be in want of a wife."),
            std::string::npos);
  EXPECT_EQ(pp.find("Chapter 2"), std::string::npos);
  EXPECT_FALSE(find("Emma\n\nChapter I\n\nEmma Woodhouse, handsome, clever, and rich").empty());
  // World English Bible: chapters, markup and footnotes gone.
  std::string mt = find("Matthew chapter 1\n\n");
  ASSERT_FALSE(mt.empty());
  EXPECT_NE(mt.find("The book of the genealogy of Jesus Christ, the son of David, the son of Abraham."),
            std::string::npos)
      << mt.substr(0, 300);
  EXPECT_FALSE(find("Matthew chapter 2\n\n").empty());
  // GCIDE: entries without source tags, braces or '?'-mangled pronunciations; licence entry skipped.
  std::string ab = find("Abuse \\A*buse\"\\, v. t.");
  ASSERT_FALSE(ab.empty());
  EXPECT_NE(ab.find("Abusion"), std::string::npos);
  // Python docs: roles and directives resolved.
  std::string hq = find("heapq --- Heap queue algorithm");
  ASSERT_FALSE(hq.empty());
  EXPECT_NE(hq.find("heappush(heap, item)"), std::string::npos);
  EXPECT_NE(hq.find("function heapify."), std::string::npos);
  // WordNet: "words: gloss" lines, licence header skipped.
  std::string wn = find("entity: that which is perceived or known");
  ASSERT_FALSE(wn.empty());
  EXPECT_NE(wn.find("physical entity: an entity that has physical existence"), std::string::npos);
  for (const auto& x : docs) {
    EXPECT_EQ(x.find("[1913 Webster]"), std::string::npos);
    EXPECT_EQ(x.find("<w "), std::string::npos);
    EXPECT_EQ(x.find("</"), std::string::npos);
    EXPECT_EQ(x.find(":func:"), std::string::npos);
    EXPECT_EQ(x.find(".. module::"), std::string::npos);
    EXPECT_EQ(x.find("PRINCETON"), std::string::npos);
    EXPECT_EQ(x.find("00-database"), std::string::npos);
    EXPECT_FALSE(has_mangled_pronunciation(x)) << x.substr(0, 200);
  }
  EXPECT_TRUE(has_mangled_pronunciation("Cryptogram (kr?p\"t?-gr?m), n."));  // the check itself works
  EXPECT_FALSE(has_mangled_pronunciation("Is it? (yes) (a b?)"));
  // Attribution and licences travel with the data.
  std::string attr = slurp(d / "data" / "ATTRIBUTION");
  for (const char* pkg : {"r-cran-janeaustenr", "sword-text-web", "dict-gcide", "python3.11-doc", "wordnet-base"}) {
    EXPECT_NE(attr.find(pkg), std::string::npos) << attr;
    EXPECT_TRUE(fs::exists(d / "data" / "LICENSES" / (std::string(pkg) + ".copyright"))) << pkg;
  }
  EXPECT_NE(attr.find("GPL-2+"), std::string::npos);
  // Idempotent: a second run leaves the finished corpus alone.
  log = run(cmd, &rc);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("already built"), std::string::npos) << log;
  // Foreign shards in the target are never overwritten.
  fs::remove(d / "data" / "DEMO_CORPUS");
  log = run(cmd, &rc);
  EXPECT_NE(rc, 0) << log;
  EXPECT_NE(log.find("not the demo corpus"), std::string::npos) << log;
  fs::remove_all(d);
}
