#include "tune.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "error.hpp"
#include "plan.hpp"
#include "runner.hpp"

namespace texscope {
namespace {

// texscope/opencl/tuning.py's names: the two files must stay one format.
using Json = nlohmann::ordered_json;
constexpr const char* kSetFormat = "texscope-tuning-set";
constexpr const char* kTuningFormat = "texscope-tuning";
constexpr int kTuningVersion = 1;
constexpr const char* kSetManifest = "tuning-set.json";
constexpr const char* kProgram = "program";
constexpr const char* kNeighbours = "neighbours.cl";  // tuning.py's NEIGHBOURS
// tuning.py's IN_PLACE_LABELS: the model's own programs, run whole.
constexpr const char* kInPlaceLabels[] = {"all-buffer", "all-texture"};
constexpr const char* kPrevious = "previous";  // tuning.py's PREVIOUS
constexpr const char* kDefault = "default";    // tuning.py's DEFAULT
constexpr const char* kDefaultProfile = "default_profile";  // tuning.py's DEFAULT_PROFILE

Json read_json(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("no such " + what + ": " + path);
  std::string content((std::istreambuf_iterator<char>(in)), {});
  try {
    return Json::parse(content);
  } catch (const Json::parse_error& err) {
    size_t byte = std::min<size_t>(err.byte ? err.byte - 1 : 0, content.size());
    size_t line = 1 + std::count(content.begin(), content.begin() + byte, '\n');
    std::string why = err.what();
    throw Error(path + ", line " + std::to_string(line) + ": not JSON (" +
                why.substr(why.rfind(": ") + 2) + ")");
  }
}

// The set's manifest, checked as tuning.py's read_set checks it, and a little
// more (the types the runner indexes), so that a broken set is one line.
Json read_set(const std::string& directory) {
  const std::string path = directory + "/" + kSetManifest;
  Json manifest = read_json(path, "tuning set (write one with `texscope tune MODEL -o DIR`)");
  if (!manifest.is_object() || manifest.value("format", Json()) != kSetFormat ||
      manifest.value("version", Json()) != kTuningVersion)
    throw Error(path + ": not a texscope tuning set (format '" + kSetFormat + "', version " +
                std::to_string(kTuningVersion) + ")");
  for (const char* field : {"model", "model_fingerprint", "target", "kernels", "variants",
                            "copies"})
    if (!manifest.contains(field)) throw Error(path + ": no '" + field + "'");
  for (const char* field : {"model", "model_fingerprint", "target"})
    if (!manifest[field].is_string()) throw Error(path + ": '" + field + "' must be text");
  if (!manifest["kernels"].is_object()) throw Error(path + ": 'kernels' must be an object");
  for (const auto& [key, kernel] : manifest["kernels"].items())
    if (!kernel.is_object() || !kernel.contains("name") || !kernel["positions"].is_array() ||
        !kernel.contains("shapes"))
      throw Error(path + ": kernel " + key + " needs 'name', 'positions' and 'shapes'");
  for (const char* field : {"variants", "copies"}) {
    if (!manifest[field].is_array()) throw Error(path + ": '" + field + "' must be a list");
    for (const Json& entry : manifest[field])
      if (!entry.is_object() || !entry.value("binding", Json()).is_string())
        throw Error(path + ": each of '" + field + "' needs a 'binding'");
  }
  for (const Json& variant : manifest["variants"]) {
    const Json kernel = variant.value("kernel", Json());
    if (!kernel.is_string() || !manifest["kernels"].contains(kernel.get<std::string>()))
      throw Error(path + ": variant '" + variant["binding"].get<std::string>() +
                  "' names no kernel of the set");
    if (!variant.value("scopes", Json()).is_array())
      throw Error(path + ": variant '" + variant["binding"].get<std::string>() +
                  "' needs 'scopes'");
    // Tuners leave the weights alone (texscope/opencl/neighbours.py).
    if (!variant.value("weights", Json()).is_array())
      throw Error(directory + ": its variants name no weights (a set written by an older "
                  "texscope): write it again with `texscope tune MODEL -o DIR`");
  }
  if (manifest.contains("in_place")) {
    const Json& in_place = manifest["in_place"];
    const Json programs = in_place.is_object() ? in_place.value("programs", Json()) : Json();
    bool good = programs.is_object() && in_place.value("function", Json()).is_string();
    for (const char* label : kInPlaceLabels) good = good && programs.contains(label);
    if (good)
      for (const auto& [label, folder] : programs.items())
        good = good && folder.is_string() &&
               (label == kPrevious || label == kDefault ||
                std::find(std::begin(kInPlaceLabels), std::end(kInPlaceLabels), label) !=
                    std::end(kInPlaceLabels));
    if (!good)
      throw Error(path + ": \"in_place\" must name a function and a program folder for each "
                  "of all-buffer, all-texture");
    if (programs.contains(kDefault) != in_place.value(kDefaultProfile, Json()).is_string())
      throw Error(path + ": a \"default\" program goes with the \"default_profile\" that "
                  "chose it");
    const bool previous = programs.contains(kPrevious);
    if (previous != manifest.contains("previous_tuning"))
      throw Error(path + ": a \"previous\" program goes with the \"previous_tuning\" that "
                  "chose it");
    if (previous && !manifest["previous_tuning"].is_object())
      throw Error(path + ": previous_tuning: not a texscope tuning file");
  }
  return manifest;
}

// Whether `path` holds a tuning file, one this command may overwrite.
bool is_tuning_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(in)), {});
  Json document = Json::parse(content, nullptr, false);
  return document.is_object() && document.value("format", Json()) == kTuningFormat;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// One step of a plain-text progress bar on stderr, as calibrate.py's
