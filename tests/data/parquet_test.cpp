// Parquet reader/writer tests. Truth for the reader: files written by independent writers
// (pyarrow in many layouts, parquet-rs for sample.parquet) and what pyarrow reads back from them
// (tests/fixtures/parquet/NAME.json, made by tools/fixtures/make_parquet_fixtures.py).
#include "nanochat/data/parquet.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "nanochat/core/error.h"
#include "nanochat/data/codec.h"
#include "nanochat/data/thrift_compact.h"

namespace fs = std::filesystem;
using namespace nanochat;
using namespace nanochat::data;

namespace {

const fs::path kDir = fs::path(NANOCHAT_TEST_DATA) / "parquet";

std::string fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Unicode code points of a UTF-8 string (continuation bytes are not counted).
int64_t utf8_chars(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("nc_parquet_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Reads every row group; returns all rows in order.
std::vector<std::string> read_all(const ParquetReader& r) {
  std::vector<std::string> all;
  for (int g = 0; g < r.num_row_groups(); ++g) {
    auto rows = r.read_row_group(g);
    EXPECT_EQ(static_cast<int64_t>(rows.size()), r.row_group_num_rows(g));
    all.insert(all.end(), std::make_move_iterator(rows.begin()), std::make_move_iterator(rows.end()));
  }
  return all;
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDir)) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

// Every pyarrow / parquet-rs fixture reads back exactly as pyarrow reads it.
class ParquetFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ParquetFixture, MatchesPyarrowRowForRow) {
  const std::string name = GetParam();
  std::ifstream jf(kDir / (name + ".json"));
  nlohmann::json exp = nlohmann::json::parse(jf);
  ParquetReader r((kDir / (name + ".parquet")).string());
  EXPECT_EQ(r.num_rows(), exp["num_rows"].get<int64_t>());
  auto rgs = exp["row_groups"].get<std::vector<int64_t>>();
  ASSERT_EQ(r.num_row_groups(), static_cast<int>(rgs.size()));
  for (size_t g = 0; g < rgs.size(); ++g) EXPECT_EQ(r.row_group_num_rows(static_cast<int>(g)), rgs[g]);
  if (exp.contains("codec")) {
    EXPECT_EQ(r.codec_name(), exp["codec"].get<std::string>());
  }
  auto rows = read_all(r);
  ASSERT_EQ(static_cast<int64_t>(rows.size()), exp["num_rows"].get<int64_t>());
  int64_t chars = 0;
  for (const auto& s : rows) chars += utf8_chars(s);
  EXPECT_EQ(chars, exp["chars"].get<int64_t>());
  if (exp.contains("rows")) {
    auto want = exp["rows"].get<std::vector<std::string>>();
    for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows[i], want[i]) << name << " row " << i;
  } else {
    auto lens = exp["lengths"].get<std::vector<size_t>>();
    auto hashes = exp["fnv1a64"].get<std::vector<std::string>>();
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(rows[i].size(), lens[i]) << name << " row " << i;
      ASSERT_EQ(fnv1a64(rows[i]), hashes[i]) << name << " row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pyarrow, ParquetFixture, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });

TEST(ParquetReader, SampleFromParquetRsHasTheDocumentedShape) {
  ParquetReader r((kDir / "sample.parquet").string());
  EXPECT_EQ(r.num_rows(), 2048);
  EXPECT_EQ(r.num_row_groups(), 2);
  EXPECT_EQ(r.codec_name(), "ZSTD");
  EXPECT_EQ(r.encodings_string(), "PLAIN,RLE");
  EXPECT_TRUE(r.text_optional());
  EXPECT_EQ(r.schema_string(), "message arrow_schema {\n  optional binary text (STRING);\n}");
  int64_t chars = 0;
  for (const auto& s : read_all(r)) chars += utf8_chars(s);
  EXPECT_EQ(chars, 654329);
}

TEST(ParquetReader, RandomAccessToRowGroupsMatchesSequentialReading) {
  ParquetReader r((kDir / "nanochat_layout.parquet").string());
  ASSERT_EQ(r.num_row_groups(), 3);
  auto seq = read_all(r);
  auto g2 = r.read_row_group(2);
  auto g0 = r.read_row_group(0);
  EXPECT_TRUE(std::equal(g0.begin(), g0.end(), seq.begin()));
  EXPECT_TRUE(std::equal(g2.begin(), g2.end(), seq.begin() + 2048));
  EXPECT_THROW(r.read_row_group(3), Error);
  EXPECT_THROW(r.read_row_group(-1), Error);
}

TEST(ParquetReader, NestedAndExtraColumnsAreSkipped) {
  ParquetReader r((kDir / "multi_column.parquet").string());
  EXPECT_NE(r.schema_string().find("optional binary text (STRING);"), std::string::npos) << r.schema_string();
  EXPECT_NE(r.schema_string().find("group meta"), std::string::npos) << r.schema_string();
}

TEST(ParquetReader, MissingOrWrongTextColumnIsAClearError) {
  struct Case {
    const char* file;
    const char* needle;
  } cases[] = {{"no_text_column.parquet", "no column named \"text\" (columns: body)"},
               {"text_is_int.parquet", "physical type INT64"},
               {"text_is_list.parquet", "is a group"}};
  for (const auto& c : cases) {
    std::string path = (kDir / c.file).string();
    try {
      ParquetReader r(path);
      ADD_FAILURE() << c.file << ": expected an error";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
    }
  }
}

TEST(ParquetReader, NotAFileOrMissingFileIsAnError) {
  EXPECT_THROW(ParquetReader("/nonexistent/shard_00000.parquet"), Error);
  EXPECT_THROW(ParquetReader(kDir.string()), Error);
}

// ---- writer ------------------------------------------------------------------------------------

TEST(ParquetWriter, RoundTripsDocumentsAndUsesNanochatLayout) {
  fs::path d = temp_dir("rt");
  std::string path = (d / "shard_00000.parquet").string();
  std::mt19937 rng(7);
  std::vector<std::string> docs;
  for (int i = 0; i < 2500; ++i) {
    std::string s;
    int len = static_cast<int>(rng() % 300);
    for (int k = 0; k < len; ++k) s.push_back(static_cast<char>(rng() % 256));  // any bytes, NUL included
    docs.push_back(s);
  }
  docs[5] = "";
  docs[6] = "Unicode: Café 日本語 🙂";
  docs[7] = std::string(3 << 20, 'x');  // a document bigger than a page
  {
    ParquetWriter w(path);
    for (const auto& s : docs) w.write(s);
    EXPECT_FALSE(fs::exists(path)) << "the shard must appear only on close()";
    w.close();
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  ParquetReader r(path);
  EXPECT_EQ(r.num_rows(), 2500);
  ASSERT_EQ(r.num_row_groups(), 3);
  EXPECT_EQ(r.row_group_num_rows(0), 1024);
  EXPECT_EQ(r.row_group_num_rows(1), 1024);
  EXPECT_EQ(r.row_group_num_rows(2), 452);
  EXPECT_EQ(r.codec_name(), "ZSTD");
  EXPECT_EQ(r.encodings_string(), "PLAIN,RLE");
  EXPECT_TRUE(r.text_optional());
  EXPECT_EQ(r.schema_string(), "message schema {\n  optional binary text (STRING);\n}");
  EXPECT_EQ(r.row_group(0).text.dictionary_page_offset, -1);
  EXPECT_EQ(read_all(r), docs);
  fs::remove_all(d);
}

TEST(ParquetWriter, SplitsPagesAtThePageSize) {
  fs::path d = temp_dir("pages");
  std::string path = (d / "p.parquet").string();
  std::vector<std::string> docs;
  for (int i = 0; i < 100; ++i) docs.push_back(std::string(100 + i, static_cast<char>('a' + i % 26)));
  {
    ParquetWriter w(path, /*row_group_size=*/64, /*zstd_level=*/3, /*page_bytes=*/1000);
    for (const auto& s : docs) w.write(s);
    w.close();
  }
  ParquetReader r(path);
  EXPECT_EQ(r.num_row_groups(), 2);
  EXPECT_EQ(read_all(r), docs);
  fs::remove_all(d);
}

TEST(ParquetWriter, UnclosedWriterLeavesNoFile) {
  fs::path d = temp_dir("unclosed");
  std::string path = (d / "x.parquet").string();
  {
    ParquetWriter w(path);
    w.write("hello");
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_THROW(ParquetWriter((d / "no/such/dir/x.parquet").string()), Error);
  fs::remove_all(d);
}

TEST(ParquetWriter, EmptyShardIsValid) {
  fs::path d = temp_dir("empty");
  std::string path = (d / "e.parquet").string();
  ParquetWriter w(path);
  w.close();
  ParquetReader r(path);
  EXPECT_EQ(r.num_rows(), 0);
  EXPECT_EQ(r.num_row_groups(), 0);
  fs::remove_all(d);
}

// ---- corrupt input ----------------------------------------------------------------------------

namespace {

// Opens and fully reads a file; returns "" on success or the error message. Anything other than
// success or nanochat::Error (a crash, another exception type) fails the test.
std::string try_read(const std::string& path, const ParquetLimits& lim = {}) {
  try {
    ParquetReader r(path, lim);
    for (int g = 0; g < r.num_row_groups(); ++g) r.read_row_group(g);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// Builds a file: "PAR1" + body + footer (FileMetaData for one optional text column whose single
// row group has `rows` rows in a chunk [4, 4 + body.size())), with knobs for lying fields.
std::string make_file(const std::string& body, int64_t rows, int32_t codec = 6, int64_t chunk_len = -1,
                      int64_t footer_rows = -1) {
  using thrift::CType;
  thrift::Writer w;
  w.begin_struct();
  w.field_i32(1, 1);
  w.field_header(2, CType::List);
  w.list_header(CType::Struct, 2);
  w.begin_struct();
  w.field_binary(4, "schema");
  w.field_i32(5, 1);
  w.end_struct();
  w.begin_struct();
  w.field_i32(1, 6);
  w.field_i32(3, 1);
  w.field_binary(4, "text");
  w.end_struct();
  w.field_i64(3, footer_rows >= 0 ? footer_rows : rows);
  w.field_header(4, CType::List);
  w.list_header(CType::Struct, 1);
  w.begin_struct();
  w.field_header(1, CType::List);
  w.list_header(CType::Struct, 1);
  w.begin_struct();
  w.field_i64(2, 4);
  w.field_header(3, CType::Struct);
  w.begin_struct();
  w.field_i32(1, 6);
  w.field_header(2, CType::List);
  w.list_header(CType::I32, 1);
  w.i32(0);
  w.field_header(3, CType::List);
  w.list_header(CType::Binary, 1);
  w.binary("text");
  w.field_i32(4, codec);
  w.field_i64(5, rows);
  w.field_i64(6, static_cast<int64_t>(body.size()));
  w.field_i64(7, chunk_len >= 0 ? chunk_len : static_cast<int64_t>(body.size()));
  w.field_i64(9, 4);
  w.end_struct();
  w.end_struct();
  w.field_i64(2, static_cast<int64_t>(body.size()));
  w.field_i64(3, rows);
  w.end_struct();
  w.end_struct();
  std::string f = "PAR1" + body + w.bytes();
  uint32_t len = static_cast<uint32_t>(w.bytes().size());
  for (int k = 0; k < 4; ++k) f.push_back(static_cast<char>((len >> (8 * k)) & 0xff));
  return f + "PAR1";
}

// A data page v1 header with the given (possibly lying) fields.
std::string page_header(int32_t uncompressed, int32_t compressed, int32_t num_values, int32_t encoding = 0) {
  using thrift::CType;
  thrift::Writer w;
  w.begin_struct();
  w.field_i32(1, 0);
  w.field_i32(2, uncompressed);
  w.field_i32(3, compressed);
  w.field_header(5, CType::Struct);
  w.begin_struct();
  w.field_i32(1, num_values);
  w.field_i32(2, encoding);
  w.field_i32(3, 3);
  w.field_i32(4, 3);
  w.end_struct();
  w.end_struct();
  return w.bytes();
}

}  // namespace

TEST(ParquetCorrupt, HandBuiltFileReadsAndLyingFieldsAreErrors) {
  fs::path d = temp_dir("lies");
  auto check = [&](const std::string& name, const std::string& bytes, const std::string& needle) {
    std::string path = (d / (name + ".parquet")).string();
    spit(path, bytes);
    std::string msg = try_read(path);
    if (needle.empty()) {
      EXPECT_EQ(msg, "") << name;
      return;
    }
    EXPECT_NE(msg.find(path), std::string::npos) << name << ": " << msg;
    EXPECT_NE(msg.find("byte offset"), std::string::npos) << name << ": " << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << name << ": " << msg;
  };
  // A valid uncompressed page of 2 rows: levels [len=2][RLE run of 2 ones], then "ab", "c".
  std::string payload = std::string("\x02\x00\x00\x00\x04\x01", 6) +
                        std::string(
                            "\x02\x00\x00\x00"
                            "ab",
                            6) +
                        std::string(
                            "\x01\x00\x00\x00"
                            "c",
                            5);
  std::string ok_body =
      page_header(static_cast<int32_t>(payload.size()), static_cast<int32_t>(payload.size()), 2) + payload;
  check("ok", make_file(ok_body, 2, 0), "");
  {
    std::string path = (d / "ok.parquet").string();
    ParquetReader r(path);
    EXPECT_EQ(r.read_row_group(0), (std::vector<std::string>{"ab", "c"}));
  }
  check("rows_lie", make_file(ok_body, 3, 0), "column chunk ends after 2 of 3 values");
  check("footer_rows_lie", make_file(ok_body, 2, 0, -1, 5), "footer says 5 rows");
  check("too_many_rows", make_file(ok_body, int64_t(1) << 40, 0), "exceed the reader's limit");
  check("chunk_past_end", make_file(ok_body, 2, 0, 1 << 20), "outside the data region");
  check("codec_lz4", make_file(ok_body, 2, 7), "LZ4_RAW is not supported");
  check("codec_unknown", make_file(ok_body, 2, 99), "codec(99) is not supported");
  // Page header claims a 2 GB page: rejected before any allocation.
  check("huge_page", make_file(page_header(INT32_MAX, static_cast<int32_t>(payload.size()), 2) + payload, 2, 6),
        "exceeds the reader's limit");
  // zstd page that declares 200 MB but holds a tiny frame: the frame's real size disagrees.
  std::string z = zstd_compress(std::string("\x02\x00\x00\x00\x04\x01", 6), 3);
  check("zstd_size_lie", make_file(page_header(200 << 20, static_cast<int32_t>(z.size()), 2) + z, 2, 6),
        "zstd data decompresses to 6 bytes");
  check("page_past_chunk", make_file(page_header(6, 1000, 2) + payload, 2, 0), "runs past the end of its column chunk");
  check("value_too_long",
        make_file(page_header(12, 12, 2) + std::string("\x02\x00\x00\x00\x04\x01\xff\xff\xff\x7f"
                                                       "ab",
                                                       12),
                  2, 0),
        "runs past the end of the page");
  check("levels_too_long", make_file(page_header(6, 6, 2) + std::string("\xff\xff\x00\x00\x04\x01", 6), 2, 0),
        "definition levels length");
  check("bad_level", make_file(page_header(6, 6, 2) + std::string("\x02\x00\x00\x00\x04\x03", 6), 2, 0),
        "does not fit in 1 bits");
  check("dict_without_dictionary",
        make_file(page_header(7, 7, 2, 8) + std::string("\x02\x00\x00\x00\x04\x01\x01", 7), 2, 0),
        "without a dictionary page");
  check("delta_encoding", make_file(page_header(6, 6, 2, 6) + std::string("\x02\x00\x00\x00\x04\x01", 6), 2, 0),
        "DELTA_LENGTH_BYTE_ARRAY is not supported");
  check("too_many_values", make_file(page_header(6, 6, 9) + std::string("\x02\x00\x00\x00\x04\x01", 6), 2, 0),
        "only 2 rows of the row group remain");
  fs::remove_all(d);
}

TEST(ParquetCorrupt, BadMagicTinyFilesAndAbsurdFooterLength) {
  fs::path d = temp_dir("magic");
  std::string good = slurp(kDir / "zstd_plain_small.parquet");
  auto check = [&](const std::string& name, const std::string& bytes, const std::string& needle) {
    std::string path = (d / name).string();
    spit(path, bytes);
    std::string msg = try_read(path);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  };
  check("empty", "", "too small");
  check("tiny", "PAR1PAR1", "too small");
  std::string b = good;
  b[0] = 'X';
  check("head", b, "magic bytes \"PAR1\" missing at the start");
  b = good;
  b[b.size() - 1] = 'X';
  check("tail", b, "missing at the end");
  b = good;
  b[b.size() - 5] = '\x7f';  // footer length ~2 GB
  check("footer_len", b, "footer length");
  b = good;
  std::memcpy(&b[b.size() - 4], "PARE", 4);
  check("encrypted", b, "encrypted");
  fs::remove_all(d);
}

TEST(ParquetCorrupt, EveryTruncationIsAnError) {
  fs::path d = temp_dir("trunc");
  for (const char* name : {"zstd_plain_small", "dictionary_snappy", "v2_dict_nulls_snappy", "gzip_plain"}) {
    std::string good = slurp(kDir / (std::string(name) + ".parquet"));
    std::string path = (d / "t.parquet").string();
    for (size_t cut = 0; cut < good.size(); cut += 1 + good.size() / 150) {
      spit(path, good.substr(0, cut));
      std::string msg = try_read(path);
      EXPECT_NE(msg, "") << name << " cut at " << cut;
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
    }
    // Truncated data region, intact footer: cut bytes out of the middle and re-append the footer.
    uint32_t flen;
    std::memcpy(&flen, good.data() + good.size() - 8, 4);
    std::string footer = good.substr(good.size() - 8 - flen);
    size_t data_end = good.size() - 8 - flen;
    for (size_t cut = 4; cut < data_end; cut += 1 + data_end / 60) {
      spit(path, good.substr(0, cut) + footer);
      std::string msg = try_read(path);
      EXPECT_NE(msg, "") << name << " data cut at " << cut;
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
    }
  }
  fs::remove_all(d);
}

TEST(ParquetCorrupt, FlippedBytesNeverCrash) {
  fs::path d = temp_dir("flip");
  std::mt19937 rng(123);
  int errors = 0, total = 0;
  for (const char* name :
       {"zstd_plain_small", "dictionary_snappy", "v2_dict_nulls_snappy", "gzip_plain", "uncompressed_plain",
        "page_crc_index", "multi_column", "dictionary_v1format_gzip", "required_v2_gzip"}) {
    std::string good = slurp(kDir / (std::string(name) + ".parquet"));
    std::string path = (d / "f.parquet").string();
    for (int trial = 0; trial < 150; ++trial) {
      std::string b = good;
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) {
        size_t at = rng() % b.size();
        // Bias half of the flips into the footer, where lengths and offsets live.
        if (trial % 2 == 0) at = b.size() - 1 - rng() % std::min<size_t>(b.size(), 300);
        b[at] = static_cast<char>(b[at] ^ (1 + rng() % 255));
      }
      spit(path, b);
      std::string msg = try_read(path);  // success or nanochat::Error; anything else fails the test
      ++total;
      if (!msg.empty()) {
        ++errors;
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
      }
    }
  }
  EXPECT_GT(errors, total / 4);  // most corruptions are detected (the rest hit text bytes)
  fs::remove_all(d);
}

TEST(ParquetCorrupt, PageCrcDetectsCorruptedPayload) {
  fs::path d = temp_dir("crc");
  std::string good = slurp(kDir / "page_crc_index.parquet");
  ParquetReader r((kDir / "page_crc_index.parquet").string());
  // Flip a byte in the middle of the first column chunk's pages.
  const auto& c = r.row_group(0).text;
  std::string b = good;
  size_t at = static_cast<size_t>(c.start + c.total_compressed_size - 5);
  b[at] = static_cast<char>(b[at] ^ 0x55);
  std::string path = (d / "c.parquet").string();
  spit(path, b);
  std::string msg = try_read(path);
  EXPECT_NE(msg.find("CRC mismatch"), std::string::npos) << msg;
  fs::remove_all(d);
}

// Inputs the fuzzer found interesting (fuzz/README.md): each reads or throws nanochat::Error.
TEST(ParquetCorrupt, FuzzCorpusReadsOrFailsCleanly) {
  ParquetLimits lim;  // the fuzzer's limits
  lim.max_page_bytes = 16 << 20;
  lim.max_row_group_rows = 1 << 16;
  lim.max_row_group_bytes = 64 << 20;
  int files = 0, errors = 0;
  for (const auto& e : fs::directory_iterator(kDir / "fuzz_corpus")) {
    std::string msg = try_read(e.path().string(), lim);
    ++files;
    if (!msg.empty()) {
      ++errors;
      EXPECT_NE(msg.find(e.path().string()), std::string::npos) << msg;
    }
    try_read(e.path().string());  // and with the product's default limits
  }
  EXPECT_GT(files, 100);
  EXPECT_GT(errors, 0);
}
