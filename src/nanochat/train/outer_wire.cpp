#include "nanochat/train/outer_wire.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace nanochat {

namespace {

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

size_t int8_bytes(size_t n) { return n + 4 * ((n + kInt8Block - 1) / kInt8Block); }

}  // namespace

size_t wire_bytes(WireDtype dtype, size_t n) {
  switch (dtype) {
    case WireDtype::BFloat16:
      return 2 * n;
    case WireDtype::Int8:
      return int8_bytes(n);
    case WireDtype::Float32:
      break;
  }
  return 4 * n;
}

const char* wire_dtype_name(WireDtype dtype) {
  switch (dtype) {
    case WireDtype::BFloat16:
      return "bfloat16";
    case WireDtype::Int8:
      return "int8";
    case WireDtype::Float32:
      break;
  }
  return "float32";
}

bool encode_wire(WireDtype dtype, const float* x, size_t n, std::vector<uint8_t>& out) {
  out.resize(wire_bytes(dtype, n));
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  uint8_t* o = out.data();
  if (dtype == WireDtype::Float32) {
    std::memcpy(o, x, 4 * n);
  } else if (dtype == WireDtype::BFloat16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = to_bf16(x[i]);
      std::memcpy(o + 2 * i, &h, 2);
    }
  } else {
    for (size_t b = 0; b < n; b += kInt8Block) {
      const size_t len = std::min(kInt8Block, n - b);
      float mx = 0;
      for (size_t i = 0; i < len; ++i) mx = std::max(mx, std::fabs(x[b + i]));
      const float scale = mx / 127.f;
      std::memcpy(o, &scale, 4);
      o += 4;
      for (size_t i = 0; i < len; ++i) {
        const float q = scale > 0 ? std::round(x[b + i] / scale) : 0.f;
        o[i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.f, 127.f)));
      }
      o += len;
    }
  }
  return true;
}

void add_decoded_wire(WireDtype dtype, const uint8_t* bytes, size_t n, float* acc) {
  if (dtype == WireDtype::Float32) {
    for (size_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, bytes + 4 * i, 4);
      acc[i] += f;
    }
  } else if (dtype == WireDtype::BFloat16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * i, 2);
      acc[i] += from_bf16(h);
    }
  } else {
    const uint8_t* p = bytes;
    for (size_t b = 0; b < n; b += kInt8Block) {
      const size_t len = std::min(kInt8Block, n - b);
      float scale;
      std::memcpy(&scale, p, 4);
      p += 4;
      for (size_t i = 0; i < len; ++i) acc[b + i] += static_cast<float>(static_cast<int8_t>(p[i])) * scale;
      p += len;
    }
  }
}

}  // namespace nanochat
