#include "nanochat/data/pack.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "nanochat/core/error.h"
#include "nanochat/core/file_io.h"
#include "nanochat/core/rng.h"
#include "nanochat/data/codec.h"
#include "nanochat/data/parquet.h"

namespace fs = std::filesystem;

namespace nanochat::data {

int64_t utf8_length(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string sanitize_utf8(const std::string& s, int64_t* replaced) {
  // Fast path: valid input is returned unchanged. Invalid sequences become U+FFFD, one per
  // maximal invalid subpart (as Python's errors="replace" does).
  std::string out;
  bool copying = false;
  const size_t n = s.size();
  size_t i = 0;
  auto bad = [&](size_t from, size_t to) {
    if (!copying) {
      out.assign(s, 0, from);
      copying = true;
    }
    out += "\xEF\xBF\xBD";
    if (replaced) ++*replaced;
    i = to;
  };
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      bad(i, i + 1);
      continue;
    }
    size_t k = 1;
    for (; k < len && i + k < n; ++k) {
      unsigned char b = static_cast<unsigned char>(s[i + k]);
      unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (b < l || b > h) break;
    }
    if (k < len) {
      bad(i, i + k);
      continue;
    }
    if (copying) out.append(s, i, len);
    i += len;
  }
  return copying ? out : s;
}

std::vector<std::string> list_parquet_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("data directory ", dir, " does not exist (or is not a directory)");
  std::vector<std::string> out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() == ".parquet" && it->is_regular_file(ec)) out.push_back(p.string());
  }
  if (ec) fail("cannot list data directory ", dir, ": ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && is_space(s[a])) ++a;
  while (b > a && is_space(s[b - 1])) --b;
  return std::string(s.substr(a, b - a));
}

// Blank-line separated paragraphs (a blank line holds only whitespace).
std::vector<std::string> paragraphs(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  size_t i = 0;
  while (i <= text.size()) {
    size_t e = text.find('\n', i);
    if (e == std::string::npos) e = text.size();
    std::string_view line(text.data() + i, e - i);
    bool blank = std::all_of(line.begin(), line.end(), is_space);
    if (blank) {
      std::string t = trim(cur);
      if (!t.empty()) out.push_back(std::move(t));
      cur.clear();
    } else {
      cur.append(line);
      cur.push_back('\n');
    }
    i = e + 1;
  }
  std::string t = trim(cur);
  if (!t.empty()) out.push_back(std::move(t));
  return out;
}

std::vector<fs::path> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<fs::path> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(in, ec);
    if (ec || !fs::exists(st)) fail("input ", in, " does not exist");
    if (fs::is_directory(st)) {
      std::vector<fs::path> found;
      for (fs::recursive_directory_iterator it(in, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_regular_file() && it->path().filename().string()[0] != '.') found.push_back(it->path());
      }
      if (ec) fail("cannot walk input directory ", in, ": ", ec.message());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.emplace_back(in);
    }
  }
  return files;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

std::string shard_name(int64_t i) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "shard_%05lld.parquet", static_cast<long long>(i));
  return buf;
}

}  // namespace

namespace {

// Refuses bad options, creates --out and clears it of .parquet files when --force allows it, so
// that nothing is read before the output is known to be writable.
void check_options_and_out_dir(const PackOptions& opt) {
  if (opt.inputs.empty()) fail("data pack: no inputs given");
  if (opt.out_dir.empty()) fail("data pack: --out is required");
  if (opt.shard_chars <= 0) fail("data pack: --shard-chars must be positive (got ", opt.shard_chars, ")");
  if (opt.val_docs <= 0) fail("data pack: --val-docs must be at least 1 (nanochat always has a validation shard)");
  if (opt.split != "doc" && opt.split != "paragraphs")
    fail("data pack: --split must be 'doc' or 'paragraphs' (got '", opt.split, "')");
  if (opt.row_group_size <= 0) fail("data pack: row group size must be positive");
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (ec) fail("data pack: cannot create --out ", opt.out_dir, ": ", ec.message());
  auto existing = list_parquet_files(opt.out_dir);
  if (!existing.empty()) {
    if (!opt.force) {
      fail("data pack: --out ", opt.out_dir, " already holds ", existing.size(),
           " .parquet files; choose an empty directory or pass --force to replace them");
    }
    for (const auto& f : existing) fs::remove(f, ec);
  }
}

// Appends the "text" of each line of a JSON-lines file to docs through add; a null text is
// counted as skipped. Throws naming the file and line on invalid JSON or a missing "text".
void read_jsonl_docs(const fs::path& p, PackResult& res, const std::function<void(std::string&&)>& add) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("cannot read input ", p.string());
  std::string line;
  int64_t lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (trim(line).empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(p.string(), ":", lineno, ": invalid JSON (", e.what(), "); expected one {\"text\": ...} object per line");
    }
    if (!j.is_object() || !j.contains("text"))
      fail(p.string(), ":", lineno, ": expected an object with a \"text\" key");
    const auto& t = j["text"];
    if (t.is_null()) {
      res.skipped++;
      continue;
    }
    if (!t.is_string()) fail(p.string(), ":", lineno, ": \"text\" is not a string");
    add(t.get<std::string>());
  }
  if (f.bad()) fail("error reading input ", p.string());
}

