#include "npz.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <cerrno>
#include <iterator>
#include <sstream>

#include "error.hpp"

namespace texscope {
namespace {

struct DtypeInfo {
  const char* name;
  const char* descr;  // numpy's little-endian type string
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {"float32", "<f4", 4}, {"float16", "<f2", 2}, {"float64", "<f8", 8},
    {"int8", "|i1", 1},    {"uint8", "|u1", 1},   {"int16", "<i2", 2},
    {"uint16", "<u2", 2},  {"int32", "<i4", 4},   {"uint32", "<u4", 4},
    {"int64", "<i8", 8},   {"uint64", "<u8", 8},  {"bool", "|b1", 1},
};

const DtypeInfo* by_name(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const DtypeInfo* by_descr(const std::string& descr) {
  for (const auto& d : kDtypes) {
    // numpy writes "<i1" or "|i1" for single bytes depending on the version.
    if (descr == d.descr || (d.size == 1 && descr.size() == 3 && descr.substr(1) == d.descr + 1 &&
                             (descr[0] == '<' || descr[0] == '|' || descr[0] == '=')))
      return &d;
  }
  return nullptr;
}

uint32_t read_u16(const uint8_t* p) { return p[0] | (p[1] << 8); }
uint32_t read_u32(const uint8_t* p) { return read_u16(p) | (read_u16(p + 2) << 16); }
uint64_t read_u64(const uint8_t* p) { return read_u32(p) | (uint64_t(read_u32(p + 4)) << 32); }

void put_u16(std::string& out, uint32_t v) {
  out.push_back(char(v & 0xff));
  out.push_back(char((v >> 8) & 0xff));
}
void put_u32(std::string& out, uint32_t v) {
  put_u16(out, v & 0xffff);
  put_u16(out, v >> 16);
}

uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc = 0) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

// The value after `key` in numpy's header dict: {'descr': '<f4', ...}.
std::string header_field(const std::string& header, const std::string& key,
                         const std::string& where) {
  auto at = header.find("'" + key + "'");
  if (at == std::string::npos) throw Error(where + ": .npy header lacks '" + key + "'");
  at = header.find(':', at);
  auto begin = header.find_first_not_of(' ', at + 1);
  size_t end;
  if (header[begin] == '\'') {
    end = header.find('\'', begin + 1) + 1;
  } else if (header[begin] == '(') {
    end = header.find(')', begin) + 1;
  } else {
    end = header.find_first_of(",}", begin);
  }
  if (begin == std::string::npos || end == std::string::npos || end == 0)
    throw Error(where + ": malformed .npy header");
  return header.substr(begin, end - begin);
}

Array parse_npy(const uint8_t* p, size_t size, const std::string& where) {
  static const char kMagic[] = "\x93NUMPY";
  if (size < 10 || std::memcmp(p, kMagic, 6) != 0) throw Error(where + ": not a .npy array");
  size_t header_len, start;
  if (p[6] == 1) {
    header_len = read_u16(p + 8), start = 10;
  } else if ((p[6] == 2 || p[6] == 3) && size >= 12) {
    header_len = read_u32(p + 8), start = 12;
  } else {
    throw Error(where + ": .npy format version " + std::to_string(p[6]) + " is not read");
  }
  if (start + header_len > size) throw Error(where + ": truncated .npy header");
  std::string header(reinterpret_cast<const char*>(p + start), header_len);
  std::string descr = header_field(header, "descr", where);
  descr = descr.size() >= 2 ? descr.substr(1, descr.size() - 2) : descr;
  const DtypeInfo* dtype = by_descr(descr);
  if (!dtype)
    throw Error(where + ": dtype '" + descr + "' is not read (little-endian numbers and bool only)");
  if (header_field(header, "fortran_order", where) != "False")
    throw Error(where + ": a Fortran-order array; save np.ascontiguousarray(...) instead");
  Array array;
  array.dtype = dtype->name;
  std::string shape = header_field(header, "shape", where);
  std::istringstream dims(shape.substr(1, shape.size() - 2));
  for (std::string dim; std::getline(dims, dim, ',');) {
    if (dim.find_first_not_of(' ') == std::string::npos) continue;
    array.shape.push_back(std::stoll(dim));
  }
  size_t bytes = size_t(array.count()) * dtype->size;
  if (start + header_len + bytes > size) throw Error(where + ": truncated .npy data");
  const uint8_t* data = p + start + header_len;
  array.data.assign(data, data + bytes);
  return array;
}

std::string npy_bytes(const Array& array) {
  const DtypeInfo* dtype = by_name(array.dtype);
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i)
    shape += std::to_string(array.shape[i]) + (array.shape.size() == 1 || i + 1 < array.shape.size()
                                                    ? ", " : "");
  if (array.shape.size() == 1) shape.erase(shape.size() - 1);  // "(5,)"
  shape += ")";
  std::string header = std::string("{'descr': '") + dtype->descr +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // numpy pads the header with spaces so that the data starts 64-aligned.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  put_u16(out, uint32_t(header.size()));
  out += header;
  out.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  return out;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// The zip64 extended-information fields that replace the 0xFFFFFFFF ones.
void apply_zip64(const uint8_t* extra, size_t len, uint64_t* fields[], int count) {
  for (size_t at = 0; at + 4 <= len;) {
    uint32_t id = read_u16(extra + at), size = read_u16(extra + at + 2);
    if (id == 1) {
      size_t offset = at + 4;
      for (int i = 0; i < count; ++i) {
        if (*fields[i] != 0xFFFFFFFFu || offset + 8 > at + 4 + size) continue;
        *fields[i] = read_u64(extra + offset);
        offset += 8;
      }
      return;
    }
    at += 4 + size;
  }
}

}  // namespace

int64_t Array::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t itemsize(const std::string& dtype) {
  const DtypeInfo* d = by_name(dtype);
  if (!d) throw Error("dtype " + dtype + " is not handled by texscope-run");
  return d->size;
}

uint16_t half_from_float(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint32_t sign = (bits >> 16) & 0x8000u, exponent = (bits >> 23) & 0xff, mantissa = bits & 0x7fffffu;
  if (exponent == 0xff) return uint16_t(sign | 0x7c00u | (mantissa ? 0x200u : 0));
  int e = int(exponent) - 127 + 15;
  if (e >= 31) return uint16_t(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return uint16_t(sign);
    mantissa |= 0x800000u;
    int shift = 14 - e;
    uint32_t half = mantissa >> shift, rest = mantissa & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = (uint32_t(e) << 10) | (mantissa >> 13), rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) ++half;  // may carry into inf: right
  return uint16_t(sign | half);
}

float float_from_half(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {
    float value = std::ldexp(float(mantissa), -24);
    return sign ? -value : value;
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

double element(const Array& a, int64_t i) {
  const uint8_t* p = a.data.data() + i * itemsize(a.dtype);
  auto get = [p](auto v) { std::memcpy(&v, p, sizeof v); return double(v); };
  const std::string& t = a.dtype;
  if (t == "float32") return get(float());
  if (t == "float64") return get(double());
  if (t == "float16") { uint16_t h; std::memcpy(&h, p, 2); return float_from_half(h); }
  if (t == "int8") return get(int8_t());
  if (t == "uint8" || t == "bool") return get(uint8_t());
  if (t == "int16") return get(int16_t());
  if (t == "uint16") return get(uint16_t());
  if (t == "int32") return get(int32_t());
  if (t == "uint32") return get(uint32_t());
  if (t == "int64") return get(int64_t());
  return get(uint64_t());
}

Array converted(const Array& array, const std::string& dtype) {
  if (array.dtype == dtype) return array;
  Array out{dtype, array.shape, std::vector<uint8_t>(size_t(array.count()) * itemsize(dtype))};
  uint8_t* p = out.data.data();
  for (int64_t i = 0; i < array.count(); ++i, p += itemsize(dtype)) {
    double v = element(array, i);
    auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
    if (dtype == "float32") put(float(v));
    else if (dtype == "float64") put(v);
    else if (dtype == "float16") put(half_from_float(float(v)));
    else if (dtype == "int8") put(int8_t(v));
    else if (dtype == "uint8") put(uint8_t(v));
    else if (dtype == "bool") put(uint8_t(v != 0));
    else if (dtype == "int16") put(int16_t(v));
    else if (dtype == "uint16") put(uint16_t(v));
    else if (dtype == "int32") put(int32_t(v));
    else if (dtype == "uint32") put(uint32_t(v));
    else if (dtype == "int64") put(int64_t(v));
    else put(uint64_t(v));
  }
  return out;
}

std::vector<std::pair<std::string, Array>> read_npz(const std::string& path) {
  std::vector<uint8_t> file = read_file(path);
  const uint8_t* z = file.data();
  size_t size = file.size();
  // The end-of-central-directory record, searched from the end (it may be
  // followed by a comment of up to 64 KiB).
  size_t eocd = std::string::npos;
  for (size_t at = size >= 22 ? size - 22 : 0; size >= 22; --at) {
    if (read_u32(z + at) == 0x06054b50u) { eocd = at; break; }
    if (at == 0 || size - at > 22 + 0xffff) break;
  }
  if (eocd == std::string::npos) throw Error(path + ": not an .npz (no zip directory)");
  uint64_t entries = read_u16(z + eocd + 10), directory = read_u32(z + eocd + 16);
  if ((entries == 0xffff || directory == 0xFFFFFFFFu) && eocd >= 20 &&
      read_u32(z + eocd - 20) == 0x07064b50u) {
    uint64_t record = read_u64(z + eocd - 20 + 8);
    if (record + 56 > size || read_u32(z + record) != 0x06064b50u)
      throw Error(path + ": broken zip64 directory");
    entries = read_u64(z + record + 32);
    directory = read_u64(z + record + 48);
  }
  std::vector<std::pair<std::string, Array>> arrays;
  size_t at = directory;
  for (uint64_t n = 0; n < entries; ++n) {
    if (at + 46 > size || read_u32(z + at) != 0x02014b50u)
      throw Error(path + ": broken zip directory");
    uint32_t method = read_u16(z + at + 10), crc = read_u32(z + at + 16);
    uint64_t packed = read_u32(z + at + 20), unpacked = read_u32(z + at + 24);
    uint32_t name_len = read_u16(z + at + 28), extra_len = read_u16(z + at + 30),
             comment_len = read_u16(z + at + 32);
    uint64_t local = read_u32(z + at + 42);
    if (at + 46 + name_len + extra_len > size) throw Error(path + ": broken zip directory");
    std::string name(reinterpret_cast<const char*>(z + at + 46), name_len);
    uint64_t* fields[] = {&unpacked, &packed, &local};
    apply_zip64(z + at + 46 + name_len, extra_len, fields, 3);
    at += 46 + name_len + extra_len + comment_len;
    const std::string where = path + ": " + name;
    if (method != 0)
      throw Error(where + " is compressed; write the file with np.savez, not np.savez_compressed");
    if (local + 30 > size || read_u32(z + local) != 0x04034b50u)
      throw Error(where + ": broken zip entry");
    uint64_t data = local + 30 + read_u16(z + local + 26) + read_u16(z + local + 28);
    if (data + packed > size) throw Error(where + ": truncated");
    if (crc32(z + data, packed) != crc) throw Error(where + ": CRC mismatch, the file is damaged");
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
      name.erase(name.size() - 4);
    arrays.emplace_back(name, parse_npy(z + data, packed, where));
  }
  return arrays;
}

void write_npz(const std::string& path, const std::vector<std::pair<std::string, Array>>& arrays) {
  std::string file, directory;
  for (const auto& [name, array] : arrays) {
    const std::string entry = name + ".npy", data = npy_bytes(array);
    uint32_t crc = crc32(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    if (data.size() >= 0xFFFFFFFFu || file.size() >= 0xFFFFFFFFu)
      throw Error(path + ": outputs over 4 GiB are not written");
    auto common = [&](std::string& out) {
      put_u16(out, 20);  // version needed: 2.0
      put_u16(out, 0);   // flags
      put_u16(out, 0);   // stored
      put_u16(out, 0);   // time
      put_u16(out, 0x21);  // date: 1980-01-01
      put_u32(out, crc);
      put_u32(out, uint32_t(data.size()));
      put_u32(out, uint32_t(data.size()));
      put_u16(out, uint32_t(entry.size()));
      put_u16(out, 0);  // extra
    };
    put_u32(directory, 0x02014b50u);
    put_u16(directory, 20);  // made by
    common(directory);
    put_u16(directory, 0);  // comment
    put_u16(directory, 0);  // disk
    put_u16(directory, 0);  // internal attributes
    put_u32(directory, 0);  // external attributes
    put_u32(directory, uint32_t(file.size()));
    directory += entry;
    put_u32(file, 0x04034b50u);
    common(file);
    file += entry;
    file += data;
  }
  std::string end;
  put_u32(end, 0x06054b50u);
  put_u16(end, 0);
  put_u16(end, 0);
  put_u16(end, uint32_t(arrays.size()));
  put_u16(end, uint32_t(arrays.size()));
  put_u32(end, uint32_t(directory.size()));
  put_u32(end, uint32_t(file.size()));
  put_u16(end, 0);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(path + ": cannot write (" + std::strerror(errno) + ")");
  out << file << directory << end;
  if (!out.flush()) throw Error(path + ": cannot write (" + std::strerror(errno) + ")");
}

}  // namespace texscope
