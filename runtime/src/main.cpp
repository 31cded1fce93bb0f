// texscope-run: runs what `texscope build --target adreno-opencl -o DIR`
// wrote (plan.json, kernels.cl, weights.npz) on an OpenCL device, as
// `python -m texscope.opencl.replay DIR` does, without Python.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "error.hpp"
#include "npz.hpp"
#include "plan.hpp"
#include "runner.hpp"
#include "tune.hpp"

namespace texscope {
namespace {

constexpr const char* kUsage =
    "usage: texscope-run DIR [--inputs X.npz] [--expected Y.npz] [--tolerance T] "
    "[--save-outputs O.npz] [--times T.json] [--repeat N] [--steady N] [--seed S] "
    "[--device N] [--top K] [--list-devices]\n"
    "       texscope-run --tune SET -o TUNING.json [--repeats R] [--device N]";

struct Options {
  std::optional<std::string> directory, inputs, expected, save_outputs, times, tune, output;
  double tolerance = 1e-3;
  int repeat = 1, steady = 0, device = 0, top = 10, repeats = TuneOptions().repeats;
  uint64_t seed = 0;
  bool list_devices = false;
};

int integer(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw Error("argument " + flag + ": invalid int value: '" + text + "'");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage << "\n";
      std::exit(0);
    }
    if (arg == "--list-devices") {
      o.list_devices = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 && arg != "-o") {
      if (o.directory) throw Error("unrecognized argument: " + arg);
      o.directory = arg;
      continue;
    }
    if (i + 1 >= argc) throw Error("argument " + arg + ": expected one argument");
    std::string value = argv[++i];
    if (arg == "--inputs") o.inputs = value;
    else if (arg == "--expected") o.expected = value;
    else if (arg == "--save-outputs") o.save_outputs = value;
    else if (arg == "--times") o.times = value;
    else if (arg == "--tune") o.tune = value;
    else if (arg == "-o" || arg == "--output") o.output = value;
    else if (arg == "--repeats") o.repeats = integer(arg, value);
    else if (arg == "--repeat") o.repeat = std::max(integer(arg, value), 1);
    else if (arg == "--steady") o.steady = std::max(integer(arg, value), 0);
    else if (arg == "--device") o.device = integer(arg, value);
    else if (arg == "--top") o.top = integer(arg, value);
    else if (arg == "--seed") o.seed = uint64_t(integer(arg, value));
    else if (arg == "--tolerance") {
      try {
        o.tolerance = std::stod(value);
      } catch (const std::exception&) {
        throw Error("argument --tolerance: invalid float value: '" + value + "'");
      }
    } else {
      throw Error("unrecognized argument: " + arg);
    }
  }
  return o;
}