// Progress writes it when stderr is not a terminal.
void progress(int done, int total, const std::string& label) {
  constexpr int kWidth = 30;
  int filled = kWidth * done / total;
  std::cerr << "[" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] "
            << done << "/" << total << " " << label << std::endl;
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S+00:00", &utc);
  return text;
}

// tune.py's WHOLE_SESSIONS: one session's spread understated how far two
// sessions of one program differ.
constexpr int kWholeSessions = 2;

// The model's programs run whole as tune.py's run_whole runs them: in each of
// kWholeSessions rounds all set up anew (here each in a context of its own),
// one warm-up run each, then `repeats` timed runs taking turns, each round
// starting one program later; per program the median, fastest and slowest
// over the runs of every round.
Json run_whole(const std::vector<std::pair<std::string, Plan>>& programs, const Device& device,
               int repeats) {
  const size_t count = programs.size();
  std::vector<std::vector<double>> runs(count);
  const std::vector<Array> uploaded;
  for (int round = 0; round < kWholeSessions; ++round) {
    std::vector<std::unique_ptr<Session>> live;
    std::vector<std::vector<Array>> outputs(count);
    for (size_t i = 0; i < count; ++i) {
      live.push_back(std::make_unique<Session>(programs[i].second, device));
      live.back()->run(random_inputs(programs[i].second, 0), outputs[i]);
    }
    for (int run = 0; run < repeats; ++run)
      for (size_t turn = 0; turn < count; ++turn) {
        const size_t i = (run + turn) % count;
        double total = 0;
        for (const CommandTime& command : live[i]->run(uploaded, outputs[i], false))
          total += command.seconds;
        runs[i].push_back(total);
      }
  }
  Json timed = Json::object();
  for (size_t i = 0; i < count; ++i) {
    const auto [fastest, slowest] = std::minmax_element(runs[i].begin(), runs[i].end());
    timed[programs[i].first] = {
        {"seconds", median(runs[i])}, {"min_seconds", *fastest}, {"max_seconds", *slowest}};
  }
  return timed;
}

}  // namespace

