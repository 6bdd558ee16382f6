#include "nanochat/data/thrift_compact.h"

#include <cstring>

#include "nanochat/core/error.h"

namespace nanochat::data::thrift {

namespace {
constexpr int kMaxDepth = 64;

bool valid_type(uint8_t t) { return t <= static_cast<uint8_t>(CType::Struct); }
}  // namespace

Reader::Reader(const uint8_t* data, size_t size, std::string file, int64_t base_offset)
    : data_(data), size_(size), file_(std::move(file)), base_(base_offset) {}

void Reader::fail(const std::string& what) const {
  nanochat::fail(file_, ": byte offset ", base_ + static_cast<int64_t>(pos_), ": ", what);
}

uint8_t Reader::read_u8() {
  if (pos_ >= size_) fail("unexpected end of Thrift data (file truncated or corrupt)");
  return data_[pos_++];
}

uint64_t Reader::read_varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    uint8_t b = read_u8();
    if (shift == 63 && (b & 0x7e)) fail("varint overflows 64 bits");
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  fail("varint longer than 10 bytes");
}

int64_t Reader::read_zigzag() {
  uint64_t u = read_varint();
  return static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
}

void Reader::begin_struct() {
  if (last_id_.size() >= kMaxDepth) fail("Thrift structs nested too deeply");
  last_id_.push_back(0);
}

void Reader::end_struct() {
  if (!last_id_.empty()) last_id_.pop_back();
}

bool Reader::next_field(int16_t& id, CType& type) {
  uint8_t h = read_u8();
  uint8_t t = h & 0x0f;
  if (t == 0) {
    if (h != 0) fail("malformed Thrift field header (STOP with a field delta)");
    return false;
  }
  if (!valid_type(t)) fail(str_cat("unknown Thrift field type ", int(t)));
  type = static_cast<CType>(t);
  uint8_t delta = h >> 4;
  if (delta == 0) {
    int64_t v = read_zigzag();
    if (v < INT16_MIN || v > INT16_MAX) fail("Thrift field id out of range");
    id = static_cast<int16_t>(v);
  } else {
    id = static_cast<int16_t>(last_id_.empty() ? delta : last_id_.back() + delta);
  }
  if (!last_id_.empty()) last_id_.back() = id;
  return true;
}

bool Reader::read_bool(CType field_type) {
  if (field_type == CType::True) return true;
  if (field_type == CType::False) return false;
  fail("expected a Thrift bool field");
}

int8_t Reader::read_byte() { return static_cast<int8_t>(read_u8()); }

int16_t Reader::read_i16() {
  int64_t v = read_zigzag();
  if (v < INT16_MIN || v > INT16_MAX) fail("Thrift i16 out of range");
  return static_cast<int16_t>(v);
}

int32_t Reader::read_i32() {
  int64_t v = read_zigzag();
  if (v < INT32_MIN || v > INT32_MAX) fail("Thrift i32 out of range");
  return static_cast<int32_t>(v);
}

int64_t Reader::read_i64() { return read_zigzag(); }

double Reader::read_double() {
  if (size_ - pos_ < 8) fail("unexpected end of Thrift data in a double");
  double d;
  std::memcpy(&d, data_ + pos_, 8);
  pos_ += 8;
  return d;
}

std::string_view Reader::read_binary() {
  uint64_t n = read_varint();
  if (n > size_ - pos_) fail(str_cat("Thrift string length ", n, " exceeds the ", size_ - pos_, " bytes left"));
  std::string_view v(reinterpret_cast<const char*>(data_ + pos_), n);
  pos_ += n;
  return v;
}

void Reader::read_list_header(CType& elem, int64_t& count) {
  uint8_t h = read_u8();
  uint8_t t = h & 0x0f;
  // Element type codes in lists: bool may be written as 1 (the spec) or 2 (some writers).
  if (t == 0 || !valid_type(t)) fail(str_cat("unknown Thrift list element type ", int(t)));
  elem = static_cast<CType>(t);
  uint64_t n = h >> 4;
  if (n == 15) n = read_varint();
  // Every element takes at least one byte, so a larger count cannot be genuine.
  if (n > size_ - pos_) fail(str_cat("Thrift list of ", n, " elements exceeds the ", size_ - pos_, " bytes left"));
  count = static_cast<int64_t>(n);
}

