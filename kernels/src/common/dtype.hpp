// Element types of the library and their host-side conversions (CPU reference path).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include <dlpack/dlpack.h>

namespace opforge {

enum class DType { kFloat32, kFloat16, kBFloat16, kInt64, kOther };

inline DType dtype_of(DLDataType t) {
  if (t.lanes != 1) return DType::kOther;
  if (t.code == kDLFloat && t.bits == 32) return DType::kFloat32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kFloat16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBFloat16;
  if (t.code == kDLInt && t.bits == 64) return DType::kInt64;
  return DType::kOther;
}

inline bool is_floating(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16;
}

// A dtype's name in messages: float32, int64, bool, complex64, ...; a code opforge has no name
// for (float8 kinds, what an adapter could not map) is "unsupported" with its DLPack code.
inline std::string dtype_string(DLDataType t) {
  std::string s;
  switch (t.code) {
    case kDLFloat: s = "float" + std::to_string(t.bits); break;
    case kDLInt: s = "int" + std::to_string(t.bits); break;
    case kDLUInt: s = "uint" + std::to_string(t.bits); break;
    case kDLBfloat: s = "bfloat" + std::to_string(t.bits); break;
    case kDLComplex: s = "complex" + std::to_string(t.bits); break;
    case kDLBool: s = "bool"; break;
    default:
      return "unsupported (DLPack code " + std::to_string(t.code) + ")";
  }
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

// 16-bit storage types for the CPU path; arithmetic always happens in float or double.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline float to_float(float v) { return v; }

inline float to_float(BFloat16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float to_float(Half v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1f;
  uint32_t mant = v.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;  // signed zero
  } else {
    // Subnormal half: normalise into a float.
    exp = 113;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --exp;
    }
    u = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <class T>
T from_float(float f);

template <>
inline float from_float<float>(float f) {
  return f;
}

template <>
inline BFloat16 from_float<BFloat16>(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

template <>
inline Half from_float<Half>(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return Half{static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u))};
  }
  if (abs >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: scale by 2^24 and round in float arithmetic.
    float mag;
    std::memcpy(&mag, &abs, sizeof mag);
    const float scaled = std::nearbyint(mag * 16777216.0f);  // ties to even (default mode)
    return Half{static_cast<uint16_t>(sign | static_cast<uint16_t>(scaled))};
  }
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // ties to even
  return Half{static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13))};
}

}  // namespace opforge
