// The one error the runner raises: bad input, said in one line (exit 2).
#pragma once

#include <stdexcept>
#include <string>

namespace texscope {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Python's TexscopeError prefix: "function 'main', binding 'lv3': ".
inline std::string located(const std::string& binding, const std::string& message) {
  if (binding.empty()) return "function 'main': " + message;
  return "function 'main', binding '" + binding + "': " + message;
}

}  // namespace texscope
