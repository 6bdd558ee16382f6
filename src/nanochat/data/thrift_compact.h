#pragma once
// Thrift compact protocol, the encoding of Parquet's footer (FileMetaData) and page headers.
// Spec: https://github.com/apache/thrift/blob/master/doc/specs/thrift-compact-protocol.md
//
// Only what Parquet needs: structs, i16/i32/i64 (zigzag varints), bool, double, binary, list/set,
// map (skipped). The reader checks every length against the bytes it was given and throws
// nanochat::Error naming the file and the absolute byte offset; it never reads out of bounds,
// never allocates more than the remaining input, and limits nesting depth (no stack overflow).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanochat::data::thrift {

/// Compact-protocol type codes (the low nibble of a field header).
enum class CType : uint8_t {
  Stop = 0,
  True = 1,   // bool field with value true (in a field header); list element code for bool
  False = 2,  // bool field with value false
  Byte = 3,
  I16 = 4,
  I32 = 5,
  I64 = 6,
  Double = 7,
  Binary = 8,
  List = 9,
  Set = 10,
  Map = 11,
  Struct = 12,
};

/// Reads compact-protocol values from the byte range [data, data + size), which sits at absolute
/// offset `base_offset` of the file `file` (used only in error messages).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, std::string file, int64_t base_offset);

  /// Enter a struct: resets the field-id delta base (nesting up to 64 levels).
  void begin_struct();
  /// Leave a struct (after next_field returned false).
  void end_struct();
  /// Reads the next field header of the current struct. Returns false at the STOP byte.
  /// For bool fields the value is in `type` (True/False) and no payload follows.
  bool next_field(int16_t& id, CType& type);

  bool read_bool(CType field_type);  // value of a bool field (from its header type)
  int8_t read_byte();
  int16_t read_i16();
  int32_t read_i32();
  int64_t read_i64();
  double read_double();
  /// A binary/string: varint length + bytes (length checked against the remaining input).
  std::string_view read_binary();
  /// List/set header: element type and count (count checked: each element needs >= 1 byte).
  void read_list_header(CType& elem, int64_t& count);
  /// Reads one list element of type bool.
  bool read_list_bool();
  /// Skips one value of the given type (recursively for containers, depth-limited).
  void skip(CType type);

  /// Bytes consumed so far (relative to `data`).
  size_t pos() const { return pos_; }
  /// Throws nanochat::Error: "<file>: byte offset <abs>: <what>".
  [[noreturn]] void fail(const std::string& what) const;

 private:
  uint64_t read_varint();
  int64_t read_zigzag();
  uint8_t read_u8();
  void skip_depth(CType type, int depth);

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string file_;
  int64_t base_;
  std::vector<int16_t> last_id_;  // field-id delta base per open struct
};

/// Writes compact-protocol values into a byte string (used by the Parquet writer).
class Writer {
 public:
  void begin_struct();
  void end_struct();  // writes STOP
  void field_i32(int16_t id, int32_t v);
  void field_i64(int16_t id, int64_t v);
  void field_bool(int16_t id, bool v);
  void field_binary(int16_t id, std::string_view v);
  /// Field header only (for list/struct fields); the caller writes the payload.
  void field_header(int16_t id, CType type);
  void list_header(CType elem, int64_t count);
  void i32(int32_t v);
  void i64(int64_t v);
  void binary(std::string_view v);

  const std::string& bytes() const { return out_; }
  std::string& bytes() { return out_; }

 private:
  void varint(uint64_t v);
  std::string out_;
  std::vector<int16_t> last_id_;
};

}  // namespace nanochat::data::thrift
