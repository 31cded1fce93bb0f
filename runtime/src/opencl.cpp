#include "opencl.hpp"

#include <CL/cl_icd.h>
#include <dirent.h>
#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
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

using GetPlatforms = cl_int (*)(cl_uint, cl_platform_id*, cl_uint*);

// Every entry point from the library's own exports (a loader such as
// ocl-icd, or a vendor library exporting the API, as Android's do).
bool from_exports(void* handle, OpenCL& cl, std::string& missing) {
#define TEXSCOPE_LOAD(fn)                                          \
  cl.fn = reinterpret_cast<decltype(cl.fn)>(dlsym(handle, #fn));   \
  if (!cl.fn) missing += (missing.empty() ? "" : ", ") + std::string(#fn);
  TEXSCOPE_OPENCL_FUNCTIONS(TEXSCOPE_LOAD)
#undef TEXSCOPE_LOAD
  return missing.empty();
}

// A vendor's installable client driver used without a loader: its platforms
// from clIcdGetPlatformIDsKHR, every other entry point from the dispatch
// table each of its objects starts with (the cl_khr_icd layout).
bool from_icd(void* handle, OpenCL& cl) {
  auto platforms = reinterpret_cast<GetPlatforms>(dlsym(handle, "clIcdGetPlatformIDsKHR"));
  if (!platforms) {
    using Lookup = void* (*)(const char*);
    if (auto lookup = reinterpret_cast<Lookup>(dlsym(handle, "clGetExtensionFunctionAddress")))
      platforms = reinterpret_cast<GetPlatforms>(lookup("clIcdGetPlatformIDsKHR"));
  }
  cl_platform_id platform = nullptr;
  cl_uint count = 0;
  if (!platforms || platforms(1, &platform, &count) != CL_SUCCESS || count == 0) return false;
  const cl_icd_dispatch* dispatch = *reinterpret_cast<cl_icd_dispatch* const*>(platform);
  bool complete = true;
#define TEXSCOPE_LOAD(fn)                                                \
  cl.fn = reinterpret_cast<decltype(cl.fn)>(dispatch->fn);               \
  complete = complete && cl.fn != nullptr;
  TEXSCOPE_OPENCL_FUNCTIONS(TEXSCOPE_LOAD)
#undef TEXSCOPE_LOAD
  cl.clGetPlatformIDs = platforms;
  return complete;
}

// The driver libraries the installed .icd files name ($OCL_ICD_VENDORS, a
// directory or one file, else /etc/OpenCL/vendors).
std::vector<std::string> vendor_libraries() {
  const char* chosen = std::getenv("OCL_ICD_VENDORS");
  std::string place = chosen && *chosen ? chosen : "/etc/OpenCL/vendors";
  std::vector<std::string> files;
  if (DIR* dir = opendir(place.c_str())) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".icd") == 0)
        files.push_back(place + "/" + name);
    }
    closedir(dir);
  } else {
    files.push_back(place);
  }
  std::vector<std::string> libraries;
  for (const auto& file : files) {
    std::ifstream in(file);
    std::string line;
    if (std::getline(in, line) && !line.empty()) libraries.push_back(line);
  }
  return libraries;
}

OpenCL load() {
  std::vector<std::string> tried;
  if (const char* chosen = std::getenv("TEXSCOPE_OPENCL_LIBRARY")) {
    tried.push_back(chosen);
  } else {
    tried.assign(std::begin(kCandidates), std::end(kCandidates));
    for (const auto& vendor : vendor_libraries()) tried.push_back(vendor);
  }
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
    if (from_exports(handle, cl, missing) || from_icd(handle, cl)) return cl;
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
