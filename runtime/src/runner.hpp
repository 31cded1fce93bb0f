// One plan on one OpenCL device: memory, kernels and their arguments set up
// once, as texscope/opencl/replay.py and memory.py lay them out (one buffer
// or RGBA image array per tensor, for the whole run), then run as often as
// asked: profiled, one event per command, or in the steady state (upload the
// inputs, enqueue, read the outputs back; no events).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "opencl.hpp"
#include "plan.hpp"

namespace texscope {

struct Device {
  cl_platform_id platform;
  cl_device_id id;
  std::string describe() const;  // "NAME (PLATFORM, driver VERSION)"
  // What clGetDeviceInfo says of it, as texscope.opencl.calibrate's
  // describe_device records it (text stripped of blanks).
  struct Info {
    std::string name, platform, vendor, driver_version, opencl_version;
    cl_uint compute_units;
    size_t image2d_max_width, image2d_max_height, image_max_array_size;
  };
  Info info() const;
};

// Every device, platform by platform: what --device N indexes.
std::vector<Device> devices();
Device pick_device(int index);

// Uniform [-1, 1) arrays for main's inputs (not numpy's generator: for the
// same numbers as the Python replay, give both --inputs); an Error for a
// plan of symbolic sizes.
std::vector<Array> random_inputs(const Plan& plan, uint64_t seed);

struct CommandTime {
  std::string binding, kernel;  // kernel is "to_vdevice" for a copy
  double seconds;
};

class Session {
 public:
  // `plan` must be resolved (no size expressions left).  An Error, before
  // anything is compiled, for a kernel missing from the source, a scope the
  // kernel does not declare or an image over the device's limits; then for
  // a compiler error.
  Session(const Plan& plan, const Device& device);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // One inference timed by OpenCL's profiling events; `outputs` in the
  // plan's order.  With `with_neighbours`, add_neighbours' untimed kernels
  // run before each launch.
  std::vector<CommandTime> run(const std::vector<Array>& inputs, std::vector<Array>& outputs,
                               bool with_neighbours = false);
  // Untimed kernels `source` defines (texscope/opencl/neighbours.py's
  // SOURCE) before each launch, for run(..., with_neighbours): every map it
  // reads (an image, or a buffer among the plan's inputs; not the tensors
  // named in `untouched`) rewritten with its own contents from a clone
  // (made now: call after a run), every image it writes read.
  void add_neighbours(const std::string& source, const std::set<std::string>& untouched);
  // One inference without events, as an application runs one: the host's
  // wall time (seconds) from the first upload to the last output read, and
  // the part of it spent issuing the uploads and launches (the host's own
  // cost, whatever the device's speed).
  struct Wall {
    double total, submit;
  };
  Wall infer(const std::vector<Array>& inputs, std::vector<Array>& outputs);

  int launches() const;
  int copies() const;
  int images() const;
  size_t allocated_bytes() const { return allocated_bytes_; }

 private:
  struct Memory;
  struct Command;

  void set_up();
  void release();
  const Memory& allocate(const TensorSpec& spec);
  const Memory& workspace(const std::string& key, size_t nbytes);
  void add_copy(const TensorSpec& source, const TensorSpec& target);
  void add_launch(const Step& step);
  void upload(const TensorSpec& spec, const Array& array, bool blocking);
  void enqueue(const Command& command, cl_event* event);
  void read_back(const Memory& memory, Array& out);
  std::vector<Array> start_outputs() const;

  const Plan& plan_;
  const OpenCL& cl_;
  Device device_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  cl_program program_ = nullptr;
  cl_program neighbours_program_ = nullptr;
  std::vector<std::unique_ptr<Memory>> memory_;
  std::map<std::string, Memory*> by_name_;
  std::vector<cl_kernel> kernels_;
  std::vector<Command> commands_;
  std::vector<std::vector<Command>> neighbours_;  // per command, untimed, before it
  std::vector<Array> staged_inputs_;
  size_t allocated_bytes_ = 0;
};

}  // namespace texscope
