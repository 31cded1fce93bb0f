// texscope-run --tune DIR -o FILE: times a tuning set (what `texscope tune
// MODEL -o DIR` wrote) on an OpenCL device and writes the tuning file, as
// `python -m texscope.opencl.tune DIR -o FILE` does, without Python.
#pragma once

#include <string>

namespace texscope {

struct TuneOptions {
  std::string directory, output;
  int device = 0, repeats = 9;  // texscope.opencl.tune's DEFAULT_REPEATS
};

// Warm-up run, then `repeats` profiled runs of the set's whole program; a
// variant's or copy's time is the median over the runs of its launches'
// summed profiling-event time.  An Error (one line, nothing written) for a
// missing or broken set, or an output that exists and is no tuning file.
void tune(const TuneOptions& options);

}  // namespace texscope
