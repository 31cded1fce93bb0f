#include "plan.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "error.hpp"

namespace texscope {
namespace {

using Json = nlohmann::json;

// A plan missing a key or holding a value of another type: said as the
// Python reader says it, "incomplete plan (KeyError: 'steps')".
struct Incomplete : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const Json& field(const Json& object, const char* key) {
  if (!object.is_object()) throw Incomplete(std::string("TypeError: not an object holding '") + key + "'");
  auto found = object.find(key);
  if (found == object.end()) throw Incomplete(std::string("KeyError: '") + key + "'");
  return *found;
}

std::string text(const Json& object, const char* key) {
  const Json& value = field(object, key);
  if (!value.is_string()) throw Incomplete(std::string("TypeError: '") + key + "' is not text");
  return value.get<std::string>();
}

const Json& list(const Json& object, const char* key) {
  const Json& value = field(object, key);
  if (!value.is_array()) throw Incomplete(std::string("TypeError: '") + key + "' is not a list");
  return value;
}

std::vector<std::string> names(const Json& object, const char* key) {
  std::vector<std::string> out;
  for (const Json& item : list(object, key)) {
    if (!item.is_string()) throw Incomplete(std::string("TypeError: '") + key + "' holds a non-name");
    out.push_back(item.get<std::string>());
  }
  return out;
}

Size size_of(const Json& value) {
  if (value.is_string()) return Size::parse(value.get<std::string>());
  if (value.is_number_integer()) return Size(value.get<int64_t>());
  throw Error("size: " + value.dump() + " is neither an integer nor a size expression");
}

std::vector<Size> sizes_of(const Json& object, const char* key) {
  std::vector<Size> out;
  for (const Json& item : list(object, key)) out.push_back(size_of(item));
  return out;
}

Arg arg_of(const Json& item) {
  Arg arg{};
  if (item.is_object() && item.contains("tensor")) {
    arg.kind = Arg::Tensor;
    arg.name = text(item, "tensor");
    arg.scope = text(item, "scope");
  } else if (item.is_object() && item.contains("workspace")) {
    arg.kind = Arg::Workspace;
    arg.name = text(item, "workspace");
    arg.size = size_of(field(item, "nbytes"));
  } else {
    arg.kind = Arg::Scalar;
    const Json& value = field(item, "scalar");
    arg.dtype = text(item, "dtype");
    if (value.is_number_float()) {
      arg.is_float = true;
      arg.real = value.get<double>();
    } else {
      arg.size = size_of(value);
    }
  }
  return arg;
}

Step step_of(const Json& item) {
  Step step{};
  std::string kind = text(item, "kind");
  step.binding = text(item, "binding");
  if (kind == "kernel") {
    step.kind = Step::Kernel;
    step.function = text(item, "function");
    step.kernel = text(item, "kernel");
    for (const Json& arg : list(item, "args")) step.args.push_back(arg_of(arg));
    step.global_size = sizes_of(item, "global_size");
    step.local_size = sizes_of(item, "local_size");
    if (step.global_size.empty() || step.global_size.size() > 3 ||
        step.local_size.size() != step.global_size.size())
      throw Incomplete("ValueError: the launch at " + step.binding +
                       " needs 1 to 3 global and as many local sizes");
  } else if (kind == "copy") {
    step.kind = Step::Copy;
    step.source = text(item, "source");
    step.target = text(item, "target");
  } else {
    throw Incomplete("KeyError: \"step kind '" + kind + "'\"");
  }
  return step;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Incomplete(std::string("OSError: ") + path + ": " + std::strerror(errno));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string joined(const std::vector<std::string>& items, const std::string& empty = "") {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out.empty() ? empty : out;
}

void check_names(const Plan& plan) {
  std::vector<std::string> named = plan.inputs;
  for (const auto& [name, array] : plan.constants) named.push_back(name);
  named.insert(named.end(), plan.outputs.begin(), plan.outputs.end());
  for (const Step& step : plan.steps) {
    if (step.kind == Step::Copy) {
      named.push_back(step.source);
      named.push_back(step.target);
    }
    for (const Arg& arg : step.args)
      if (arg.kind == Arg::Tensor) named.push_back(arg.name);
  }
  std::set<std::string> unknown;
  for (const auto& name : named)
    if (!plan.index.count(name)) unknown.insert(name);
  if (!unknown.empty()) {
    std::vector<std::string> first(unknown.begin(), unknown.end());
    first.resize(std::min<size_t>(first.size(), 5));
    throw Error(plan.path + ": steps name tensors the plan does not declare: " + joined(first));
  }
}

// Each number that may be a size expression, with what it sizes.
template <typename Visit>
void each_size(const Plan& plan, Visit visit) {
  for (const TensorSpec& spec : plan.tensors)
    for (const Size& extent : spec.shape) visit("the shape of " + spec.name, extent);
  for (const Step& step : plan.steps) {
    if (step.kind != Step::Kernel) continue;
    std::string where = "the launch of " + step.kernel + " at " + step.binding;
    for (const Arg& arg : step.args)
      if (arg.kind != Arg::Tensor && !arg.is_float) visit(where, arg.size);
    for (const Size& size : step.global_size) visit(where, size);
    for (const Size& size : step.local_size) visit(where, size);
  }
}

void check_sizes(const Plan& plan) {
  std::set<std::string> declared(plan.sizes.begin(), plan.sizes.end());
  each_size(plan, [&](const std::string& what, const Size& size) {
    std::vector<std::string> unknown;
    for (const auto& name : size.names())
      if (!declared.count(name)) unknown.push_back(name);
    if (!unknown.empty())
      throw Error(plan.path + ": " + what + " uses " + joined(unknown) +
                  ", not among the plan's sizes (" + joined(plan.sizes, "none") + ")");
  });
}

std::string shape_text(const std::vector<Size>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + shape[i].str();
  return out + ")";
}

std::string list_text(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

}  // namespace

std::vector<int64_t> TensorSpec::extents() const {
  std::vector<int64_t> out;
  for (const Size& extent : shape) out.push_back(extent.value());
  return out;
}

Plan read_plan(const std::string& directory) {
  Plan plan;
  plan.path = directory + "/plan.json";
  std::ifstream in(plan.path, std::ios::binary);
  if (!in)
    throw Error(directory + ": no plan.json; write one with `texscope build MODEL --target "
                "adreno-opencl -o " + directory + "` (OpenCL targets only)");
  std::string content((std::istreambuf_iterator<char>(in)), {});
  Json data;
  try {
    data = Json::parse(content);
  } catch (const Json::parse_error& err) {
    size_t byte = std::min<size_t>(err.byte ? err.byte - 1 : 0, content.size());
    size_t line = 1 + std::count(content.begin(), content.begin() + byte, '\n');
    std::string why = err.what();
    why = why.substr(why.rfind(": ") + 2);
    throw Error(plan.path + ":" + std::to_string(line) + ": not JSON (" + why + ")");
  }
  if (!data.is_object() || !data.contains("format") || data["format"] != kPlanFormat)
    throw Error(plan.path + ": not a texscope OpenCL plan (format '" + kPlanFormat + "' expected)");
  const Json version = data.value("version", Json());
  if (!version.is_number_integer() || version.get<int64_t>() < 1 ||
      version.get<int64_t>() > kPlanVersion)
    throw Error(plan.path + ": plan version " + (version.is_null() ? "None" : version.dump()) +
                "; this texscope reads versions 1 to " + std::to_string(kPlanVersion) +
                ": rebuild the model");
  try {
    for (const Json& item : list(data, "tensors")) {
      TensorSpec spec{text(item, "name"), sizes_of(item, "shape"), text(item, "dtype"),
                      text(item, "scope")};
      plan.index[spec.name] = plan.tensors.size();
      plan.tensors.push_back(std::move(spec));
    }
    for (const Json& item : list(data, "steps")) plan.steps.push_back(step_of(item));
    plan.source = read_text(directory + "/" + text(data, "kernels"));
    plan.inputs = names(data, "inputs");
    plan.outputs = names(data, "outputs");
    if (data.contains("target") && data["target"].is_string()) plan.target = data["target"];
    if (data.contains("sizes")) plan.sizes = names(data, "sizes");
    std::vector<std::string> constants = names(data, "constants");
    if (!constants.empty()) {
      std::string weights = directory + "/" + text(data, "weights");
      std::map<std::string, Array> stored;
      try {
        for (auto& [name, array] : read_npz(weights)) stored.emplace(name, std::move(array));
      } catch (const Error& err) {
        throw Incomplete(std::string("OSError: ") + err.what());
      }
      for (const auto& name : constants) {
        auto found = stored.find(name);
        if (found == stored.end())
          throw Incomplete("KeyError: '" + name + " is not a file in the archive'");
        plan.constants.emplace_back(name, std::move(found->second));
      }
    }
  } catch (const Incomplete& err) {
    throw Error(plan.path + ": incomplete plan (" + err.what() + ")");
  } catch (const Json::exception& err) {
    throw Error(plan.path + ": incomplete plan (" + err.what() + ")");
  } catch (const Error& err) {
    throw Error(plan.path + ": " + err.what());
  }
  check_names(plan);
  check_sizes(plan);
  return plan;
}

std::map<std::string, int64_t> bind_sizes(const Plan& plan, const std::vector<Array>& inputs) {
  if (inputs.size() != plan.inputs.size())
    throw Error("main takes " + std::to_string(plan.inputs.size()) + " inputs, got " +
                std::to_string(inputs.size()));
  std::set<std::string> variables(plan.sizes.begin(), plan.sizes.end());
  std::map<std::string, std::pair<int64_t, std::string>> found;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = plan.spec(plan.inputs[i]);
    const Array& array = inputs[i];
    if (spec.shape.size() != array.shape.size())
      throw Error(located(spec.name, "input " + spec.name + " has shape " + shape_text(spec.shape) +
                  ", " + std::to_string(spec.shape.size()) + "-D; got a " +
                  std::to_string(array.shape.size()) + "-D array of shape " +
                  list_text(array.shape)));
    for (size_t axis = 0; axis < spec.shape.size(); ++axis) {
      const Size& extent = spec.shape[axis];
      if (!extent.symbolic() || !variables.count(extent.text())) continue;
      auto known = found.find(extent.text());
      if (known != found.end() && known->second.first != array.shape[axis])
        throw Error(located(spec.name, "input " + spec.name + " gives " + extent.text() + "=" +
                    std::to_string(array.shape[axis]) + " (shape " + list_text(array.shape) +
                    ") but input " + known->second.second + " gave " + extent.text() + "=" +
                    std::to_string(known->second.first)));
      found[extent.text()] = {array.shape[axis], spec.name};
    }
  }
  std::vector<std::string> unbound;
  std::map<std::string, int64_t> values;
  for (const auto& variable : plan.sizes) {
    if (found.count(variable)) values[variable] = found[variable].first;
    else unbound.push_back(variable);
  }
  if (!unbound.empty())
    throw Error(located("", "the size variable " + joined(unbound) +
                " is not the extent of any input's axis, so no input binds it"));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = plan.spec(plan.inputs[i]);
    std::vector<int64_t> expected;
    for (const Size& extent : spec.shape) expected.push_back(extent.evaluate(values));
    if (expected != inputs[i].shape) {
      std::string bound;
      for (const auto& variable : plan.sizes)
        bound += (bound.empty() ? "" : ", ") + variable + "=" + std::to_string(values[variable]);
      throw Error(located(spec.name, "input " + spec.name + " has shape " + shape_text(spec.shape) +
                  ", which is " + list_text(expected) + " for " + bound +
                  "; got an array of shape " + list_text(inputs[i].shape)));
    }
  }
  return values;
}

Plan resolved(const Plan& plan, const std::map<std::string, int64_t>& values) {
  if (plan.sizes.empty()) return plan;
  Plan out = plan;
  auto evaluate = [&](Size& size) { size = Size(size.evaluate(values)); };
  std::string bound;
  for (const auto& [name, value] : values)
    bound += (bound.empty() ? "" : ", ") + name + "=" + std::to_string(value);
  for (TensorSpec& spec : out.tensors) {
    for (Size& extent : spec.shape) evaluate(extent);
    for (int64_t extent : spec.extents())
      if (extent < 0)
        throw Error(located(spec.name, "tensor " + spec.name + " would have shape " +
                    list_text(spec.extents()) + " for " + bound + ": the input is too small"));
  }
  for (Step& step : out.steps) {
    if (step.kind != Step::Kernel) continue;
    for (Arg& arg : step.args)
      if (arg.kind != Arg::Tensor && !arg.is_float) evaluate(arg.size);
    std::vector<int64_t> global, local;
    for (Size& size : step.global_size) evaluate(size), global.push_back(size.value());
    for (Size& size : step.local_size) evaluate(size), local.push_back(size.value());
    if (*std::min_element(global.begin(), global.end()) <= 0 ||
        *std::min_element(local.begin(), local.end()) <= 0)
      throw Error(located(step.binding, "kernel " + step.kernel + " would run " + list_text(global) +
                  " work items in groups of " + list_text(local) + ": the input is too small for it"));
  }
  out.sizes.clear();
  return out;
}

std::map<std::string, std::vector<std::string>> kernel_signatures(const std::string& source) {
  // As texscope/opencl/source.py's KERNEL pattern: `__kernel void NAME(PARAMS) {`.
  static const std::string kHead = "__kernel void ";
  std::map<std::string, std::vector<std::string>> kernels;
  for (size_t at = source.find(kHead); at != std::string::npos; at = source.find(kHead, at + 1)) {
    size_t name_end = at + kHead.size();
    while (name_end < source.size() &&
           (std::isalnum(static_cast<unsigned char>(source[name_end])) || source[name_end] == '_'))
      ++name_end;
    if (name_end == at + kHead.size() || name_end >= source.size() || source[name_end] != '(')
      continue;
    size_t close = source.find(')', name_end);
    if (close == std::string::npos) break;
    size_t next = source.find_first_not_of(" \t\r\n\f\v", close + 1);
    if (next == std::string::npos || source[next] != '{') continue;  // a prototype
    std::vector<std::string> params;
    std::istringstream list(source.substr(name_end + 1, close - name_end - 1));
    for (std::string param; std::getline(list, param, ',');) {
      size_t begin = param.find_first_not_of(" \t\r\n\f\v");
      size_t end = param.find_last_not_of(" \t\r\n\f\v");
      params.push_back(begin == std::string::npos ? "" : param.substr(begin, end - begin + 1));
    }
    kernels[source.substr(at + kHead.size(), name_end - at - kHead.size())] = params;
  }
  return kernels;
}

}  // namespace texscope
