#pragma once
// Standard base64 (RFC 4648, '+' '/', '=' padding), as used by tiktoken rank files.
#include <string>
#include <string_view>

namespace nanochat {

/// Encodes bytes as padded base64.
std::string base64_encode(std::string_view bytes);
/// Decodes padded base64 into *out; returns false (leaving *out unspecified) on malformed input.
bool base64_decode(std::string_view text, std::string* out);

}  // namespace nanochat