void tune(const TuneOptions& o) {
  std::string root = o.directory;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat info;
  if (stat(o.output.c_str(), &info) == 0 && !is_tuning_file(o.output))
    throw Error(o.output + " exists and is not a tuning file; not overwriting it");
  if (o.repeats < 1) throw Error("--repeats must be at least 1");
  const Json manifest = read_set(root);
  const Plan plan = read_plan(root + "/" + kProgram);
  // Checked before anything runs, so that the error is the only line.
  std::map<std::string, int> steps;
  for (const Step& step : plan.steps) ++steps[step.binding];
  for (const char* field : {"variants", "copies"})
    for (const Json& entry : manifest[field])
      if (!steps.count(entry["binding"].get<std::string>()))
        throw Error(root + ": the program runs nothing for binding '" +
                    entry["binding"].get<std::string>() + "'");
  const std::string neighbours_path = root + "/" + kNeighbours;
  std::ifstream neighbours_file(neighbours_path, std::ios::binary);
  if (!neighbours_file)
    throw Error(root + ": no " + kNeighbours + " (a set written by an older texscope): "
                "write it again with `texscope tune MODEL -o DIR`");
  const std::string neighbours((std::istreambuf_iterator<char>(neighbours_file)), {});
  std::vector<std::pair<std::string, Plan>> whole;  // read now: a broken one is the only line
  if (manifest.contains("in_place"))
    for (const auto& [label, folder] : manifest["in_place"]["programs"].items())
      whole.emplace_back(label, read_plan(root + "/" + folder.get<std::string>()));
  const std::vector<Array> inputs = random_inputs(plan, 0);
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  Device device = pick_device(o.device);
  Session session(plan, device);
  const double set_up_s = std::chrono::duration<double>(Clock::now() - started).count();

  // Timed as python -m texscope.opencl.tune times (its STATES say why): each
  // run as it is ("cold") and with each kernel's neighbours just before it
  // ("chained").
  std::vector<Array> outputs;
  session.run(inputs, outputs);
  // The weights are left as a model leaves them (texscope/opencl/tune.py).
  std::set<std::string> weights;
  for (const Json& variant : manifest["variants"])
    for (const Json& name : variant["weights"])
      if (name.is_string()) weights.insert(name.get<std::string>());
  session.add_neighbours(neighbours, weights);
  progress(1, o.repeats + 1, "warm-up");
  std::map<std::string, std::vector<double>> cold, chained;
  // None: the runs read what the warm-up uploaded, as a model its weights.
  const std::vector<Array> uploaded;
  for (int run = 0; run < o.repeats; ++run) {
    for (auto [runs, with_neighbours] : {std::pair{&cold, false}, std::pair{&chained, true}}) {
      std::map<std::string, double> totals;
      for (const CommandTime& command : session.run(uploaded, outputs, with_neighbours))
        totals[command.binding] += command.seconds;
      for (const auto& [binding, seconds] : totals) (*runs)[binding].push_back(seconds);
    }
    progress(run + 2, o.repeats + 1, "run " + std::to_string(run + 1));
  }
  // The median of the runs in one state and, as the planner's noise margin,
  // their fastest and slowest; both states' medians beside them.
  auto timed_of = [&](const Json& entry, const std::map<std::string, std::vector<double>>& by) {
    const std::string binding = entry["binding"].get<std::string>();
    if (!cold.count(binding))
      throw Error(root + ": the program runs nothing for binding '" + binding + "'");
    const std::vector<double>& runs = by.at(binding);
    const auto [fastest, slowest] = std::minmax_element(runs.begin(), runs.end());
    return Json{{"seconds", median(runs)}, {"min_seconds", *fastest},
                {"max_seconds", *slowest}, {"cold_seconds", median(cold.at(binding))},
                {"chained_seconds", median(chained.at(binding))}};
  };

  Json kernels = Json::object();
  for (const auto& [key, kernel] : manifest["kernels"].items())
    kernels[key] = {{"name", kernel["name"]}, {"positions", kernel["positions"]},
                    {"shapes", kernel["shapes"]}, {"variants", Json::array()}};
  for (const Json& variant : manifest["variants"]) {
    Json timed = {{"scopes", variant["scopes"]}};
    timed.update(timed_of(variant, chained));
    kernels[variant["kernel"].get<std::string>()]["variants"].push_back(timed);
  }
  Json copies = Json::array();
  for (const Json& copy : manifest["copies"]) {
    Json timed = Json::object();
    for (const auto& [field, value] : copy.items())
      if (field != "binding") timed[field] = value;
    timed.update(timed_of(copy, cold));
    copies.push_back(timed);
  }
  Json in_place;
  std::string labels;  // as tune.py names them: "all-buffer, all-texture"
  if (manifest.contains("in_place")) {
    in_place = {{"function", manifest["in_place"]["function"]}};
    if (manifest["in_place"].contains(kDefaultProfile))
      in_place[kDefaultProfile] = manifest["in_place"][kDefaultProfile];
    const Json timed = run_whole(whole, device, o.repeats);
    for (const auto& [label, program] : whole) {
      in_place[label] = timed[label];
      labels += (labels.empty() ? "" : ", ") + label;
    }
  }
  const Device::Info facts = device.info();
  Json document = {
      {"format", kTuningFormat},
      {"version", kTuningVersion},
      {"model", manifest["model"]},
      {"model_fingerprint", manifest["model_fingerprint"]},
      {"target", manifest["target"]},
      {"device",
       {{"name", facts.name},
        {"platform", facts.platform},
        {"vendor", facts.vendor},
        {"driver_version", facts.driver_version},
        {"opencl_version", facts.opencl_version},
        {"compute_units", facts.compute_units},
        {"image2d_max_width", facts.image2d_max_width},
        {"image2d_max_height", facts.image2d_max_height},
        {"image_max_array_size", facts.image_max_array_size},
        {"index", o.device},
        {"source", "clGetDeviceInfo through texscope-run"}}},
      {"measured_at", utc_now()},
      {"repeats", o.repeats},
      {"set_up_s", std::round(set_up_s * 100) / 100},
      {"timed_s",
       std::round(std::chrono::duration<double>(Clock::now() - started).count() * 100) / 100},
      {"method", "texscope-run --tune: OpenCL profiling events, one warm-up run (the only one "
                     "uploading the inputs), then " +
                     std::to_string(o.repeats) + " times the whole tuning program as it is (cold) "
                     "and with each kernel's input maps rewritten and output images read just "
                     "before it (chained); median: chained for variants, cold for copies (min "
                     "and max: the fastest and slowest)" +
                     std::string(in_place.is_null() ? "" :
                                 "; the model's " + labels + " programs then run whole in " +
                                 std::to_string(kWholeSessions) +
                                 " sessions each, set up anew, a warm-up then " +
                                 std::to_string(o.repeats) + " runs each taking turns (in_place)")},
      {"kernels", kernels},
      {"copies", copies}};
  if (!in_place.is_null()) document["in_place"] = in_place;
  if (manifest.contains("previous_tuning")) document["previous_tuning"] = manifest["previous_tuning"];
  std::ofstream out(o.output);
  out << document.dump(1) << "\n";
  if (!out) throw Error(o.output + ": cannot write");
  size_t variants = manifest["variants"].size();
  std::cout << "timed " << variants << " variants of " << kernels.size() << " kernels and "
            << copies.size() << " copies on " << facts.name << ": wrote " << o.output << "\n";
}

}  // namespace texscope
