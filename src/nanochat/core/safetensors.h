#pragma once
// safetensors reader/writer (format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the raw little-endian tensor bytes). Used for fixtures, weights and checkpoints, so the
// Python ecosystem (safetensors, PyTorch) reads what we write and vice versa.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nanochat {

/// One tensor held in memory: dtype is a safetensors dtype string ("F32", "F64", "I32", "I64", "U8"...).
struct StTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const;
  /// Converts to fp32 (from F32, F64, I32 or I64). Throws nanochat::Error for other dtypes.
  std::vector<float> to_f32() const;
  /// Converts to int64 (from I32, I64 or U8). Throws nanochat::Error for other dtypes.
  std::vector<int64_t> to_i64() const;
};

/// A whole safetensors file loaded into memory.
struct StFile {
  std::map<std::string, StTensor> tensors;
  std::map<std::string, std::string> metadata;

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  /// Returns the tensor or throws nanochat::Error naming the file and the missing key.
  const StTensor& at(const std::string& name) const;
  std::string path;  ///< where it was read from (for error messages)
};

/// Reads a safetensors file. Throws nanochat::Error naming the file on I/O or format errors.
StFile load_safetensors(const std::string& path);

/// Tensor to write: data points at numel(shape) elements of the dtype's size.
struct StWriteEntry {
  std::string name;
  std::string dtype;  ///< "F32", "I32", "I64", "U8", "F64"
  std::vector<int64_t> shape;
  const void* data;
};

/// Writes a safetensors file (tensors in the given order; metadata as "__metadata__").
/// The file is written and fsynced; it is not renamed (callers do atomic renames themselves).
/// Throws nanochat::Error naming the path on I/O errors.
void save_safetensors(const std::string& path, const std::vector<StWriteEntry>& entries,
                      const std::map<std::string, std::string>& metadata = {});

/// Size in bytes of one element of a safetensors dtype; throws for unknown dtypes.
size_t st_dtype_size(const std::string& dtype);

}  // namespace nanochat
