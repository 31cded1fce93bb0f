// Sizes that depend on the input: the integer expressions of size variables
// a plan of symbolic size writes ("(h - 1) // 2 + 1"), with the grammar and
// the rounding of texscope/opencl/sizes.py: integers, names, + - * // %,
// unary minus, parentheses, min, max, truncdiv, truncmod; // and % round
// toward minus infinity (TIR's FloorDiv, FloorMod), trunc* toward zero.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

namespace texscope {

struct SizeNode;

// A number of the plan: a constant, or an expression of size variables.
class Size {
 public:
  Size() = default;
  explicit Size(int64_t value) : value_(value) {}
  // Parses `text`; an Error when it is not an allowed expression.
  static Size parse(const std::string& text);

  bool symbolic() const { return node_ != nullptr; }
  const std::string& text() const { return text_; }
  int64_t value() const { return value_; }  // of a constant
  std::set<std::string> names() const;
  // The value for `values`; an Error for an unbound name or a division by zero.
  int64_t evaluate(const std::map<std::string, int64_t>& values) const;
  std::string str() const { return symbolic() ? text_ : std::to_string(value_); }

 private:
  int64_t value_ = 0;
  std::string text_;
  std::shared_ptr<const SizeNode> node_;
};

}  // namespace texscope
