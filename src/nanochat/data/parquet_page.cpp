// Parquet page headers and whole-file reads (parquet_page.h).
#include "nanochat/data/parquet_page.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "nanochat/data/codec.h"
#include "nanochat/data/parquet.h"
#include "nanochat/data/parquet_footer.h"
#include "nanochat/data/parquet_format.h"

namespace nanochat::data::parquet_format {

using thrift::CType;

void pread_all(int fd, const std::string& path, int64_t offset, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t k = ::pread(fd, p, n, offset);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(path, ": byte offset ", offset, ": read failed: ", std::strerror(errno));
    }
    if (k == 0)
      fail(path, ": byte offset ", offset, ": unexpected end of file (was the file truncated while reading?)");
    p += k;
    n -= static_cast<size_t>(k);
    offset += k;
  }
}

namespace {

void parse_data_page_header(thrift::Reader& r, PageHeader& h) {
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1:
        h.num_values = read_i32_field(r, t, "DataPageHeader.num_values");
        break;
      case 2:
        h.encoding = read_i32_field(r, t, "DataPageHeader.encoding");
        break;
      case 3:
        h.def_encoding = read_i32_field(r, t, "DataPageHeader.definition_level_encoding");
        break;
      case 4:
        h.rep_encoding = read_i32_field(r, t, "DataPageHeader.repetition_level_encoding");
        break;
      default:
        r.skip(t);
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
      case 1:
        h.num_values = read_i32_field(r, t, "DictionaryPageHeader.num_values");
        break;
      case 2:
        h.encoding = read_i32_field(r, t, "DictionaryPageHeader.encoding");
        break;
      default:
        r.skip(t);
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
      case 1:
        h.num_values = read_i32_field(r, t, "DataPageHeaderV2.num_values");
        break;
      case 2:
        h.num_nulls = read_i32_field(r, t, "DataPageHeaderV2.num_nulls");
        break;
      case 3:
        h.num_rows = read_i32_field(r, t, "DataPageHeaderV2.num_rows");
        break;
      case 4:
        h.encoding = read_i32_field(r, t, "DataPageHeaderV2.encoding");
        break;
      case 5:
        h.def_bytes = read_i32_field(r, t, "DataPageHeaderV2.definition_levels_byte_length");
        break;
      case 6:
        h.rep_bytes = read_i32_field(r, t, "DataPageHeaderV2.repetition_levels_byte_length");
        break;
      case 7:
        expect(r, t, CType::True, "DataPageHeaderV2.is_compressed");
        h.is_compressed = r.read_bool(t);
        break;
      default:
        r.skip(t);
    }
  }
  r.end_struct();
  if (h.num_values < 0 || h.num_nulls < 0 || h.encoding < 0 || h.def_bytes < 0 || h.rep_bytes < 0 ||
      h.num_nulls > h.num_values) {
    r.fail("data page v2 header has missing or negative fields");
  }
  h.has_body = true;
}

}  // namespace

PageHeader parse_page_header(thrift::Reader& r) {
  PageHeader h;
  r.begin_struct();
  int16_t id;
  CType t;
  while (r.next_field(id, t)) {
    switch (id) {
      case 1:
        h.type = read_i32_field(r, t, "PageHeader.type");
        break;
      case 2:
        h.uncompressed_size = read_i32_field(r, t, "PageHeader.uncompressed_page_size");
        break;
      case 3:
        h.compressed_size = read_i32_field(r, t, "PageHeader.compressed_page_size");
        break;
      case 4:
        h.has_crc = true;
        h.crc = static_cast<uint32_t>(read_i32_field(r, t, "PageHeader.crc"));
        break;
      case 5:
        expect(r, t, CType::Struct, "PageHeader.data_page_header");
        if (h.type == kDataPage)
          parse_data_page_header(r, h);
        else
          r.skip(t);
        break;
      case 7:
        expect(r, t, CType::Struct, "PageHeader.dictionary_page_header");
        if (h.type == kDictionaryPage)
          parse_dict_page_header(r, h);
        else
          r.skip(t);
        break;
      case 8:
        expect(r, t, CType::Struct, "PageHeader.data_page_header_v2");
        if (h.type == kDataPageV2)
          parse_data_page_v2_header(r, h);
        else
          r.skip(t);
        break;
      default:
        r.skip(t);
    }
  }
  r.end_struct();
  if (h.type < 0 || h.uncompressed_size < 0 || h.compressed_size < 0)
    r.fail("page header lacks type or sizes (or they are negative)");
  return h;
}