// The documents of every input, in input order; empty ones are counted in res.skipped.
std::vector<std::string> read_documents(const PackOptions& opt, PackResult& res) {
  std::vector<std::string> docs;
  auto add = [&](std::string&& d) {
    if (d.empty()) {
      res.skipped++;
      return;
    }
    docs.push_back(std::move(d));
  };
  for (const fs::path& p : expand_inputs(opt.inputs)) {
    std::string ext = p.extension().string();
    if (ext == ".jsonl" || ext == ".json") {
      read_jsonl_docs(p, res, add);
    } else {
      std::string text = sanitize_utf8(read_file(p.string()), &res.replaced_utf8);
      if (opt.split == "paragraphs") {
        for (auto& para : paragraphs(text)) add(std::move(para));
      } else {
        add(trim(text));
      }
    }
  }
  return docs;
}

// The exclusive end index of each train shard over docs[0, n_train): a shard closes at >=
// shard_chars characters AND a multiple of 1024 documents (docs/nanochat.md 5.2); the remainder
// joins the last shard, and a corpus too small for one full shard makes one short shard.
std::vector<int64_t> plan_train_shards(const std::vector<std::string>& docs, int64_t n_train, int64_t shard_chars) {
  std::vector<int64_t> ends;
  int64_t chars = 0, count = 0;
  for (int64_t i = 0; i < n_train; ++i) {
    chars += utf8_length(docs[static_cast<size_t>(i)]);
    ++count;
    if (chars >= shard_chars && count % 1024 == 0) {
      ends.push_back(i + 1);
      chars = 0;
      count = 0;
    }
  }
  if (ends.empty()) {
    ends.push_back(n_train);
  } else if (ends.back() < n_train) {
    ends.back() = n_train;
  }
  return ends;
}

}  // namespace

PackResult pack_corpus(const PackOptions& opt) {
  check_options_and_out_dir(opt);
  PackResult res;
  std::vector<std::string> docs = read_documents(opt, res);
  const int64_t n = static_cast<int64_t>(docs.size());
  if (n <= opt.val_docs) {
    fail("data pack: the inputs hold ", n, " documents, not enough for --val-docs ", opt.val_docs,
         " plus at least one training document; pass a smaller --val-docs or more text");
  }

  // ---- shuffle (Fisher-Yates, seeded) ----
  Rng rng(opt.seed);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(docs[static_cast<size_t>(i)], docs[rng.below(static_cast<uint64_t>(i + 1))]);
  const int64_t n_train = n - opt.val_docs;
  const std::vector<int64_t> ends = plan_train_shards(docs, n_train, opt.shard_chars);

  // ---- write ----
  auto write_shard = [&](const std::string& path, int64_t from, int64_t to) {
    ParquetWriter w(path, opt.row_group_size);
    int64_t c = 0;
    for (int64_t i = from; i < to; ++i) {
      w.write(docs[static_cast<size_t>(i)]);
      c += utf8_length(docs[static_cast<size_t>(i)]);
    }
    w.close();
    res.chars += c;
    if (!opt.quiet) {
      std::fprintf(stderr, "wrote %s: %lld docs, %lld chars, %s\n", path.c_str(), static_cast<long long>(to - from),
                   static_cast<long long>(c), human_bytes(static_cast<double>(fs::file_size(path))).c_str());
    }
  };
  int64_t from = 0;
  for (size_t s = 0; s < ends.size(); ++s) {
    std::string path = (fs::path(opt.out_dir) / shard_name(static_cast<int64_t>(s))).string();
    write_shard(path, from, ends[s]);
    res.train_shards.push_back(path);
    res.train_docs.push_back(ends[s] - from);
    from = ends[s];
  }
  res.val_shard = (fs::path(opt.out_dir) / shard_name(static_cast<int64_t>(ends.size()))).string();
  write_shard(res.val_shard, n_train, n);
  res.val_docs = opt.val_docs;
  res.docs = n;
  return res;
}

std::string inspect_parquet(const std::string& path, int preview_chars) {
  ParquetReader r(path);
  std::ostringstream os;
  os << "file: " << path << " (" << r.file_size() << " bytes)\n";
  if (!r.created_by().empty()) os << "created by: " << r.created_by() << "\n";
  os << "schema:\n" << r.schema_string() << "\n";
  os << "text column: " << (r.text_optional() ? "OPTIONAL" : "REQUIRED") << " BYTE_ARRAY\n";
  os << "codec: " << r.codec_name() << "\n";
  os << "encodings: " << r.encodings_string() << "\n";
  os << "row groups: " << r.num_row_groups() << "\n";
  for (int g = 0; g < r.num_row_groups(); ++g) {
    const RowGroupInfo& info = r.row_group(g);
    os << "  #" << g << ": " << info.num_rows << " rows, " << info.text.total_compressed_size << " bytes compressed, "
       << info.text.total_uncompressed_size << " uncompressed"
       << (info.text.dictionary_page_offset >= 0 ? ", dictionary" : "") << "\n";
  }
  os << "total rows: " << r.num_rows() << "\n";
  for (int g = 0; g < r.num_row_groups(); ++g) {
    if (r.row_group_num_rows(g) == 0) continue;
    std::string doc = r.read_row_group(g).front();
    std::string shown;
    int64_t taken = 0;
    size_t i = 0;
    for (; i < doc.size() && taken < preview_chars; ++i) {
      unsigned char c = static_cast<unsigned char>(doc[i]);
      if ((c & 0xC0) != 0x80) ++taken;
      if (c == '\n') {
        shown += "\\n";
      } else if (c == '\t') {
        shown += "\\t";
      } else if (c < 0x20) {
        shown += ' ';
      } else {
        shown.push_back(static_cast<char>(c));
      }
    }
    while (i < doc.size() && (static_cast<unsigned char>(doc[i]) & 0xC0) == 0x80) shown.push_back(doc[i++]);
    os << "first doc (" << utf8_length(doc) << " chars): " << shown << (i < doc.size() ? " ..." : "") << "\n";
    break;
  }
  return os.str();
}

}  // namespace nanochat::data
