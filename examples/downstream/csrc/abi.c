/* C that shares dlbind's ABI: compiled against the dlpack.h dlbind publishes
 * (DEP_DLBIND_INCLUDE), called from Rust with tensors dlbind exported. */
#include <stddef.h>
#include <stdint.h>

#include "dlpack.h"

/* The struct layout as this C compiler sees it, for comparison with dlbind's Rust types. */
void downstream_c_layout(uint64_t out[8]) {
  out[0] = sizeof(DLTensor);
  out[1] = offsetof(DLTensor, shape);
  out[2] = offsetof(DLTensor, byte_offset);
  out[3] = sizeof(DLManagedTensorVersioned);
  out[4] = offsetof(DLManagedTensorVersioned, dl_tensor);
  out[5] = offsetof(DLManagedTensorVersioned, flags);
  out[6] = sizeof(DLDataType);
  out[7] = DLPACK_MAJOR_VERSION * 1000 + DLPACK_MINOR_VERSION;
}

/* Sum of a float32 tensor of any rank and strides (NULL strides: C-contiguous). Returns -1 with
 * *ok = 0 for anything else. Reads the tensor through the header's field names only. */
double downstream_c_sum_f32(const DLManagedTensorVersioned *m, int *ok) {
  const DLTensor *t = &m->dl_tensor;
  *ok = 0;
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1 ||
      t->device.device_type != kDLCPU || t->ndim > 16) {
    return -1.0;
  }
  int64_t n = 1, idx[16] = {0}, strides[16];
  for (int d = t->ndim - 1, s = 1; d >= 0; d--) {
    strides[d] = t->strides ? t->strides[d] : s;
    s *= (int)t->shape[d];
    n *= t->shape[d];
  }
  const float *base = (const float *)((const char *)t->data + t->byte_offset);
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) off += idx[d] * strides[d];
    sum += base[off];
    for (int d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
  *ok = 1;
  return sum;
}
