#pragma once
// A strict reader for the small XML documents the product writes (SVG charts): elements,
// attributes in double or single quotes, text, the five predefined entities and numeric character
// references, comments and an XML declaration. No DTD, CDATA or namespaces processing. It throws
// std::runtime_error with the byte offset on anything that is not well-formed XML 1.0 in that
// subset (an unclosed or mismatched tag, a bare '&' or '<', an unquoted or repeated attribute,
// a control character, text outside the root, invalid UTF-8).
#include <cctype>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace nctest {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  ///< the element's own character data, entities decoded
  std::vector<std::unique_ptr<XmlElement>> children;

  /// Every element of this subtree (itself first) named `n`, in document order.
  void find_all(const std::string& n, std::vector<const XmlElement*>& out) const {
    if (name == n) out.push_back(this);
    for (const auto& c : children) c->find_all(n, out);
  }
};

class XmlLite {
 public:
  static std::unique_ptr<XmlElement> parse(const std::string& s) {
    XmlLite p(s);
    return p.document();
  }

 private:
  explicit XmlLite(const std::string& s) : s_(s) {}

  [[noreturn]] void bad(const std::string& what) const {
    throw std::runtime_error("not well-formed XML at byte " + std::to_string(i_) + ": " + what);
  }
  bool starts(const char* t) const { return s_.compare(i_, std::char_traits<char>::length(t), t) == 0; }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  static bool name_char(char c, bool first) {
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    return alpha || (!first && ((c >= '0' && c <= '9') || c == '-' || c == '.'));
  }
  std::string name() {
    const size_t b = i_;
    if (i_ >= s_.size() || !name_char(s_[i_], true)) bad("expected a name");
    while (i_ < s_.size() && name_char(s_[i_], false)) ++i_;
    return s_.substr(b, i_ - b);
  }
  // Checks one character of character data (UTF-8 and XML's allowed characters) and copies it.
  void char_data(std::string& out) {
    const unsigned char c = static_cast<unsigned char>(s_[i_]);
    if (c < 0x80) {
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') bad("control character");
      out += static_cast<char>(c);
      ++i_;
      return;
    }
    const int n = (c >= 0xC2 && c <= 0xDF) ? 1 : (c >= 0xE0 && c <= 0xEF) ? 2 : (c >= 0xF0 && c <= 0xF4) ? 3 : -1;
    if (n < 0 || i_ + static_cast<size_t>(n) >= s_.size()) bad("invalid UTF-8");
    for (int j = 1; j <= n; ++j)
      if ((static_cast<unsigned char>(s_[i_ + j]) & 0xC0) != 0x80) bad("invalid UTF-8");
    out.append(s_, i_, static_cast<size_t>(n) + 1);
    i_ += static_cast<size_t>(n) + 1;
  }
  void entity(std::string& out) {
    const size_t semi = s_.find(';', i_);
    if (semi == std::string::npos || semi - i_ > 10) bad("bare '&'");
    const std::string e = s_.substr(i_ + 1, semi - i_ - 1);
    if (e == "lt")
      out += '<';
    else if (e == "gt")
      out += '>';
    else if (e == "amp")
      out += '&';
    else if (e == "quot")
      out += '"';
    else if (e == "apos")
      out += '\'';
    else if (e.size() > 1 && e[0] == '#')
      out += '?';  // a numeric reference: well-formed if digits
    else
      bad("unknown entity &" + e + ";");
    if (e[0] == '#')
      for (size_t k = 1; k < e.size(); ++k)
        if (!std::isxdigit(static_cast<unsigned char>(e[k])) && !(k == 1 && e[k] == 'x')) bad("bad reference");
    i_ = semi + 1;
  }
  void misc() {  // comments, declarations and space between the top-level parts
    for (;;) {
      skip_space();
      if (starts("<?")) {
        const size_t e = s_.find("?>", i_);
        if (e == std::string::npos) bad("unclosed declaration");
        i_ = e + 2;
      } else if (starts("<!--")) {
        const size_t e = s_.find("-->", i_);
        if (e == std::string::npos) bad("unclosed comment");
        i_ = e + 3;
      } else {
        return;
      }
    }
  }
  std::unique_ptr<XmlElement> element() {
    if (!starts("<")) bad("expected '<'");
    ++i_;
    auto el = std::make_unique<XmlElement>();
    el->name = name();
    for (;;) {
      const size_t before = i_;
      skip_space();
      if (starts("/>")) {
        i_ += 2;
        return el;
      }
      if (starts(">")) {
        ++i_;
        break;
      }
      if (i_ == before) bad("expected space before an attribute");
      const std::string a = name();
      skip_space();
      if (!starts("=")) bad("attribute " + a + " without '='");
      ++i_;
      skip_space();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) bad("attribute " + a + " not quoted");
      const char q = s_[i_++];
      std::string v;
      while (i_ < s_.size() && s_[i_] != q) {
        if (s_[i_] == '<') bad("'<' in attribute " + a);
        if (s_[i_] == '&')
          entity(v);
        else
          char_data(v);
      }
      if (i_ >= s_.size()) bad("unclosed attribute " + a);
      ++i_;
      if (!el->attrs.emplace(a, v).second) bad("repeated attribute " + a);
    }
    for (;;) {
      if (i_ >= s_.size()) bad("unclosed <" + el->name + ">");
      if (starts("</")) {
        i_ += 2;
        if (name() != el->name) bad("mismatched end tag of <" + el->name + ">");
        skip_space();
        if (!starts(">")) bad("expected '>'");
        ++i_;
        return el;
      }
      if (starts("<!--")) {
        const size_t e = s_.find("-->", i_);
        if (e == std::string::npos) bad("unclosed comment");
        i_ = e + 3;
      } else if (starts("<")) {
        el->children.push_back(element());
      } else if (s_[i_] == '&') {
        entity(el->text);
      } else {
        char_data(el->text);
      }
    }
  }
  std::unique_ptr<XmlElement> document() {
    misc();
    auto root = element();
    misc();
    if (i_ != s_.size()) bad("content after the root element");
    return root;
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace nctest
