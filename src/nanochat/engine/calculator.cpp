#include "nanochat/engine/calculator.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <variant>

namespace nanochat {

std::string python_float_str(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  // Shortest round-trip digits and decimal exponent, from the scientific form "d.ddde+XX".
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int decpt = exp10 + 1;  // value = 0.<digits> * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {  // Python's repr: fixed notation in this range
    if (decpt <= 0) return sign + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    if (decpt < n)
      return sign + digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    return sign + digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
  }
  std::string mant = digits.substr(0, 1);
  if (n > 1) mant += "." + digits.substr(1);
  const int ex = decpt - 1;
  std::string es = std::to_string(ex < 0 ? -ex : ex);
  if (es.size() < 2) es = "0" + es;
  return sign + mant + "e" + (ex < 0 ? "-" : "+") + es;
}

namespace {

using Value = std::variant<int64_t, double>;

// Position in an expression with the two moves both parsers make: skip spaces, eat a token.
struct Scanner {
  explicit Scanner(std::string_view s) : s_(s) {}
  void skip_ws() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }
  bool eat(std::string_view tok) {
    skip_ws();
    if (s_.substr(pos_, tok.size()) != tok) return false;
    pos_ += tok.size();
    return true;
  }
  std::string_view s_;
  size_t pos_ = 0;
};

// Recursive-descent parser and evaluator of the arithmetic subset (calculator.h). Every failure
// (syntax, division by zero, integer overflow) makes ok false; the caller refuses the expression.
class Arith : Scanner {
 public:
  explicit Arith(std::string_view s) : Scanner(s) {}

  std::optional<Value> run() {
    Value v = expr();
    skip_ws();
    if (!ok_ || pos_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  Value bad() {
    ok_ = false;
    return int64_t{0};
  }
  static double as_double(const Value& v) {
    return std::holds_alternative<int64_t>(v) ? static_cast<double>(std::get<int64_t>(v)) : std::get<double>(v);
  }
  static bool both_int(const Value& a, const Value& b) {
    return std::holds_alternative<int64_t>(a) && std::holds_alternative<int64_t>(b);
  }

  Value expr() {
    Value v = term();
    for (;;) {
      if (!ok_) return v;
      if (eat("+")) {
        v = add(v, term(), +1);
      } else if (eat("-")) {
        v = add(v, term(), -1);
      } else {
        return v;
      }
    }
  }
  Value term() {
    Value v = factor();
    for (;;) {
      if (!ok_) return v;
      if (eat("//")) {
        v = floordiv(v, factor());
      } else if (eat("*")) {
        v = mul(v, factor());
      } else if (eat("/")) {
        v = truediv(v, factor());
      } else {
        return v;
      }
    }
  }
  // Nesting (parentheses and unary signs) is bounded like Python's parser, which refuses more than
  // 200 nested parentheses; it also bounds this parser's recursion on model-written text.
  static constexpr int kMaxDepth = 201;  // n nested parentheses = n + 1 nested factors

  Value factor() {
    if (++depth_ > kMaxDepth) return bad();
    Value v = signed_atom();
    --depth_;
    return v;
  }
  Value signed_atom() {
    if (eat("+")) return factor();  // unary plus: int stays int, float stays float
    if (eat("-")) {
      Value v = factor();
      if (!ok_) return v;
      if (std::holds_alternative<double>(v)) return -std::get<double>(v);
      const int64_t i = std::get<int64_t>(v);
      if (i == std::numeric_limits<int64_t>::min()) return bad();
      return -i;
    }
    return atom();
  }
  Value atom() {
    if (eat("(")) {
      Value v = expr();
      if (!ok_ || !eat(")")) return bad();
      return v;
    }
    return number();
  }
  // Python's int and float literals over digits and '.', no exponent (no 'e' in the alphabet).
  Value number() {
    skip_ws();
    const size_t start = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    const size_t int_end = pos_;
    bool is_float = false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      is_float = true;
      ++pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    const std::string_view lit = s_.substr(start, pos_ - start);
    if (lit.empty() || lit == ".") return bad();
    if (is_float) {
      double d = 0;
      auto r = std::from_chars(lit.data(), lit.data() + lit.size(), d);
      if (r.ec != std::errc() || r.ptr != lit.data() + lit.size()) return bad();
      return d;
    }
    const std::string_view digits = s_.substr(start, int_end - start);
    // A decimal int literal other than zero may not start with 0 (Python 3).
    if (digits.size() > 1 && digits[0] == '0' && digits.find_first_not_of('0') != std::string_view::npos) return bad();
    int64_t i = 0;
    auto r = std::from_chars(digits.data(), digits.data() + digits.size(), i);
    if (r.ec != std::errc()) return bad();  // beyond 64 bits
    return i;
  }

  Value add(const Value& a, const Value& b, int sign) {
    if (!ok_) return a;
    if (both_int(a, b)) {
      int64_t out = 0;
      const bool ovf = sign > 0 ? __builtin_add_overflow(std::get<int64_t>(a), std::get<int64_t>(b), &out)
                                : __builtin_sub_overflow(std::get<int64_t>(a), std::get<int64_t>(b), &out);
      if (ovf) return bad();
      return out;
    }
    return sign > 0 ? as_double(a) + as_double(b) : as_double(a) - as_double(b);
  }
  Value mul(const Value& a, const Value& b) {
    if (!ok_) return a;
    if (both_int(a, b)) {
      int64_t out = 0;
      if (__builtin_mul_overflow(std::get<int64_t>(a), std::get<int64_t>(b), &out)) return bad();
      return out;
    }
    return as_double(a) * as_double(b);
  }
  Value truediv(const Value& a, const Value& b) {
    if (!ok_) return a;
    if (both_int(a, b)) {
      const int64_t x = std::get<int64_t>(a), y = std::get<int64_t>(b);
      if (y == 0) return bad();
      // Python rounds int / int correctly; doubles do for operands below 2^53, long double beyond.
      constexpr int64_t kExact = int64_t{1} << 53;
      if (x > -kExact && x < kExact && y > -kExact && y < kExact)
        return static_cast<double>(x) / static_cast<double>(y);
      return static_cast<double>(static_cast<long double>(x) / static_cast<long double>(y));
    }
    const double y = as_double(b);
    if (y == 0.0) return bad();
    return as_double(a) / y;
  }
  Value floordiv(const Value& a, const Value& b) {
    if (!ok_) return a;
    if (both_int(a, b)) {
      const int64_t x = std::get<int64_t>(a), y = std::get<int64_t>(b);
      if (y == 0 || (x == std::numeric_limits<int64_t>::min() && y == -1)) return bad();
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return q;
    }
    // CPython's float floor division (float_divmod).
    const double vx = as_double(a), wx = as_double(b);
    if (wx == 0.0) return bad();
    double mod = std::fmod(vx, wx);
    double div = (vx - mod) / wx;
    if (mod != 0.0 && ((wx < 0) != (mod < 0))) div -= 1.0;
    if (div == 0.0) return std::copysign(0.0, vx / wx);
    double fl = std::floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return fl;
  }

  bool ok_ = true;
  int depth_ = 0;
};

// The string-counting form: literal(s), then .lower()/.upper()/.strip() calls, then .count(literal).
class Counter : Scanner {
 public:
  explicit Counter(std::string_view s) : Scanner(s) {}

  std::optional<int64_t> run() {
    auto hay = literals();
    if (!hay) return std::nullopt;
    for (;;) {
      if (!eat(".")) return std::nullopt;
      const std::string name = ident();
      if (!eat("(")) return std::nullopt;
      if (name == "count") {
        auto needle = literals();
        if (!needle || !eat(")")) return std::nullopt;
        skip_ws();
        if (pos_ != s_.size()) return std::nullopt;
        return count(*hay, *needle);
      }
      if (!eat(")")) return std::nullopt;
      if (name == "lower") {
        for (char& c : *hay) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      } else if (name == "upper") {
        for (char& c : *hay) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      } else if (name == "strip") {
        const size_t b = hay->find_first_not_of(' ');
        *hay = b == std::string::npos ? std::string() : hay->substr(b, hay->find_last_not_of(' ') - b + 1);
      } else {
        return std::nullopt;
      }
    }
  }

 private:
  std::string ident() {
    skip_ws();
    const size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }
  // One or more adjacent quoted literals, concatenated. Triple quotes are refused.
  std::optional<std::string> literals() {
    std::string out;
    int n = 0;
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) break;
      const char q = s_[pos_];
      if (s_.substr(pos_, 3) == std::string(3, q)) return std::nullopt;
      const size_t end = s_.find(q, pos_ + 1);
      if (end == std::string_view::npos) return std::nullopt;
      out += s_.substr(pos_ + 1, end - pos_ - 1);
      pos_ = end + 1;
      ++n;
    }
    if (n == 0) return std::nullopt;
    return out;
  }
  // Python's str.count: non-overlapping occurrences; an empty needle matches len + 1 times.
  static int64_t count(const std::string& hay, const std::string& needle) {
    if (needle.empty()) return static_cast<int64_t>(hay.size()) + 1;
    int64_t c = 0;
    for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++c;
    return c;
  }
};

