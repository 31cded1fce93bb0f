// texscope calibrate's microbenchmarks: one kernel per kernel class of the
// registry, each compiled four times: its packed input and output in
// buffers, its input in an image (IN_IMAGE), its output in an image
// (OUT_IMAGE), the convs' weights in an image (WEIGHT_IMAGE).  A packed
// tensor [1, C4, H, W, 4] is an image2d_array_t of W x H texels x C4 layers
// (the "global.texture" flavour) or a buffer of float4 in the same order.
// Bounds are tested explicitly in both cases, as TVM's kernels do, so the
// versions do the same arithmetic.  A weight is a one-layer image of one
// row of texels per output channel block, or a buffer of float4 in the
// same order (WROW texels a row).

__constant sampler_t SMP = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;

#ifdef IN_IMAGE
#define IN_T __read_only image2d_array_t
#define LOAD(t, l, y, x) read_imagef(t, SMP, (int4)((x), (y), (l), 0))
#else
#define IN_T __global const float4* restrict
#define LOAD(t, l, y, x) t[((l) * H + (y)) * W + (x)]
#endif

#ifdef WEIGHT_IMAGE
#define WEIGHT_T __read_only image2d_array_t
#define LOADW(t, row, col, WROW) read_imagef(t, SMP, (int4)((col), (row), 0, 0))
#else
#define WEIGHT_T __global const float4* restrict
#define LOADW(t, row, col, WROW) t[(row) * (WROW) + (col)]
#endif

#ifdef OUT_IMAGE
#define OUT_T __write_only image2d_array_t
#define STORE(t, l, y, x, v) write_imagef(t, (int4)((x), (y), (l), 0), (v))
#else
#define OUT_T __global float4* restrict
#define STORE(t, l, y, x, v) t[((l) * OH + (y)) * OW + (x)] = (v)
#endif

// 3x3 conv, pad 1, stride 1; weights [OC4][C4][3][3][4 rows of float4].
// Global size (OW, OH, OC4).
__kernel void packed_conv(IN_T in, WEIGHT_T weight, OUT_T out,
                          int C4, int H, int W, int OH, int OW) {
  const int x = get_global_id(0), y = get_global_id(1), oc = get_global_id(2);
  const int wrow = C4 * 36;
  float4 acc = (float4)(0.0f);
  for (int ic = 0; ic < C4; ++ic) {
    for (int ky = 0; ky < 3; ++ky) {
      const int iy = y + ky - 1;
      if (iy < 0 || iy >= H) continue;
      for (int kx = 0; kx < 3; ++kx) {
        const int ix = x + kx - 1;
        if (ix < 0 || ix >= W) continue;
        const float4 v = LOAD(in, ic, iy, ix);
        const int col = ((ic * 3 + ky) * 3 + kx) * 4;
        acc += v.x * LOADW(weight, oc, col, wrow) + v.y * LOADW(weight, oc, col + 1, wrow)
             + v.z * LOADW(weight, oc, col + 2, wrow) + v.w * LOADW(weight, oc, col + 3, wrow);
      }
    }
  }
  STORE(out, oc, y, x, acc);
}

// 3x3 depthwise conv, pad 1; weights [C4][3][3] float4.  Global (OW, OH, C4).
__kernel void depthwise_conv(IN_T in, WEIGHT_T weight, OUT_T out,
                             int C4, int H, int W, int OH, int OW) {
  const int x = get_global_id(0), y = get_global_id(1), c = get_global_id(2);
  float4 acc = (float4)(0.0f);
  for (int ky = 0; ky < 3; ++ky) {
    const int iy = y + ky - 1;
    if (iy < 0 || iy >= H) continue;
    for (int kx = 0; kx < 3; ++kx) {
      const int ix = x + kx - 1;
      if (ix < 0 || ix >= W) continue;
      acc += LOAD(in, c, iy, ix) * LOADW(weight, c, ky * 3 + kx, 9);
    }
  }
  STORE(out, c, y, x, acc);
}

// relu(a + b).  Global (W, H, C4); OH = H, OW = W.
__kernel void elementwise(IN_T a, IN_T b, OUT_T out, int C4, int H, int W, int OH, int OW) {
  const int x = get_global_id(0), y = get_global_id(1), c = get_global_id(2);
  STORE(out, c, y, x, fmax(LOAD(a, c, y, x) + LOAD(b, c, y, x), (float4)(0.0f)));
}

// 3x3 max pool, stride 2, pad 1.  Global (OW, OH, C4).
__kernel void pool(IN_T in, OUT_T out, int C4, int H, int W, int OH, int OW) {
  const int x = get_global_id(0), y = get_global_id(1), c = get_global_id(2);
  float4 acc = (float4)(-INFINITY);
  for (int ky = 0; ky < 3; ++ky) {
    const int iy = 2 * y + ky - 1;
    if (iy < 0 || iy >= H) continue;
    for (int kx = 0; kx < 3; ++kx) {
      const int ix = 2 * x + kx - 1;
      if (ix < 0 || ix >= W) continue;
      acc = fmax(acc, LOAD(in, c, iy, ix));
    }
  }
  STORE(out, c, y, x, acc);
}

// Mean and variance over the channels of each pixel, then the pixel
// normalized; writes a buffer (the registry's layer_norm writes only
// buffers).  Global (W, H, 1).
__kernel void layer_norm(IN_T in, __global float4* restrict out, int C4, int H, int W) {
  const int x = get_global_id(0), y = get_global_id(1);
  float4 sum = (float4)(0.0f), squares = (float4)(0.0f);
  for (int c = 0; c < C4; ++c) {
    const float4 v = LOAD(in, c, y, x);
    sum += v;
    squares += v * v;
  }
  const float n = 4.0f * C4;
  const float mean = (sum.x + sum.y + sum.z + sum.w) / n;
  const float variance = (squares.x + squares.y + squares.z + squares.w) / n - mean * mean;
  const float scale = rsqrt(variance + 1e-5f);
  for (int c = 0; c < C4; ++c) {
    out[(c * H + y) * W + x] = (LOAD(in, c, y, x) - mean) * scale;
  }
}

// Layout transforms: unpack [1, C4, H, W, 4] to NCHW (reads the packed
// input), pack NCHW to [1, C4, H, W, 4] (writes the packed output).
// Global (W, H, C4).
__kernel void unpack(IN_T in, __global float* restrict out, int C4, int H, int W) {
  const int x = get_global_id(0), y = get_global_id(1), c = get_global_id(2);
  const float4 v = LOAD(in, c, y, x);
  const int plane = H * W, at = (4 * c * H + y) * W + x;
  out[at] = v.x;
  out[at + plane] = v.y;
  out[at + 2 * plane] = v.z;
  out[at + 3 * plane] = v.w;
}

__kernel void pack(__global const float* restrict in, OUT_T out, int C4, int OH, int OW) {
  const int x = get_global_id(0), y = get_global_id(1), c = get_global_id(2);
  const int plane = OH * OW, at = (4 * c * OH + y) * OW + x;
  STORE(out, c, y, x, (float4)(in[at], in[at + plane], in[at + 2 * plane], in[at + 3 * plane]));
}
