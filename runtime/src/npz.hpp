// Arrays in numpy's .npz files: a zip of .npy entries, stored uncompressed
// (np.savez).  Enough of both formats to read what numpy writes and to write
// what np.load reads, with no zlib: a compressed entry (np.savez_compressed)
// is refused with a one-line error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace texscope {

// A dense row-major array; dtype is numpy's name ("float32", "int64", ...).
struct Array {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  int64_t count() const;
};

// Bytes of one element of a numpy dtype name; an Error for a dtype the runner
// does not handle.
size_t itemsize(const std::string& dtype);

// `array` converted to `dtype` (values cast as numpy's astype does for finite
// values in range).
Array converted(const Array& array, const std::string& dtype);

// Element `i` of `array` as a double.
double element(const Array& array, int64_t i);

// Every entry of an .npz, keyed without the ".npy" suffix, in file order.
std::vector<std::pair<std::string, Array>> read_npz(const std::string& path);

// Writes `arrays` as an .npz np.load reads; the file must not exist yet.
void write_npz(const std::string& path, const std::vector<std::pair<std::string, Array>>& arrays);

// IEEE half <-> single precision, round to nearest even.
uint16_t half_from_float(float value);
float float_from_half(uint16_t bits);

}  // namespace texscope
