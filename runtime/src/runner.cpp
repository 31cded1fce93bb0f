#include "runner.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "error.hpp"

namespace texscope {
namespace {

// How each texture flavour folds [d0, d1, d2, d3, 4] into (layers, height,
// width) of RGBA texels: texscope/knowledge/scopes.py's FLAVOUR_AXES.
struct Flavour {
  const char* scope;
  std::vector<int> layers, height, width;
};
const Flavour kFlavours[] = {
    {"global.texture-weight", {}, {0}, {1, 2, 3}},
    {"global.texture-nhwc", {0}, {1}, {2, 3}},
    {"global.texture", {0, 1}, {2}, {3}},
};
constexpr int64_t kTexelLanes = 4;

std::string text_info(const OpenCL& cl, cl_device_id device, cl_device_info what) {
  size_t size = 0;
  check(cl.clGetDeviceInfo(device, what, 0, nullptr, &size), "clGetDeviceInfo");
  std::string out(size, '\0');
  check(cl.clGetDeviceInfo(device, what, size, out.data(), nullptr), "clGetDeviceInfo");
  return out.c_str();
}

template <typename T>
T device_info(const OpenCL& cl, cl_device_id device, cl_device_info what) {
  T value{};
  check(cl.clGetDeviceInfo(device, what, sizeof value, &value, nullptr), "clGetDeviceInfo");
  return value;
}

std::string stripped(std::string s) {
  size_t begin = s.find_first_not_of(" \t\r\n"), end = s.find_last_not_of(" \t\r\n");
  return begin == std::string::npos ? "" : s.substr(begin, end - begin + 1);
}

// Whether the source enables cl_khr_fp16 (TVM's codegen does whenever a
// kernel computes in half), as source.py's HALF_PRAGMA finds it.
bool needs_fp16(const std::string& source) {
  for (size_t at = source.find("#pragma"); at != std::string::npos;
       at = source.find("#pragma", at + 1)) {
    std::string line = source.substr(at, source.find('\n', at) - at), packed;
    for (char c : line)
      if (!std::isspace(static_cast<unsigned char>(c))) packed += c;
    if (packed.rfind("#pragmaOPENCLEXTENSIONcl_khr_fp16:enable", 0) == 0) return true;
  }
  return false;
}

std::string shape_list(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The scalar argument's bytes as the kernel takes them (numpy's dtype(value)).
std::vector<uint8_t> scalar_bytes(const Arg& arg, const std::string& binding) {
  double real = arg.is_float ? arg.real : double(arg.size.value());
  int64_t whole = arg.is_float ? int64_t(arg.real) : arg.size.value();
  std::vector<uint8_t> out;
  auto put = [&out](auto v) {
    out.resize(sizeof v);
    std::memcpy(out.data(), &v, sizeof v);
  };
  const std::string& t = arg.dtype;
  if (t == "int32") put(int32_t(whole));
  else if (t == "int64") put(int64_t(whole));
  else if (t == "uint32") put(uint32_t(whole));
  else if (t == "uint64") put(uint64_t(whole));
  else if (t == "int16") put(int16_t(whole));
  else if (t == "uint16") put(uint16_t(whole));
  else if (t == "int8") put(int8_t(whole));
  else if (t == "uint8" || t == "bool") put(uint8_t(whole));
  else if (t == "float32") put(float(real));
  else if (t == "float64") put(real);
  else if (t == "float16") put(half_from_float(float(real)));
  else throw Error(located(binding, "a scalar argument of type " + t + " is not handled"));
  return out;
}

// Sends file descriptor 2 to /dev/null while it lives.
class QuietStderr {
 public:
  QuietStderr() : saved_(dup(2)) {
    int null = open("/dev/null", O_WRONLY);
    if (saved_ >= 0 && null >= 0) dup2(null, 2);
    if (null >= 0) close(null);
  }
  ~QuietStderr() {
    if (saved_ >= 0) {
      dup2(saved_, 2);
      close(saved_);
    }
  }
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  int saved_;
};

// (width, height, layers) in texels of a texture-scoped tensor's image.
std::array<size_t, 3> image_extent(const TensorSpec& spec) {
  if (spec.dtype != "float32" && spec.dtype != "float16")
    throw Error("tensor " + spec.name + ": " + spec.dtype + " is not an image texel type");
  const Flavour* flavour = nullptr;
  for (const auto& f : kFlavours)
    if (spec.scope == f.scope) flavour = &f;
  if (!flavour) throw Error("tensor " + spec.name + ": unknown texture scope '" + spec.scope + "'");
  const std::vector<int64_t> shape = spec.extents();
  if (shape.size() != 5 || shape[4] != kTexelLanes)
    throw Error("tensor " + spec.name + ": a " + spec.scope + " image needs a 5-D shape with " +
                "an inner axis of 4, not " + shape_list(shape));
  auto fold = [&shape](const std::vector<int>& axes) {
    size_t n = 1;
    for (int axis : axes) n *= size_t(shape[axis]);
    return n;
  };
  return {fold(flavour->width), fold(flavour->height), fold(flavour->layers)};
}

// The replay's checks of a resolved plan against its kernels and the
// device, made before anything is compiled or allocated: every launched
// kernel defined in the source (known from the source, not from
// CL_PROGRAM_KERNEL_NAMES: NVIDIA's driver corrupts its heap answering that
// for many long names), every tensor argument held in the scope the kernel
// takes it in and declared as that storage, copies between equal shapes of
// tensors already written, every image within the device's limits.
void check_plan(const Plan& plan, const OpenCL& cl, cl_device_id device) {
  const auto declared = kernel_signatures(plan.source);
  std::vector<std::string> used = plan.inputs;
  for (const auto& [name, array] : plan.constants) used.push_back(name);
  for (const Step& step : plan.steps) {
    if (step.kind == Step::Copy) {
      const TensorSpec &source = plan.spec(step.source), &target = plan.spec(step.target);
      if (source.extents() != target.extents() || source.dtype != target.dtype)
        throw Error("copy " + source.name + " -> " + target.name + ": shapes or types differ");
      if (std::find(used.begin(), used.end(), source.name) == used.end())
        throw Error(located(step.binding, "the copy reads " + source.name +
                    " before anything writes it"));
      used.push_back(target.name);
      continue;
    }
    auto params = declared.find(step.kernel);
    if (params == declared.end())
      throw Error(located(step.binding, "kernel " + step.kernel + " is not in the OpenCL source"));
    if (params->second.size() != step.args.size())
      throw Error(located(step.binding, "kernel " + step.kernel + " declares " +
                  std::to_string(params->second.size()) + " parameters; the plan passes " +
                  std::to_string(step.args.size())));
    for (size_t position = 0; position < step.args.size(); ++position) {
      const Arg& arg = step.args[position];
      if (arg.kind == Arg::Scalar) scalar_bytes(arg, step.binding);
      if (arg.kind != Arg::Tensor) continue;
      const TensorSpec& tensor = plan.spec(arg.name);
      if (tensor.scope != arg.scope)
        throw Error(located(step.binding, "kernel " + step.kernel + " takes " + tensor.name +
                    " as '" + arg.scope + "' but the program holds it in '" + tensor.scope + "'"));
      const std::string& param = params->second[position];
      if (tensor.is_texture() != (param.find("image2d_array_t") != std::string::npos))
        throw Error(located(step.binding, "kernel " + step.kernel + " declares `" + param +
                    "` for " + tensor.name + ", held in '" + tensor.scope +
                    "'; textures are image2d_array_t images and buffers otherwise"));
      used.push_back(tensor.name);
    }
  }
  const size_t limits[3] = {device_info<size_t>(cl, device, CL_DEVICE_IMAGE2D_MAX_WIDTH),
                            device_info<size_t>(cl, device, CL_DEVICE_IMAGE2D_MAX_HEIGHT),
                            device_info<size_t>(cl, device, CL_DEVICE_IMAGE_MAX_ARRAY_SIZE)};
  for (const auto& name : used) {
    const TensorSpec& spec = plan.spec(name);
    if (!spec.is_texture()) continue;
    const std::array<size_t, 3> extent = image_extent(spec);
    if (extent[0] > limits[0] || extent[1] > limits[1] || extent[2] > limits[2])
      throw Error("tensor " + spec.name + ": its " + spec.scope + " image is " +
                  std::to_string(extent[0]) + " x " + std::to_string(extent[1]) + " texels x " +
                  std::to_string(extent[2]) + " layers, over this device's " +
                  std::to_string(limits[0]) + " x " + std::to_string(limits[1]) + " x " +
                  std::to_string(limits[2]) + "; build for a target with texture_spatial_limit=" +
                  std::to_string(std::min(limits[0], limits[1])) +
                  " and texture_depth_limit=" + std::to_string(limits[2]));
  }
}

}  // namespace

struct Session::Memory {
  cl_mem mem = nullptr;
  bool image = false;
  size_t region[3] = {0, 0, 0};  // an image's width, height, layers
  size_t bytes = 0;
};

struct Session::Command {
  enum Kind { Launch, CopyBuffer, CopyImage, ImageToBuffer, BufferToImage } kind;
  size_t step;  // the plan's step it belongs to
  cl_kernel kernel = nullptr;
  cl_uint dims = 0;
  size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
  const Memory* source = nullptr;
  const Memory* target = nullptr;
};

std::string Device::describe() const {
  const Info facts = info();
  return facts.name + " (" + facts.platform + ", driver " + facts.driver_version + ")";
}

std::vector<Device> devices() {
  const OpenCL& cl = opencl();
  cl_uint count = 0;
  cl_int status = cl.clGetPlatformIDs(0, nullptr, &count);
  if (status != CL_SUCCESS || count == 0)
    throw Error("no OpenCL platform found (" + status_name(status) +
                "); apt-get install pocl-opencl-icd for a CPU one");
  std::vector<cl_platform_id> platforms(count);
  check(cl.clGetPlatformIDs(count, platforms.data(), nullptr), "clGetPlatformIDs");
  std::vector<Device> found;
  for (cl_platform_id platform : platforms) {
    cl_uint n = 0;
    if (cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS) continue;
    std::vector<cl_device_id> ids(n);
    check(cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n, ids.data(), nullptr), "clGetDeviceIDs");
    for (cl_device_id id : ids) found.push_back({platform, id});
  }
  return found;
}

