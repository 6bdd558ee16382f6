#pragma once
// PyTorch's zip checkpoint format (what torch.save writes and torch.load reads), for state dicts
// of plain tensors and for single tensors:
//   <archive>/data.pkl            pickle (protocol 2) of the object; each tensor is
//                                 torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
//                                 requires_grad, OrderedDict()) with the storage a persistent id
//                                 ('storage', torch.<Type>Storage, key, 'cpu', numel)
//   <archive>/data/<key>          the storage's raw little-endian bytes, 64-byte aligned
//   <archive>/.format_version     "1";  <archive>/.storage_alignment  "64"
//   <archive>/byteorder           "little"
//   <archive>/version             "3"
// <archive> is the file name without its extension, as torch names it. A state dict is a
// collections.OrderedDict of name -> tensor, so torch.load(path, weights_only=True) returns it.
// Reading goes through the restricted unpickler of core/pickle.h: only OrderedDict,
// _rebuild_tensor_v2 and the storage types of the dtypes below are accepted.
// Dtypes: "F32" (FloatStorage), "BF16" (BFloat16Storage), "I32" (IntStorage), "I64" (LongStorage),
// little-endian only; tensors must be contiguous (torch.save of a state dict writes them so).
#include <string>
#include <utility>
#include <vector>

#include "nanochat/core/pickle.h"
#include "nanochat/core/safetensors.h"
#include "nanochat/core/zip_store.h"

namespace nanochat {

/// Writes `entries` (dtype F32, BF16, I32 or I64) as a torch state dict (OrderedDict) in order,
/// each tensor with its own storage. Writes `path` directly (callers rename for atomicity).
/// Throws nanochat::Error naming the path on I/O failure or an unsupported dtype.
void save_torch_state_dict(const std::string& path, const std::vector<StWriteEntry>& entries);
/// Writes one tensor as torch.save(tensor) does (e.g. nanochat's token_bytes.pt).
void save_torch_tensor(const std::string& path, const StWriteEntry& entry);

/// A state dict read from a torch file, in the file's order.
using TorchStateDict = std::vector<std::pair<std::string, StTensor>>;

/// Reads a torch.save'd dict (OrderedDict or dict) of tensors. `what` names the file in messages;
/// `bytes` is the whole file. Throws nanochat::Error naming the file and the key for anything
/// unexpected: not a zip, a missing or corrupt record, a global outside the allow-list, a value
/// that is not a tensor, an unsupported dtype or byte order, a non-contiguous tensor, or a tensor
/// that runs past its storage.
TorchStateDict parse_torch_state_dict(std::string bytes, const std::string& what);
/// The same for the file at `path`.
TorchStateDict load_torch_state_dict(const std::string& path);
/// Reads a file holding one torch.save'd tensor.
StTensor load_torch_tensor(const std::string& path);

/// torch.save of any nested object of dicts, lists, tuples, numbers, strings and tensors (e.g. an
/// optimizer's state_dict): the caller emits the object through pickle() and each tensor through
/// tensor(), which gives it its own storage. The tensors' data must stay valid until save().
class TorchObjectWriter {
 public:
  PickleWriter& pickle() { return w_; }
  /// Pickles `e` (dtype F32, BF16, I32 or I64) here as a tensor. Throws nanochat::Error for another dtype.
  void tensor(const StWriteEntry& e);
  /// Finishes the pickle and writes the archive to `path` (callers rename for atomicity).
  void save(const std::string& path);

 private:
  PickleWriter w_{2};
  std::vector<StWriteEntry> entries_;
};

/// A torch.save'd object read with the restricted unpickler: the caller walks tree and reads each
/// tensor node through tensor(). `what` in messages is the file.
struct TorchObject {
  ZipReader zip;
  std::string prefix;  ///< "<archive>/"
  PickleTree tree;
  /// The tensor at node idx; throws nanochat::Error naming the file and `ctx` when it is not one
  /// (see parse_torch_state_dict for what is checked).
  StTensor tensor(int idx, const std::string& ctx) const;
};
/// Opens the torch file at `path`. Throws nanochat::Error naming the file when it is not a torch
/// zip or its pickle is malformed or names a global outside the allow-list.
TorchObject load_torch_object(const std::string& path);

/// fp32 values of an F32 or BF16 tensor (bf16 widened exactly). Throws nanochat::Error naming
/// `what` for other dtypes.
std::vector<float> tensor_to_f32(const StTensor& t, const std::string& what);

}  // namespace nanochat
