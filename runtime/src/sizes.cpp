#include "sizes.hpp"

#include <cctype>
#include <vector>

#include "error.hpp"

namespace texscope {

struct SizeNode {
  enum Kind { Number, Name, Negate, Add, Sub, Mul, FloorDiv, FloorMod, Min, Max, TruncDiv, TruncMod };
  Kind kind;
  int64_t number = 0;
  std::string name;
  std::vector<std::shared_ptr<const SizeNode>> operands;
};

namespace {

using Node = std::shared_ptr<const SizeNode>;

Node make(SizeNode::Kind kind, std::vector<Node> operands = {}) {
  auto node = std::make_shared<SizeNode>();
  node->kind = kind;
  node->operands = std::move(operands);
  return node;
}

// Recursive descent over Python's precedence for the allowed operators.
class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  Node parse() {
    Node node = sum();
    skip();
    if (at_ != text_.size()) fail("does not parse");
    return node;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error("size expression '" + text_ + "' " + why);
  }
  void skip() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool take(const std::string& token) {
    skip();
    if (text_.compare(at_, token.size(), token) != 0) return false;
    // "/" alone is true division, not allowed; "//" is.
    if (token == "/" || (token == "*" && text_.compare(at_, 2, "**") == 0)) return false;
    at_ += token.size();
    return true;
  }
  Node sum() {
    Node left = product();
    for (;;) {
      if (take("+")) left = make(SizeNode::Add, {left, product()});
      else if (take("-")) left = make(SizeNode::Sub, {left, product()});
      else return left;
    }
  }
  Node product() {
    Node left = unary();
    for (;;) {
      if (take("//")) left = make(SizeNode::FloorDiv, {left, unary()});
      else if (take("%")) left = make(SizeNode::FloorMod, {left, unary()});
      else if (take("*")) left = make(SizeNode::Mul, {left, unary()});
      else return left;
    }
  }
  Node unary() {
    if (take("-")) return make(SizeNode::Negate, {unary()});
    return primary();
  }
  Node primary() {
    skip();
    if (at_ >= text_.size()) fail("does not parse");
    char c = text_[at_];
    if (take("(")) {
      Node inner = sum();
      if (!take(")")) fail("does not parse");
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = at_;
      while (end < text_.size() && std::isdigit(static_cast<unsigned char>(text_[end]))) ++end;
      auto node = std::make_shared<SizeNode>();
      node->kind = SizeNode::Number;
      try {
        node->number = std::stoll(text_.substr(at_, end - at_));
      } catch (const std::out_of_range&) {
        fail("has a number out of range");
      }
      at_ = end;
      return node;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = at_;
      while (end < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_'))
        ++end;
      std::string name = text_.substr(at_, end - at_);
      at_ = end;
      if (!take("(")) {
        if (name == "True" || name == "False" || name == "None")
          fail(": " + name + " is not an integer");
        auto node = std::make_shared<SizeNode>();
        node->kind = SizeNode::Name;
        node->name = name;
        return node;
      }
      static const std::pair<const char*, SizeNode::Kind> calls[] = {
          {"min", SizeNode::Min}, {"max", SizeNode::Max},
          {"truncdiv", SizeNode::TruncDiv}, {"truncmod", SizeNode::TruncMod}};
      for (const auto& [call, kind] : calls) {
        if (name != call) continue;
        Node first = sum();
        if (!take(",")) fail("does not parse");
        Node second = sum();
        if (!take(")")) fail("does not parse");
        return make(kind, {first, second});
      }
      fail(": the call " + name + "() is not allowed (min, max, truncdiv, truncmod)");
    }
    fail("does not parse");
  }

  const std::string& text_;
  size_t at_ = 0;
};

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t evaluated(const SizeNode& node, const std::map<std::string, int64_t>& values,
              const std::string& text) {
  auto operand = [&](size_t i) { return evaluated(*node.operands[i], values, text); };
  auto divisor = [&](size_t i) {
    int64_t d = operand(i);
    if (d == 0) throw Error("size expression '" + text + "' divides by zero");
    return d;
  };
  switch (node.kind) {
    case SizeNode::Number: return node.number;
    case SizeNode::Name: {
      auto found = values.find(node.name);
      if (found == values.end())
        throw Error("size expression '" + text + "': the size variable " + node.name +
                    " is not bound");
      return found->second;
    }
    case SizeNode::Negate: return -operand(0);
    case SizeNode::Add: return operand(0) + operand(1);
    case SizeNode::Sub: return operand(0) - operand(1);
    case SizeNode::Mul: return operand(0) * operand(1);
    case SizeNode::FloorDiv: { int64_t b = divisor(1); return floor_div(operand(0), b); }
    case SizeNode::FloorMod: { int64_t b = divisor(1), a = operand(0); return a - floor_div(a, b) * b; }
    case SizeNode::Min: return std::min(operand(0), operand(1));
    case SizeNode::Max: return std::max(operand(0), operand(1));
    case SizeNode::TruncDiv: { int64_t b = divisor(1); return operand(0) / b; }
    case SizeNode::TruncMod: { int64_t b = divisor(1); return operand(0) % b; }
  }
  return 0;
}

void collect(const SizeNode& node, std::set<std::string>& names) {
  if (node.kind == SizeNode::Name) names.insert(node.name);
  for (const auto& operand : node.operands) collect(*operand, names);
}

}  // namespace

Size Size::parse(const std::string& text) {
  Size size;
  size.text_ = text;
  size.node_ = Parser(text).parse();
  return size;
}

std::set<std::string> Size::names() const {
  std::set<std::string> names;
  if (node_) collect(*node_, names);
  return names;
}

int64_t Size::evaluate(const std::map<std::string, int64_t>& values) const {
  return node_ ? evaluated(*node_, values, text_) : value_;
}

}  // namespace texscope