Device pick_device(int index) {
  std::vector<Device> found = devices();
  if (found.empty())
    throw Error("no OpenCL device found (apt-get install pocl-opencl-icd for a CPU one)");
  if (index < 0 || size_t(index) >= found.size()) {
    std::string listed;
    for (size_t i = 0; i < found.size(); ++i)
      listed += (i ? "; " : "") + std::to_string(i) + ": " +
                stripped(text_info(opencl(), found[i].id, CL_DEVICE_NAME));
    throw Error("no OpenCL device " + std::to_string(index) + "; there are " + listed);
  }
  return found[size_t(index)];
}

Device::Info Device::info() const {
  const OpenCL& cl = opencl();
  size_t size = 0;
  check(cl.clGetPlatformInfo(platform, CL_PLATFORM_NAME, 0, nullptr, &size), "clGetPlatformInfo");
  std::string platform_name(size, '\0');
  check(cl.clGetPlatformInfo(platform, CL_PLATFORM_NAME, size, platform_name.data(), nullptr),
        "clGetPlatformInfo");
  return {stripped(text_info(cl, id, CL_DEVICE_NAME)),
          stripped(platform_name.c_str()),
          stripped(text_info(cl, id, CL_DEVICE_VENDOR)),
          stripped(text_info(cl, id, CL_DRIVER_VERSION)),
          stripped(text_info(cl, id, CL_DEVICE_VERSION)),
          device_info<cl_uint>(cl, id, CL_DEVICE_MAX_COMPUTE_UNITS),
          device_info<size_t>(cl, id, CL_DEVICE_IMAGE2D_MAX_WIDTH),
          device_info<size_t>(cl, id, CL_DEVICE_IMAGE2D_MAX_HEIGHT),
          device_info<size_t>(cl, id, CL_DEVICE_IMAGE_MAX_ARRAY_SIZE)};
}