void Page::fail(const std::string& what) const { nanochat::fail(where, ": ", what); }

PageWalker::PageWalker(std::string_view chunk, int64_t start, const std::string& path, std::string label,
                       int64_t max_page_bytes, PageStats* stats)
    : chunk_(chunk),
      start_(start),
      path_(path),
      label_(std::move(label)),
      max_page_bytes_(max_page_bytes),
      stats_(stats) {}

Page PageWalker::next(const std::string& progress) {
  for (;;) {
    Page p;
    const int64_t page_off = start_ + static_cast<int64_t>(pos_);
    p.where = str_cat(path_, ": byte offset ", page_off, " (", label_, ", page ", page_no_, ")");
    if (pos_ >= chunk_.size()) p.fail("column chunk ends after " + progress);
    thrift::Reader hr(reinterpret_cast<const uint8_t*>(chunk_.data()) + pos_, chunk_.size() - pos_, path_, page_off);
    p.h = parse_page_header(hr);
    const PageHeader& h = p.h;
    const size_t body = pos_ + hr.pos();
    if (static_cast<size_t>(h.compressed_size) > chunk_.size() - body) {
      p.fail(str_cat("page of ", h.compressed_size, " bytes runs past the end of its column chunk (",
                     chunk_.size() - body, " bytes left)"));
    }
    if (h.compressed_size > max_page_bytes_ || h.uncompressed_size > max_page_bytes_) {
      p.fail(str_cat("page size ", std::max(h.compressed_size, h.uncompressed_size), " exceeds the reader's limit of ",
                     max_page_bytes_, " bytes"));
    }
    p.payload = chunk_.substr(body, static_cast<size_t>(h.compressed_size));
    pos_ = body + static_cast<size_t>(h.compressed_size);
    page_no_++;
    if (stats_) {
      stats_->pages++;
      stats_->crc_pages += h.has_crc;
    }
    if (h.has_crc) {
      const auto crc = static_cast<uint32_t>(
          crc32(0L, reinterpret_cast<const Bytef*>(p.payload.data()), static_cast<uInt>(p.payload.size())));
      if (crc != h.crc)
        p.fail(str_cat("page CRC mismatch (stored ", h.crc, ", computed ", crc, "): the page is corrupt"));
    }
    if (h.type == kIndexPage) continue;
    if (h.type != kDataPage && h.type != kDataPageV2 && h.type != kDictionaryPage)
      p.fail(str_cat("unknown page type ", h.type));
    if (!h.has_body) p.fail("page header lacks its type-specific header");
    return p;
  }
}

std::string dictionary_page_body(const Page& p, int32_t codec, bool seen_before) {
  if (seen_before) p.fail("unexpected second dictionary page (or dictionary page after data pages)");
  if (p.h.encoding != kPlain && p.h.encoding != kPlainDictionary)
    p.fail("dictionary page encoding " + encoding_name(p.h.encoding) + " is not supported");
  return decompress(codec, p.payload, static_cast<size_t>(p.h.uncompressed_size), p.where);
}

std::vector<std::string_view> split_plain_strings(const Page& p, std::string_view v, size_t n, const char* what) {
  std::vector<std::string_view> out;
  out.reserve(std::min(n, v.size() / 4));  // each value takes 4 bytes or more
  size_t at = 0;
  for (size_t k = 0; k < n; ++k) {
    if (v.size() - at < 4) p.fail(str_cat(what, " ", k, " of ", n, ": length prefix is truncated"));
    const uint32_t len = load_le32(reinterpret_cast<const uint8_t*>(v.data() + at));
    at += 4;
    if (len > v.size() - at) p.fail(str_cat(what, " ", k, " of ", len, " bytes runs past the end of the page"));
    out.push_back(v.substr(at, len));
    at += len;
  }
  return out;
}

namespace {

// Appends n levels of maximum `max` in the hybrid encoding at [u, u + len) to out.
void page_levels(const Page& p, const uint8_t* u, size_t len, int max, size_t n, std::vector<uint32_t>& out,
                 const char* what) {
  decode_hybrid(u, len, bit_width(max), n, out, [&](const std::string& w) { p.fail(str_cat(what, ": ", w)); });
}

}  // namespace

