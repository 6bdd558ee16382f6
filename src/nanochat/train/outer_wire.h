#pragma once
// The numbers a DiLoCo node sends its change in (train/diloco_sync.h, --sync-dtype): the outer
// exchange is the only traffic of a round, so its size is what a slow link pays for.
//
//  * Float32: the floats as they are (4 bytes each).
//  * BFloat16: each float rounded to the nearest bfloat16, ties to even (2 bytes each); the
//    relative error of one value is at most 2^-8.
//  * Int8: blocks of kInt8Block floats (the last one shorter), each sent as its float32 scale
//    s = max|x| / 127 followed by one int8 per float, q = round(x / s) (ties away from zero);
//    decoded as q * s, so a value's error is at most s / 2 = max|x of its block| / 254. A block
//    of zeros has scale 0 and decodes to zeros. 1 + 4/256 bytes per float.
//
// Non-finite inputs are refused (the caller names the node): a diverged node must not poison the
// average.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nanochat/plan/plan.h"

namespace nanochat {

inline constexpr size_t kInt8Block = 256;

/// Bytes that encode n floats in `dtype`.
size_t wire_bytes(WireDtype dtype, size_t n);

/// Encodes x[0..n) into out (resized to wire_bytes(dtype, n)). Returns false (out unspecified)
/// when a value is not finite.
bool encode_wire(WireDtype dtype, const float* x, size_t n, std::vector<uint8_t>& out);

/// Adds the n floats that `bytes` (wire_bytes(dtype, n) of them, from encode_wire) decode to
/// onto acc[0..n).
void add_decoded_wire(WireDtype dtype, const uint8_t* bytes, size_t n, float* acc);

/// The name of `dtype` as --sync-dtype spells it.
const char* wire_dtype_name(WireDtype dtype);

}  // namespace nanochat