bool all_in(std::string_view s, std::string_view allowed) {
  for (char c : s)
    if (allowed.find(c) == std::string_view::npos) return false;
  return true;
}

}  // namespace

std::optional<std::string> use_calculator(std::string_view expr_in) {
  std::string expr;
  for (char c : expr_in)
    if (c != ',') expr += c;
  if (all_in(expr, "0123456789*+-/.() ")) {
    if (expr.find("**") != std::string::npos) return std::nullopt;
    // Python evaluates "()" (also "(( ))") to the empty tuple, whose str() is "()".
    std::string bare;
    for (char c : expr)
      if (c != ' ') bare += c;
    const size_t opens = bare.find_first_not_of('(');
    if (!bare.empty() && opens != std::string::npos && opens * 2 == bare.size() &&
        bare.find_first_not_of(')', opens) == std::string::npos)
      return "()";
    auto v = Arith(expr).run();
    if (!v) return std::nullopt;
    if (std::holds_alternative<int64_t>(*v)) return std::to_string(std::get<int64_t>(*v));
    return python_float_str(std::get<double>(*v));
  }
  if (!all_in(expr, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'\"()._ ")) return std::nullopt;
  std::string lower = expr;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* bad : {"__", "import", "exec", "eval", "compile", "open", "file", "input", "raw_input", "globals",
                          "locals", "vars", "dir", "getattr", "setattr", "delattr", "hasattr"})
    if (lower.find(bad) != std::string::npos) return std::nullopt;
  if (expr.find(".count(") == std::string::npos) return std::nullopt;
  auto n = Counter(expr).run();
  if (!n) return std::nullopt;
  return std::to_string(*n);
}

}  // namespace nanochat