// Uniform [-1, 1) inputs (not numpy's generator: for the same numbers as the
// Python replay, give both --inputs).
std::vector<Array> random_inputs(const Plan& plan, uint64_t seed) {
  if (plan.symbolic()) {
    std::string sizes;
    for (const auto& name : plan.sizes) sizes += (sizes.empty() ? "" : ", ") + name;
    throw Error("main's inputs have symbolic sizes (" + sizes +
                "): give arrays of the size to run with --inputs");
  }
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&state] {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::vector<Array> inputs;
  for (const auto& name : plan.inputs) {
    const TensorSpec& spec = plan.spec(name);
    Array values{"float64", spec.extents(), {}};
    values.data.resize(size_t(values.count()) * 8);
    for (int64_t i = 0; i < values.count(); ++i) {
      double v = double(next() >> 11) * 0x1.0p-53 * 2.0 - 1.0;
      std::memcpy(values.data.data() + i * 8, &v, 8);
    }
    inputs.push_back(converted(values, spec.dtype));
  }
  return inputs;
}

Session::Session(const Plan& plan, const Device& device)
    : plan_(plan), cl_(opencl()), device_(device) {
  try {
    set_up();
  } catch (...) {
    release();  // the destructor of a half-made object does not run
    throw;
  }
}

void Session::set_up() {
  const Plan& plan = plan_;
  const Device& device = device_;
  const std::string name = stripped(text_info(cl_, device.id, CL_DEVICE_NAME));
  if (needs_fp16(plan.source) &&
      (" " + text_info(cl_, device.id, CL_DEVICE_EXTENSIONS) + " ").find(" cl_khr_fp16 ") ==
          std::string::npos)
    throw Error(name + " lacks cl_khr_fp16, which these kernels need (float16 tensors are "
                "computed in half precision): run them on a device that has it (Adreno and "
                "Mali GPUs do) or build the model in float32");
  check_plan(plan, cl_, device.id);
  cl_int status = CL_SUCCESS;
  context_ = cl_.clCreateContext(nullptr, 1, &device.id, nullptr, nullptr, &status);
  check(status, "clCreateContext");
  queue_ = cl_.clCreateCommandQueue(context_, device.id, CL_QUEUE_PROFILING_ENABLE, &status);
  check(status, "clCreateCommandQueue");
  const char* source = plan.source.c_str();
  size_t length = plan.source.size();
  program_ = cl_.clCreateProgramWithSource(context_, 1, &source, &length, &status);
  check(status, "clCreateProgramWithSource");
  {
    // Some compilers (PoCL's clang) print their diagnostics on our stderr as
    // well as into the build log: the log is what an error quotes, in one line.
    QuietStderr quiet;
    status = cl_.clBuildProgram(program_, 1, &device.id, "", nullptr, nullptr);
  }
  if (status != CL_SUCCESS) {
    size_t size = 0;
    cl_.clGetProgramBuildInfo(program_, device.id, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::string log(size, '\0');
    cl_.clGetProgramBuildInfo(program_, device.id, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::string line;
    for (char c : stripped(log.c_str())) line += (c == '\n' ? ' ' : c);
    if (line.size() > 400) line = line.substr(0, 400) + " ...";
    throw Error(name + " rejects the kernels: " + status_name(status) + ": " + line);
  }
  for (const auto& input : plan.inputs) allocate(plan.spec(input));
  for (const auto& [constant, array] : plan.constants) upload(plan.spec(constant), array, true);
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const Step& step = plan.steps[i];
    size_t first = commands_.size();
    if (step.kind == Step::Copy) add_copy(plan.spec(step.source), plan.spec(step.target));
    else add_launch(step);
    for (size_t c = first; c < commands_.size(); ++c) commands_[c].step = i;
  }
}

Session::~Session() { release(); }

void Session::release() {
  for (cl_kernel kernel : kernels_) cl_.clReleaseKernel(kernel);
  for (const auto& memory : memory_) cl_.clReleaseMemObject(memory->mem);
  if (neighbours_program_) cl_.clReleaseProgram(neighbours_program_);
  neighbours_program_ = nullptr;
  neighbours_.clear();
  if (program_) cl_.clReleaseProgram(program_);
  if (queue_) cl_.clReleaseCommandQueue(queue_);
  if (context_) cl_.clReleaseContext(context_);
  kernels_.clear();
  memory_.clear();
  program_ = nullptr;
  queue_ = nullptr;
  context_ = nullptr;
}

const Session::Memory& Session::allocate(const TensorSpec& spec) {
  auto found = by_name_.find(spec.name);
  if (found != by_name_.end()) return *found->second;
  auto memory = std::make_unique<Memory>();
  int64_t count = 1;
  for (int64_t extent : spec.extents()) count *= extent;
  cl_int status = CL_SUCCESS;
  if (spec.is_texture()) {
    const std::array<size_t, 3> extent = image_extent(spec);
    cl_image_format format{CL_RGBA, spec.dtype == "float32" ? cl_channel_type(CL_FLOAT)
                                                            : cl_channel_type(CL_HALF_FLOAT)};
    cl_image_desc desc{};
    desc.image_type = CL_MEM_OBJECT_IMAGE2D_ARRAY;
    desc.image_width = extent[0];
    desc.image_height = extent[1];
    desc.image_array_size = extent[2];
    memory->mem = cl_.clCreateImage(context_, CL_MEM_READ_WRITE, &format, &desc, nullptr, &status);
    check(status, ("clCreateImage for " + spec.name).c_str());
    memory->image = true;
    std::copy(extent.begin(), extent.end(), memory->region);
    memory->bytes = extent[0] * extent[1] * extent[2] * kTexelLanes * itemsize(spec.dtype);
  } else {
    memory->bytes = std::max<size_t>(size_t(count) * itemsize(spec.dtype), 1);
    memory->mem = cl_.clCreateBuffer(context_, CL_MEM_READ_WRITE, memory->bytes, nullptr, &status);
    check(status, ("clCreateBuffer for " + spec.name).c_str());
  }
  allocated_bytes_ += memory->bytes;
  by_name_[spec.name] = memory.get();
  memory_.push_back(std::move(memory));
  return *memory_.back();
}

const Session::Memory& Session::workspace(const std::string& key, size_t nbytes) {
  auto found = by_name_.find(key);
  if (found != by_name_.end()) return *found->second;
  auto memory = std::make_unique<Memory>();
  cl_int status = CL_SUCCESS;
  memory->bytes = std::max<size_t>(nbytes, 1);
  memory->mem = cl_.clCreateBuffer(context_, CL_MEM_READ_WRITE, memory->bytes, nullptr, &status);
  check(status, "clCreateBuffer for a workspace");
  allocated_bytes_ += memory->bytes;
  by_name_[key] = memory.get();
  memory_.push_back(std::move(memory));
  return *memory_.back();
}

void Session::add_copy(const TensorSpec& source, const TensorSpec& target) {
  if (source.is_texture() && target.is_texture() && source.scope != target.scope) {
    // Different flavours fold the axes differently: go through a buffer.
    TensorSpec staging{source.name + "->" + target.name, source.shape, source.dtype, "global"};
    add_copy(source, staging);
    add_copy(staging, target);
    return;
  }
  Command command{};
  command.source = &allocate(source);
  command.target = &allocate(target);
  command.kind = source.is_texture()
                     ? (target.is_texture() ? Command::CopyImage : Command::ImageToBuffer)
                     : (target.is_texture() ? Command::BufferToImage : Command::CopyBuffer);
  commands_.push_back(command);
}

void Session::add_launch(const Step& step) {
  cl_int status = CL_SUCCESS;
  cl_kernel kernel = cl_.clCreateKernel(program_, step.kernel.c_str(), &status);
  check(status, ("clCreateKernel " + step.kernel).c_str());
  kernels_.push_back(kernel);
  for (size_t position = 0; position < step.args.size(); ++position) {
    const Arg& arg = step.args[position];
    const std::string where = "argument " + std::to_string(position) + " of " + step.kernel;
    if (arg.kind == Arg::Scalar) {
      std::vector<uint8_t> bytes = scalar_bytes(arg, step.binding);
      check(cl_.clSetKernelArg(kernel, cl_uint(position), bytes.size(), bytes.data()),
            ("clSetKernelArg (" + where + ")").c_str());
      continue;
    }
    const Memory* memory;
    if (arg.kind == Arg::Workspace) {
      memory = &workspace(step.binding + "\n" + arg.name, size_t(arg.size.value()));
    } else {
      const TensorSpec& tensor = plan_.spec(arg.name);
      memory = &allocate(tensor);
    }
    check(cl_.clSetKernelArg(kernel, cl_uint(position), sizeof(cl_mem), &memory->mem),
          ("clSetKernelArg (" + where + ")").c_str());
  }
  Command command{};
  command.kind = Command::Launch;
  command.kernel = kernel;
  command.dims = cl_uint(step.global_size.size());
  for (cl_uint d = 0; d < command.dims; ++d) {
    command.global[d] = size_t(step.global_size[d].value());
    command.local[d] = size_t(step.local_size[d].value());
  }
  commands_.push_back(command);
}

void Session::upload(const TensorSpec& spec, const Array& array, bool blocking) {
  if (array.shape != spec.extents())
    throw Error("tensor " + spec.name + ": expected shape " + shape_list(spec.extents()) +
                ", got " + shape_list(array.shape));
  const Memory& memory = allocate(spec);
  const void* bytes = array.data.data();
  if (array.dtype != spec.dtype) {
    // Kept until the run ends: a non-blocking write reads it later.
    staged_inputs_.push_back(converted(array, spec.dtype));
    bytes = staged_inputs_.back().data.data();
  }
  cl_bool block = blocking ? CL_TRUE : CL_FALSE;
  if (memory.image) {
    const size_t origin[3] = {0, 0, 0};
    check(cl_.clEnqueueWriteImage(queue_, memory.mem, block, origin, memory.region, 0, 0, bytes,
                                  0, nullptr, nullptr),
          ("clEnqueueWriteImage for " + spec.name).c_str());
  } else {
    check(cl_.clEnqueueWriteBuffer(queue_, memory.mem, block, 0, memory.bytes, bytes, 0, nullptr,
                                   nullptr),
          ("clEnqueueWriteBuffer for " + spec.name).c_str());
  }
}

void Session::enqueue(const Command& c, cl_event* event) {
  const size_t origin[3] = {0, 0, 0};
  switch (c.kind) {
    case Command::Launch:
      // A local size of 0: the driver's choice (a neighbour's launch).
      check(cl_.clEnqueueNDRangeKernel(queue_, c.kernel, c.dims, nullptr, c.global,
                                       c.local[0] ? c.local : nullptr, 0, nullptr, event),
            ("clEnqueueNDRangeKernel " + plan_.steps[c.step].kernel).c_str());
      return;
    case Command::CopyBuffer:
      check(cl_.clEnqueueCopyBuffer(queue_, c.source->mem, c.target->mem, 0, 0, c.source->bytes,
                                    0, nullptr, event), "clEnqueueCopyBuffer");
      return;
    case Command::CopyImage:
      check(cl_.clEnqueueCopyImage(queue_, c.source->mem, c.target->mem, origin, origin,
                                   c.source->region, 0, nullptr, event), "clEnqueueCopyImage");
      return;
    case Command::ImageToBuffer:
      check(cl_.clEnqueueCopyImageToBuffer(queue_, c.source->mem, c.target->mem, origin,
                                           c.source->region, 0, 0, nullptr, event),
            "clEnqueueCopyImageToBuffer");
      return;
    case Command::BufferToImage:
      check(cl_.clEnqueueCopyBufferToImage(queue_, c.source->mem, c.target->mem, 0, origin,
                                           c.target->region, 0, nullptr, event),
            "clEnqueueCopyBufferToImage");
      return;
  }
}

std::vector<Array> Session::start_outputs() const {
  std::vector<Array> outputs;
  for (const auto& name : plan_.outputs) {
    const TensorSpec& spec = plan_.spec(name);
    Array out{spec.dtype, spec.extents(), {}};
    out.data.resize(size_t(out.count()) * itemsize(spec.dtype));
    outputs.push_back(std::move(out));
  }
  return outputs;
}


void Session::read_back(const Memory& memory, Array& out) {
  const size_t origin[3] = {0, 0, 0};
  if (out.data.empty()) return;  // an empty tensor: nothing to read
  if (memory.image)
    check(cl_.clEnqueueReadImage(queue_, memory.mem, CL_FALSE, origin, memory.region, 0, 0,
                                 out.data.data(), 0, nullptr, nullptr), "clEnqueueReadImage");
  else
    check(cl_.clEnqueueReadBuffer(queue_, memory.mem, CL_FALSE, 0, out.data.size(),
                                  out.data.data(), 0, nullptr, nullptr), "clEnqueueReadBuffer");
}

void Session::add_neighbours(const std::string& source, const std::set<std::string>& untouched) {
  cl_int status = CL_SUCCESS;
  const char* text = source.c_str();
  size_t length = source.size();
  neighbours_program_ = cl_.clCreateProgramWithSource(context_, 1, &text, &length, &status);
  check(status, "clCreateProgramWithSource (neighbours)");
  check(cl_.clBuildProgram(neighbours_program_, 1, &device_.id, "", nullptr, nullptr),
        "clBuildProgram (neighbours)");
  const Memory& sink = workspace("\nneighbours' sink", sizeof(float));
  std::map<const Memory*, const Memory*> clones;
  const auto declared = kernel_signatures(plan_.source);
  // A launch of `name` on (first, second), over `touched`'s texels or bytes.
  auto launch = [&](const char* name, const Memory& first, const Memory& second,
                    const Memory& touched) {
    cl_kernel kernel = cl_.clCreateKernel(neighbours_program_, name, &status);
    check(status, (std::string("clCreateKernel ") + name).c_str());
    kernels_.push_back(kernel);
    check(cl_.clSetKernelArg(kernel, 0, sizeof(cl_mem), &first.mem), "clSetKernelArg");
    check(cl_.clSetKernelArg(kernel, 1, sizeof(cl_mem), &second.mem), "clSetKernelArg");
    Command command{};
    command.kind = Command::Launch;
    command.kernel = kernel;
    command.dims = 3;
    if (touched.image) {
      std::copy(touched.region, touched.region + 3, command.global);
    } else {
      command.dims = 1;
      command.global[0] = touched.bytes;
    }
    std::fill(command.local, command.local + 3, size_t(0));
    return command;
  };
  // A copy of a tensor's memory, made once, for the rewrites to read.
  auto clone_of = [&](const Memory& memory, const std::string& name) -> const Memory& {
    auto found = clones.find(&memory);
    if (found != clones.end()) return *found->second;
    const Memory* clone;
    if (memory.image) {
      TensorSpec copy = plan_.spec(name);
      copy.name = "\nclone of " + name;
      clone = &allocate(copy);
      const size_t origin[3] = {0, 0, 0};
      check(cl_.clEnqueueCopyImage(queue_, memory.mem, clone->mem, origin, origin, memory.region,
                                   0, nullptr, nullptr), "clEnqueueCopyImage");
    } else {
      clone = &workspace("\nclone of " + name, memory.bytes);
      check(cl_.clEnqueueCopyBuffer(queue_, memory.mem, clone->mem, 0, 0, memory.bytes, 0,
                                    nullptr, nullptr), "clEnqueueCopyBuffer");
    }
    clones[&memory] = clone;
    return *clone;
  };
  const std::set<std::string> inputs(plan_.inputs.begin(), plan_.inputs.end());
  neighbours_.assign(commands_.size(), {});
  for (size_t c = 0; c < commands_.size(); ++c) {
    if (commands_[c].kind != Command::Launch) continue;
    const Step& step = plan_.steps[commands_[c].step];
    const std::vector<std::string>& params = declared.at(step.kernel);
    for (size_t position = 0; position < step.args.size(); ++position) {
      const Arg& arg = step.args[position];
      if (arg.kind != Arg::Tensor || untouched.count(arg.name)) continue;
      const Memory& memory = *by_name_.at(arg.name);
      const std::string& param = params[position];
      // A buffer's direction is not declared: the plan's inputs are what its
      // kernels read (a tuning set's are).
      const bool reads = memory.image ? param.find("read_only") != std::string::npos
                                      : inputs.count(arg.name) > 0;
      if (reads)
        neighbours_[c].push_back(launch(
            memory.image ? "texscope_rewrite_image" : "texscope_rewrite_buffer",
            clone_of(memory, arg.name), memory, memory));
      else if (memory.image && param.find("write_only") != std::string::npos)
        neighbours_[c].push_back(launch("texscope_read_image", memory, sink, memory));
    }
  }
  check(cl_.clFinish(queue_), "clFinish");
}

std::vector<CommandTime> Session::run(const std::vector<Array>& inputs,
                                      std::vector<Array>& outputs, bool with_neighbours) {
  staged_inputs_.clear();
  for (size_t i = 0; i < inputs.size(); ++i) upload(plan_.spec(plan_.inputs[i]), inputs[i], true);
  std::vector<cl_event> events(commands_.size());
  for (size_t i = 0; i < commands_.size(); ++i) {
    if (with_neighbours && i < neighbours_.size())
      for (const Command& neighbour : neighbours_[i]) enqueue(neighbour, nullptr);
    enqueue(commands_[i], &events[i]);
  }
  if (outputs.size() != plan_.outputs.size()) outputs = start_outputs();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Memory& m = *by_name_.at(plan_.outputs[i]);
    read_back(m, outputs[i]);
  }
  check(cl_.clFinish(queue_), "clFinish");
  // One time per step of the plan: a copy between two image flavours is two
  // commands (through a buffer), timed together.
  std::vector<CommandTime> times;
  for (size_t i = 0; i < commands_.size(); ++i) {
    cl_ulong start = 0, end = 0;
    check(cl_.clGetEventProfilingInfo(events[i], CL_PROFILING_COMMAND_START, sizeof start, &start,
                                      nullptr), "clGetEventProfilingInfo");
    check(cl_.clGetEventProfilingInfo(events[i], CL_PROFILING_COMMAND_END, sizeof end, &end,
                                      nullptr), "clGetEventProfilingInfo");
    cl_.clReleaseEvent(events[i]);
    const Step& step = plan_.steps[commands_[i].step];
    double seconds = double(end - start) * 1e-9;
    if (i > 0 && commands_[i - 1].step == commands_[i].step) {
      times.back().seconds += seconds;
      continue;
    }
    times.push_back({step.binding, step.kind == Step::Copy ? "to_vdevice" : step.kernel, seconds});
  }
  return times;
}

Session::Wall Session::infer(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  using Clock = std::chrono::steady_clock;
  if (outputs.size() != plan_.outputs.size()) outputs = start_outputs();
  const auto start = Clock::now();
  staged_inputs_.clear();
  for (size_t i = 0; i < inputs.size(); ++i) upload(plan_.spec(plan_.inputs[i]), inputs[i], false);
  for (const Command& command : commands_) enqueue(command, nullptr);
  const auto submitted = Clock::now();
  for (size_t i = 0; i < outputs.size(); ++i) read_back(*by_name_.at(plan_.outputs[i]), outputs[i]);
  check(cl_.clFinish(queue_), "clFinish");
  const auto end = Clock::now();
  return {std::chrono::duration<double>(end - start).count(),
          std::chrono::duration<double>(submitted - start).count()};
}

int Session::launches() const {
  int n = 0;
  for (const Step& step : plan_.steps) n += step.kind == Step::Kernel;
  return n;
}

int Session::copies() const { return int(plan_.steps.size()) - launches(); }

int Session::images() const {
  int n = 0;
  for (const auto& [name, memory] : by_name_) n += memory->image;
  return n;
}

}  // namespace texscope
