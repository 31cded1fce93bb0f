#include "opencl.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "error.hpp"

namespace texscope {
namespace {

// Where libOpenCL lives: the loader (ocl-icd, Khronos' ICD loader) on Linux;
// the vendor's driver on Android (Adreno: /vendor/lib64/libOpenCL.so; Mali:
// the same name, or the driver libGLES_mali.so that exports OpenCL itself).
const char* const kCandidates[] = {
    "libOpenCL.so.1",
    "libOpenCL.so",
    "/vendor/lib64/libOpenCL.so",
    "/system/vendor/lib64/libOpenCL.so",
    "/system/lib64/libOpenCL.so",
    "/vendor/lib64/egl/libGLES_mali.so",
    "/system/vendor/lib64/egl/libGLES_mali.so",
    "/vendor/lib/libOpenCL.so",
    "/system/vendor/lib/libOpenCL.so",
    "/vendor/lib/egl/libGLES_mali.so",
};

OpenCL load() {
  std::vector<std::string> tried;
  if (const char* chosen = std::getenv("TEXSCOPE_OPENCL_LIBRARY")) tried.push_back(chosen);
  else tried.assign(std::begin(kCandidates), std::end(kCandidates));
  std::string errors;
  for (const std::string& name : tried) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      errors += (errors.empty() ? "" : "; ") + std::string(dlerror());
      continue;
    }
    OpenCL cl;
    cl.library = name;
    std::string missing;
#define TEXSCOPE_LOAD(fn)                                                        \
  cl.fn = reinterpret_cast<decltype(cl.fn)>(dlsym(handle, #fn));                 \
  if (!cl.fn) missing += (missing.empty() ? "" : ", ") + std::string(#fn);
    TEXSCOPE_OPENCL_FUNCTIONS(TEXSCOPE_LOAD)
#undef TEXSCOPE_LOAD
    if (missing.empty()) return cl;
    errors += (errors.empty() ? "" : "; ") + name + " lacks " + missing;
    dlclose(handle);
  }
  throw Error("no OpenCL library loads (" + errors + "); install an OpenCL driver "
              "(apt-get install ocl-icd-libopencl1 pocl-opencl-icd for a CPU one) or set "
              "TEXSCOPE_OPENCL_LIBRARY to the libOpenCL.so to use");
}

}  // namespace

const OpenCL& opencl() {
  static const OpenCL cl = load();
  return cl;
}

std::string status_name(cl_int status) {
  switch (status) {
#define TEXSCOPE_NAME(code) case code: return #code;
    TEXSCOPE_NAME(CL_DEVICE_NOT_FOUND)
    TEXSCOPE_NAME(CL_DEVICE_NOT_AVAILABLE)
    TEXSCOPE_NAME(CL_COMPILER_NOT_AVAILABLE)
    TEXSCOPE_NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    TEXSCOPE_NAME(CL_OUT_OF_RESOURCES)
    TEXSCOPE_NAME(CL_OUT_OF_HOST_MEMORY)
    TEXSCOPE_NAME(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    TEXSCOPE_NAME(CL_BUILD_PROGRAM_FAILURE)
    TEXSCOPE_NAME(CL_INVALID_VALUE)
    TEXSCOPE_NAME(CL_INVALID_DEVICE)
    TEXSCOPE_NAME(CL_INVALID_CONTEXT)
    TEXSCOPE_NAME(CL_INVALID_MEM_OBJECT)
    TEXSCOPE_NAME(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    TEXSCOPE_NAME(CL_INVALID_IMAGE_SIZE)
    TEXSCOPE_NAME(CL_INVALID_BUILD_OPTIONS)
    TEXSCOPE_NAME(CL_INVALID_PROGRAM_EXECUTABLE)
    TEXSCOPE_NAME(CL_INVALID_KERNEL_NAME)
    TEXSCOPE_NAME(CL_INVALID_KERNEL)
    TEXSCOPE_NAME(CL_INVALID_ARG_INDEX)
    TEXSCOPE_NAME(CL_INVALID_ARG_VALUE)
    TEXSCOPE_NAME(CL_INVALID_ARG_SIZE)
    TEXSCOPE_NAME(CL_INVALID_KERNEL_ARGS)
    TEXSCOPE_NAME(CL_INVALID_WORK_DIMENSION)
    TEXSCOPE_NAME(CL_INVALID_WORK_GROUP_SIZE)
    TEXSCOPE_NAME(CL_INVALID_WORK_ITEM_SIZE)
    TEXSCOPE_NAME(CL_INVALID_GLOBAL_WORK_SIZE)
    TEXSCOPE_NAME(CL_INVALID_EVENT)
    TEXSCOPE_NAME(CL_INVALID_OPERATION)
    TEXSCOPE_NAME(CL_INVALID_BUFFER_SIZE)
#undef TEXSCOPE_NAME
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";  // cl_ext.h's; no OpenCL driver installed
    default: return "OpenCL error";
  }
}

void check(cl_int status, const char* call) {
  if (status != CL_SUCCESS)
    throw Error(std::string(call) + " failed: " + status_name(status) + " (" +
                std::to_string(status) + ")");
}

}  // namespace texscope