std::string_view split_data_page(const Page& p, int32_t codec, int max_rep, int max_def, size_t n,
                                 std::vector<uint32_t>& rep, std::vector<uint32_t>& def, std::string& data) {
  const PageHeader& h = p.h;
  if (h.type == kDataPage) {  // v1: [4-byte length, rep levels][4-byte length, def levels] values, all compressed
    data = decompress(codec, p.payload, static_cast<size_t>(h.uncompressed_size), p.where);
    const auto* u = reinterpret_cast<const uint8_t*>(data.data());
    size_t at = 0;
    for (int pass = 0; pass < 2; ++pass) {
      const int max = pass == 0 ? max_rep : max_def;
      if (max == 0) continue;
      const char* what = pass == 0 ? "repetition levels" : "definition levels";
      const int32_t enc = pass == 0 ? h.rep_encoding : h.def_encoding;
      if (enc != kRle) p.fail(str_cat(what, " encoding ", encoding_name(enc), " is not supported (only RLE)"));
      if (data.size() - at < 4) p.fail(str_cat(what, " length is truncated"));
      const uint32_t len = load_le32(u + at);
      if (len > data.size() - at - 4)
        p.fail(str_cat(what, " length ", len, " exceeds the page's ", data.size() - at - 4, " bytes"));
      page_levels(p, u + at + 4, len, max, n, pass == 0 ? rep : def, what);
      at += 4 + len;
    }
    return std::string_view(data).substr(at);
  }
  // v2: [rep levels][def levels] uncompressed, then the values (compressed when is_compressed)
  const uint64_t lv = static_cast<uint64_t>(h.rep_bytes) + static_cast<uint64_t>(h.def_bytes);
  if (lv > p.payload.size() || lv > static_cast<uint64_t>(h.uncompressed_size))
    p.fail("v2 level lengths exceed the page size");
  if (max_rep == 0 && h.rep_bytes != 0) p.fail("v2 page has repetition levels but the column is not repeated");
  if (max_def == 0 && h.def_bytes != 0) p.fail("v2 page has definition levels but the column is REQUIRED");
  const auto* u = reinterpret_cast<const uint8_t*>(p.payload.data());
  if (max_rep > 0) page_levels(p, u, static_cast<size_t>(h.rep_bytes), max_rep, n, rep, "repetition levels");
  if (max_def > 0)
    page_levels(p, u + h.rep_bytes, static_cast<size_t>(h.def_bytes), max_def, n, def, "definition levels");
  const std::string_view enc = p.payload.substr(static_cast<size_t>(lv));
  const size_t raw = static_cast<size_t>(h.uncompressed_size) - static_cast<size_t>(lv);
  if (h.is_compressed && codec != static_cast<int32_t>(Codec::Uncompressed)) {
    data = decompress(codec, enc, raw, p.where);
  } else {
    if (enc.size() != raw) p.fail("uncompressed v2 page: sizes in the header disagree");
    data = std::string(enc);
  }
  return data;
}

size_t count_defined(const Page& p, const std::vector<uint32_t>& def, size_t from, int max_def) {
  if (max_def == 0) return static_cast<size_t>(p.h.num_values);
  size_t n = 0;
  for (size_t k = from; k < def.size(); ++k) {
    if (def[k] > static_cast<uint32_t>(max_def))
      p.fail(str_cat("definition level ", def[k], " exceeds the maximum ", max_def));
    n += def[k] == static_cast<uint32_t>(max_def);
  }
  return n;
}

bool dictionary_encoded(const Page& p) {
  if (p.h.encoding == kPlain) return false;
  if (p.h.encoding == kPlainDictionary || p.h.encoding == kRleDictionary) return true;
  p.fail("value encoding " + encoding_name(p.h.encoding) +
         " is not supported (supported: PLAIN, PLAIN_DICTIONARY, RLE_DICTIONARY)");
}

void dictionary_indices(const Page& p, std::string_view values, size_t n, size_t dict_size,
                        std::vector<uint32_t>& out) {
  out.clear();
  if (n == 0) return;
  if (values.empty()) p.fail("dictionary-encoded page lacks its bit width byte");
  decode_hybrid(reinterpret_cast<const uint8_t*>(values.data()) + 1, values.size() - 1, static_cast<uint8_t>(values[0]),
                n, out, [&](const std::string& w) { p.fail("dictionary indices: " + w); });
  for (uint32_t ix : out) {
    if (ix >= dict_size)
      p.fail(str_cat("dictionary index ", ix, " out of range (dictionary has ", dict_size, " entries)"));
  }
}

}  // namespace nanochat::data::parquet_format