// An output file must not exist yet: a command never overwrites what it did
// not write.
void exclusive(const std::optional<std::string>& path) {
  struct stat info;
  if (path && stat(path->c_str(), &info) == 0)
    throw Error(*path + " exists; texscope-run writes only new files");
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Arrays from an .npz, by tensor name or in order (arr_0, arr_1, ...).
std::vector<Array> read_arrays(const std::string& path, const std::vector<std::string>& names,
                               const std::string& what) {
  std::map<std::string, Array> stored;
  try {
    for (auto& [key, array] : read_npz(path)) stored.emplace(key, std::move(array));
  } catch (const Error& err) {
    throw Error(path + ": cannot read " + what + " (" + err.what() + ")");
  }
  for (bool by_name : {true, false}) {
    std::vector<Array> arrays;
    for (size_t i = 0; i < names.size(); ++i) {
      auto found = stored.find(by_name ? names[i] : "arr_" + std::to_string(i));
      if (found == stored.end()) break;
      arrays.push_back(found->second);
    }
    if (arrays.size() == names.size()) return arrays;
  }
  std::vector<std::string> keys;
  for (const auto& [key, array] : stored) keys.push_back(key);
  throw Error(path + ": " + what + " must be named " + joined(names) + " (or be arr_0..arr_" +
              std::to_string(names.size() - 1) + "); it has " + joined(keys));
}

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

// As texscope.diagnostics.numerics.compare with of_scale: numpy.allclose
// with atol a fraction of each output's largest magnitude; prints the line
// the Python replay prints and returns whether it matched.
bool compare(const std::vector<Array>& actual, const std::vector<Array>& expected,
             double tolerance, const std::string& reference) {
  const double inf = INFINITY;
  for (size_t k = 0; k < expected.size(); ++k)
    for (int64_t i = 0; i < expected[k].count(); ++i)
      if (!std::isfinite(element(expected[k], i)))
        throw Error("the reference output " + std::to_string(k) + " holds NaN or infinity: the "
                    "inputs are not valid for the model (a negative variance?), so nothing can "
                    "be compared");
  bool ok = actual.size() == expected.size();
  double abs_err = 0, rel_err = 0, scaled_err = 0;
  for (size_t k = 0; ok && k < expected.size(); ++k)
    if (actual[k].shape != expected[k].shape) ok = false;
  if (!ok) abs_err = rel_err = scaled_err = inf;
  for (size_t k = 0; ok && k < expected.size(); ++k) {
    double scale = 0, largest = 0, worst_rel = 0;
    for (int64_t i = 0; i < expected[k].count(); ++i)
      scale = std::max(scale, std::fabs(element(expected[k], i)));
    for (int64_t i = 0; i < expected[k].count(); ++i) {
      double a = element(actual[k], i), e = element(expected[k], i), err = std::fabs(a - e);
      if (!(err <= tolerance * scale + tolerance * std::fabs(e))) ok = false;
      if (!std::isfinite(err)) {
        abs_err = rel_err = scaled_err = inf;
        continue;
      }
      largest = std::max(largest, err);
      worst_rel = std::max(worst_rel, err / (std::fabs(e) + tolerance));
    }
    abs_err = std::max(abs_err, largest);
    rel_err = std::max(rel_err, worst_rel);
    scaled_err = std::max(scaled_err, largest / std::max(scale, 1e-30));
  }
  std::cout << "against " << reference << ": max abs error " << format("%.3g", abs_err) << " ("
            << format("%.2g", scaled_err) << " of its output's largest magnitude), max rel error "
            << format("%.3g", rel_err) << " -> " << (ok ? "OK" : "MISMATCH") << "\n";
  return ok;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

int run(const Options& o) {
  if (o.list_devices) {
    std::vector<Device> found = devices();
    for (size_t i = 0; i < found.size(); ++i) std::cout << i << ": " << found[i].describe() << "\n";
    return 0;
  }
  if (o.tune) {
    if (o.directory) throw Error("unrecognized argument: " + *o.directory);
    if (!o.output) throw Error("--tune needs -o TUNING.json, the tuning file to write");
    tune({*o.tune, *o.output, o.device, o.repeats});
    return 0;
  }
  if (o.output) throw Error("-o goes with --tune (the tuning file); for outputs use --save-outputs");
  if (!o.directory) throw Error("give the directory `texscope build -o DIR` wrote");
  std::string directory = *o.directory;
  while (directory.size() > 1 && directory.back() == '/') directory.pop_back();
  exclusive(o.save_outputs);
  exclusive(o.times);
  Plan plan = read_plan(directory);
  std::vector<Array> inputs =
      o.inputs ? read_arrays(*o.inputs, plan.inputs, "inputs") : random_inputs(plan, o.seed);
  std::optional<std::vector<Array>> expected;
  if (o.expected) expected = read_arrays(*o.expected, plan.outputs, "expected outputs");
  Device device = pick_device(o.device);
  if (inputs.size() != plan.inputs.size())
    throw Error("main takes " + std::to_string(plan.inputs.size()) + " inputs, got " +
                std::to_string(inputs.size()));
  if (plan.symbolic()) plan = resolved(plan, bind_sizes(plan, inputs));
  Session session(plan, device);

  std::vector<Array> outputs;
  std::vector<std::vector<CommandTime>> runs;
  for (int i = 0; i < o.repeat; ++i) runs.push_back(session.run(inputs, outputs));
  std::vector<CommandTime> times = runs[0];
  for (size_t c = 0; c < times.size(); ++c) {
    std::vector<double> samples;
    for (const auto& r : runs) samples.push_back(r[c].seconds);
    times[c].seconds = median(samples);
  }
  std::vector<double> walls, submits;
  std::vector<Array> steady_outputs;
  for (int i = 0; i < o.steady; ++i) {
    Session::Wall wall = session.infer(inputs, steady_outputs);
    walls.push_back(wall.total);
    submits.push_back(wall.submit);
  }
  std::vector<std::string> unsteady;
  for (size_t k = 0; k < steady_outputs.size(); ++k)
    if (steady_outputs[k].data != outputs[k].data) unsteady.push_back(plan.outputs[k]);
  const std::string description = device.describe();
  std::cout << "ran " << plan.path << " on " << description << ": "
            << session.launches() << " kernel launches, " << session.copies() << " copies, "
            << session.images() << " images\n";
  int status = 0;
  if (expected) status = compare(outputs, *expected, o.tolerance, *o.expected) ? 0 : 1;
  if (!unsteady.empty()) {
    std::cout << "the steady-state inferences gave other values of " << joined(unsteady)
              << " than the first run -> MISMATCH\n";
    status = 1;
  }
  double total = 0;
  for (const auto& t : times) total += t.seconds;
  std::string label = runs.size() > 1 ? "median of " + std::to_string(runs.size()) : "one run";
  std::cout << "time per command (" << label << "), slowest first (total "
            << format("%.3f", total * 1e3) << " ms):\n";
  std::vector<CommandTime> slowest = times;
  std::stable_sort(slowest.begin(), slowest.end(),
                   [](const CommandTime& a, const CommandTime& b) { return a.seconds > b.seconds; });
  for (int i = 0; i < std::min<int>(o.top, int(slowest.size())); ++i) {
    std::string binding = slowest[i].binding;
    binding.resize(std::max<size_t>(binding.size(), 12), ' ');  // Python's {:<12}
    std::cout << "  " << format("%9.3f", slowest[i].seconds * 1e3) << " ms  " << binding << " "
              << slowest[i].kernel << "\n";
  }
  if (!walls.empty())
    std::cout << "steady state: " << format("%.3f", median(walls) * 1e3)
              << " ms per inference (wall, median of " << walls.size() << "; min "
              << format("%.3f", *std::min_element(walls.begin(), walls.end()) * 1e3)
              << " ms; issuing the uploads and commands " << format("%.3f", median(submits) * 1e3)
              << " ms): inputs uploaded, " << (session.launches() + session.copies())
              << " commands enqueued, outputs read back\n";
  if (o.save_outputs) {
    std::vector<std::pair<std::string, Array>> named;
    for (size_t k = 0; k < outputs.size(); ++k) named.emplace_back(plan.outputs[k], outputs[k]);
    write_npz(*o.save_outputs, named);
  }
  if (o.times) {
    nlohmann::ordered_json commands = nlohmann::ordered_json::array();
    for (const auto& t : times)
      commands.push_back({{"binding", t.binding}, {"kernel", t.kernel}, {"seconds", t.seconds}});
    nlohmann::ordered_json doc = {
        {"device", description}, {"runs", runs.size()}, {"launches", session.launches()},
        {"copies", session.copies()}, {"images", session.images()}, {"total_s", total},
        {"commands", commands}};
    if (!walls.empty())
      doc["steady"] = {{"inferences", walls.size()}, {"median_s", median(walls)},
                       {"min_s", *std::min_element(walls.begin(), walls.end())},
                       {"submit_median_s", median(submits)}};
    std::ofstream out(*o.times);
    out << doc.dump(1) << "\n";
    if (!out) throw Error(*o.times + ": cannot write");
  }
  return status;
}

}  // namespace
}  // namespace texscope

int main(int argc, char** argv) {
  try {
    return texscope::run(texscope::parse(argc, argv));
  } catch (const texscope::Error& err) {
    std::cerr << "texscope-run: error: " << err.what() << "\n";
  } catch (const std::exception& err) {
    std::cerr << "texscope-run: error: " << err.what() << "\n";
  }
  return 2;
}
