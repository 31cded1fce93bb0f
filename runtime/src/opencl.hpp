// The OpenCL 1.2 entry points the runner calls, found in libOpenCL at run
// time (dlopen): Android ships the library with the GPU driver, outside the
// NDK, so nothing links against it.
#pragma once

#include <CL/cl.h>

#include <string>

namespace texscope {

#define TEXSCOPE_OPENCL_FUNCTIONS(X) \
  X(clGetPlatformIDs)                \
  X(clGetPlatformInfo)               \
  X(clGetDeviceIDs)                  \
  X(clGetDeviceInfo)                 \
  X(clCreateContext)                 \
  X(clReleaseContext)                \
  X(clCreateCommandQueue)            \
  X(clReleaseCommandQueue)           \
  X(clCreateProgramWithSource)       \
  X(clBuildProgram)                  \
  X(clGetProgramBuildInfo)           \
  X(clReleaseProgram)                \
  X(clCreateKernel)                  \
  X(clReleaseKernel)                 \
  X(clSetKernelArg)                  \
  X(clCreateBuffer)                  \
  X(clCreateImage)                   \
  X(clReleaseMemObject)              \
  X(clEnqueueWriteBuffer)            \
  X(clEnqueueReadBuffer)             \
  X(clEnqueueWriteImage)             \
  X(clEnqueueReadImage)              \
  X(clEnqueueCopyBuffer)             \
  X(clEnqueueCopyImage)              \
  X(clEnqueueCopyImageToBuffer)      \
  X(clEnqueueCopyBufferToImage)      \
  X(clEnqueueNDRangeKernel)          \
  X(clFinish)                        \
  X(clWaitForEvents)                 \
  X(clGetEventProfilingInfo)         \
  X(clReleaseEvent)

struct OpenCL {
#define TEXSCOPE_DECLARE(name) decltype(&::name) name = nullptr;
  TEXSCOPE_OPENCL_FUNCTIONS(TEXSCOPE_DECLARE)
#undef TEXSCOPE_DECLARE
  std::string library;  // the file it came from
};

// The functions, from $TEXSCOPE_OPENCL_LIBRARY or the first library found
// where Linux distributions and Android phones keep it; an Error naming the
// places tried when none loads.
const OpenCL& opencl();

// An Error for a failed call: "clCreateBuffer failed: CL_INVALID_VALUE (-30)".
void check(cl_int status, const char* call);
std::string status_name(cl_int status);

}  // namespace texscope