bool Reader::read_list_bool() {
  uint8_t b = read_u8();
  if (b == 1) return true;
  if (b == 0 || b == 2) return false;
  fail("malformed bool in a Thrift list");
}

void Reader::skip(CType type) { skip_depth(type, 0); }

void Reader::skip_depth(CType type, int depth) {
  if (depth > kMaxDepth) fail("Thrift values nested too deeply");
  switch (type) {
    case CType::True:
    case CType::False:
      return;  // a bool field carries its value in the header
    case CType::Byte:
      read_u8();
      return;
    case CType::I16:
    case CType::I32:
    case CType::I64:
      read_varint();
      return;
    case CType::Double:
      read_double();
      return;
    case CType::Binary:
      read_binary();
      return;
    case CType::List:
    case CType::Set: {
      CType e;
      int64_t n;
      read_list_header(e, n);
      for (int64_t i = 0; i < n; ++i) {
        if (e == CType::True || e == CType::False)
          read_u8();
        else
          skip_depth(e, depth + 1);
      }
      return;
    }
    case CType::Map: {
      uint64_t n = read_varint();
      if (n == 0) return;
      if (n > size_ - pos_) fail("Thrift map size exceeds the bytes left");
      uint8_t kv = read_u8();
      uint8_t k = kv >> 4, v = kv & 0x0f;
      if (!valid_type(k) || !valid_type(v) || k == 0 || v == 0) fail("bad Thrift map element types");
      for (uint64_t i = 0; i < n; ++i) {
        for (uint8_t t : {k, v}) {
          if (t == 1 || t == 2)
            read_u8();
          else
            skip_depth(static_cast<CType>(t), depth + 1);
        }
      }
      return;
    }
    case CType::Struct: {
      begin_struct();
      int16_t id;
      CType t;
      while (next_field(id, t)) skip_depth(t, depth + 1);
      end_struct();
      return;
    }
    case CType::Stop:
      break;
  }
  fail("cannot skip a Thrift value of unknown type");
}

// ---------------------------------------------------------------------------------------------
void Writer::varint(uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

void Writer::begin_struct() { last_id_.push_back(0); }

void Writer::end_struct() {
  out_.push_back(0);
  last_id_.pop_back();
}

void Writer::field_header(int16_t id, CType type) {
  int last = last_id_.back();
  int delta = id - last;
  if (delta > 0 && delta <= 15) {
    out_.push_back(static_cast<char>((delta << 4) | static_cast<uint8_t>(type)));
  } else {
    out_.push_back(static_cast<char>(static_cast<uint8_t>(type)));
    varint(static_cast<uint16_t>((static_cast<uint16_t>(id) << 1) ^ static_cast<uint16_t>(id >> 15)));
  }
  last_id_.back() = id;
}

void Writer::i32(int32_t v) { varint((static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31)); }
void Writer::i64(int64_t v) { varint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }

void Writer::binary(std::string_view v) {
  varint(v.size());
  out_.append(v);
}

void Writer::field_i32(int16_t id, int32_t v) {
  field_header(id, CType::I32);
  i32(v);
}
void Writer::field_i64(int16_t id, int64_t v) {
  field_header(id, CType::I64);
  i64(v);
}
void Writer::field_bool(int16_t id, bool v) { field_header(id, v ? CType::True : CType::False); }
void Writer::field_binary(int16_t id, std::string_view v) {
  field_header(id, CType::Binary);
  binary(v);
}

void Writer::list_header(CType elem, int64_t count) {
  if (count < 15) {
    out_.push_back(static_cast<char>((count << 4) | static_cast<uint8_t>(elem)));
  } else {
    out_.push_back(static_cast<char>(0xf0 | static_cast<uint8_t>(elem)));
    varint(static_cast<uint64_t>(count));
  }
}

}  // namespace nanochat::data::thrift
