// The portable program texscope build writes for OpenCL targets, read and
// checked as texscope/opencl/plan.py reads it, and made concrete for the
// input arrays' sizes as texscope/opencl/resolve.py does.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "npz.hpp"
#include "sizes.hpp"

namespace texscope {

constexpr const char* kPlanFormat = "texscope-opencl-plan";
constexpr int kPlanVersion = 2;  // version 1 is version 2 without symbolic sizes

struct TensorSpec {
  std::string name;
  std::vector<Size> shape;
  std::string dtype;
  std::string scope;

  bool is_texture() const { return scope.find("texture") != std::string::npos; }
  // Extents of a resolved tensor (every Size a constant).
  std::vector<int64_t> extents() const;
};

struct Arg {
  enum Kind { Tensor, Workspace, Scalar } kind;
  std::string name;   // the tensor or the workspace
  std::string scope;  // a tensor's, as the kernel declares it
  Size size;          // a workspace's bytes, or an integer scalar
  bool is_float = false;
  double real = 0;    // a float scalar
  std::string dtype;  // a scalar's
};

struct Step {
  enum Kind { Kernel, Copy } kind;
  std::string binding;
  std::string function, kernel;  // a launch
  std::vector<Arg> args;
  std::vector<Size> global_size, local_size;
  std::string source, target;  // a copy
};

struct Plan {
  std::string path;  // plan.json, for messages
  std::string source;
  std::string target;
  std::vector<std::string> sizes;
  std::vector<TensorSpec> tensors;
  std::map<std::string, size_t> index;  // tensor name -> position in tensors
  std::vector<std::string> inputs, outputs;
  std::vector<std::pair<std::string, Array>> constants;
  std::vector<Step> steps;

  const TensorSpec& spec(const std::string& name) const { return tensors.at(index.at(name)); }
  bool symbolic() const { return !sizes.empty(); }
};

// The plan in `directory`, with its kernels' source and its constants; an
// Error (one line) for a missing or broken file, an unknown version, a step
// naming an undeclared tensor or a size using an undeclared variable.
Plan read_plan(const std::string& directory);

// The value of each size variable, read off the input arrays' shapes.
std::map<std::string, int64_t> bind_sizes(const Plan& plan, const std::vector<Array>& inputs);

// `plan` with every size evaluated for `values`: a static plan.
Plan resolved(const Plan& plan, const std::map<std::string, int64_t>& values);

// Kernel name -> its parameter declarations, for the kernels defined (not
// merely declared) in `source`.
std::map<std::string, std::vector<std::string>> kernel_signatures(const std::string& source);

}  // namespace texscope
