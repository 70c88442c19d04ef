//! memcpy, row-wise and generic strided kernels, the outer-index odometer and the parallel
//! driver.

use std::ops::Range;
use std::ptr;

use rayon::prelude::*;

/// Destination bytes per parallel task (one huge page: each task faults exactly one fresh
/// 2 MiB page of a 2 MiB-aligned destination).
pub(super) const CHUNK_BYTES: usize = 2 << 20;

/// A raw pointer that may cross threads. Only used inside the copy kernels, where the tasks
/// write disjoint destination ranges and only read the source.
#[derive(Clone, Copy)]
pub(super) struct SendPtr<T>(pub *mut T);
// SAFETY: see the type's docs: tasks never write the same bytes and the caller of the public
// copy function guarantees the memory is valid for the whole call.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

/// Split `0..units` into tasks of about `CHUNK_BYTES` of output and run `f` on each, on the
/// rayon pool when `parallel`, else inline.
pub(super) fn run_units<F>(units: usize, unit_bytes: usize, parallel: bool, f: F)
where
    F: Fn(Range<usize>) + Sync,
{
    if units == 0 {
        return;
    }
    if !parallel || units == 1 {
        f(0..units);
        return;
    }
    let per = (CHUNK_BYTES / unit_bytes.max(1)).clamp(1, units.div_ceil(2));
    let tasks = units.div_ceil(per);
    (0..tasks).into_par_iter().for_each(|t| {
        let start = t * per;
        f(start..(start + per).min(units));
    });
}

/// `memcpy` of `bytes`, split into 2 MiB destination chunks on the rayon pool when large
/// (inline otherwise); streaming stores from `STREAM_MIN_BYTES` on.
///
/// # Safety
/// `src` readable and `dst` writable for `bytes`, no overlap.
pub(super) unsafe fn memcpy_parallel(src: *const u8, dst: *mut u8, bytes: usize) {
    let (s, d) = (SendPtr(src as *mut u8), SendPtr(dst));
    // Chunk boundaries at 2 MiB multiples of the destination *address* so each task touches
    // whole huge pages.
    let head = ((dst as usize).next_multiple_of(CHUNK_BYTES) - dst as usize).min(bytes);
    let body = bytes - head;
    let chunks = body.div_ceil(CHUNK_BYTES);
    // Large outputs do not stay in cache: stream them (no read-for-ownership of destination
    // lines; glibc only streams above ~3/4 of the L3 size, which is huge on server parts).
    let stream = bytes >= super::transpose::STREAM_MIN_BYTES;
    if bytes < super::PARALLEL_MIN_BYTES || rayon::current_num_threads() < 2 {
        // SAFETY: caller contract.
        unsafe {
            if stream {
                stream_copy(src, dst, bytes)
            } else {
                ptr::copy_nonoverlapping(src, dst, bytes)
            }
        };
        return;
    }
    (0..chunks + 1).into_par_iter().for_each(|c| {
        let (off, len) = if c == 0 {
            (0, head)
        } else {
            let off = head + (c - 1) * CHUNK_BYTES;
            (off, CHUNK_BYTES.min(bytes - off))
        };
        let (s, d) = (s, d);
        if len > 0 {
            // SAFETY: [off, off + len) lies within [0, bytes); tasks cover disjoint ranges.
            unsafe {
                if stream {
                    stream_copy(s.0.add(off), d.0.add(off), len)
                } else {
                    ptr::copy_nonoverlapping(s.0.add(off), d.0.add(off), len)
                }
            };
        }
    });
}

/// `memcpy` with streaming (non-temporal) stores for the 64-byte aligned body: for large
/// outputs that will not stay in cache this avoids the read-for-ownership of every destination
/// line. Falls back to `copy_nonoverlapping` without AVX2 (or off x86_64).
///
/// # Safety
/// `src` readable and `dst` writable for `len` bytes, no overlap.
pub(super) unsafe fn stream_copy(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 checked; forwarded contract.
        unsafe { stream_copy_avx2(src, dst, len) };
        return;
    }
    // SAFETY: forwarded contract.
    unsafe { ptr::copy_nonoverlapping(src, dst, len) };
}

/// # Safety
/// AVX2 available; as `stream_copy`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_copy_avx2(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::*;
    let head = ((dst as usize).next_multiple_of(64) - dst as usize).min(len);
    let body = (len - head) / 128 * 128;
    // SAFETY: head, body and tail partition [0, len); body stores are 32-byte aligned because
    // dst + head is 64-byte aligned; loads are unaligned.
    unsafe {
        ptr::copy_nonoverlapping(src, dst, head);
        let (mut s, mut d) = (src.add(head), dst.add(head));
        let end = d.add(body);
        while d < end {
            let v0 = _mm256_loadu_si256(s as *const __m256i);
            let v1 = _mm256_loadu_si256(s.add(32) as *const __m256i);
            let v2 = _mm256_loadu_si256(s.add(64) as *const __m256i);
            let v3 = _mm256_loadu_si256(s.add(96) as *const __m256i);
            _mm256_stream_si256(d as *mut __m256i, v0);
            _mm256_stream_si256(d.add(32) as *mut __m256i, v1);
            _mm256_stream_si256(d.add(64) as *mut __m256i, v2);
            _mm256_stream_si256(d.add(96) as *mut __m256i, v3);
            s = s.add(128);
            d = d.add(128);
        }
        ptr::copy_nonoverlapping(s, d, len - head - body);
        _mm_sfence();
    }
}

/// Iterates the multi-index over `dims` in C order, tracking the byte offset with `strides`.
pub(super) struct Odometer<'a> {
    dims: &'a [usize],
    strides: &'a [isize],
    idx: Vec<usize>,
    pub off: isize,
}

impl<'a> Odometer<'a> {
    /// Start at flat (C-order) index `flat`, which must be < product(dims) (or 0).
    pub fn new(dims: &'a [usize], strides: &'a [isize], mut flat: usize) -> Self {
        let mut idx = vec![0usize; dims.len()];
        let mut off = 0isize;
        for i in (0..dims.len()).rev() {
            let d = dims[i];
            idx[i] = flat % d;
            flat /= d;
            // Within the validated extent: cannot overflow.
            off += idx[i] as isize * strides[i];
        }
        Self {
            dims,
            strides,
            idx,
            off,
        }
    }

    /// Advance by one (wrapping past the end is harmless; callers stop at their range end).
    #[inline]
    pub fn step(&mut self) {
        for i in (0..self.dims.len()).rev() {
            self.idx[i] += 1;
            self.off += self.strides[i];
            if self.idx[i] < self.dims[i] {
                return;
            }
            self.off -= self.strides[i] * self.dims[i] as isize;
            self.idx[i] = 0;
        }
    }
}

/// Row-wise copy: for each outer index, `row_bytes` contiguous bytes.
///
/// # Safety
/// The layout is validated; source rows readable; `dst` writable for rows × row_bytes.
pub(super) unsafe fn rows(
    src: *const u8,
    dst: *mut u8,
    outer: &[usize],
    outer_strides: &[isize],
    row_bytes: usize,
    parallel: bool,
) {
    let rows: usize = outer.iter().product();
    let (s, d) = (SendPtr(src as *mut u8), SendPtr(dst));
    // Large outputs of long rows: streaming stores, as for one big memcpy.
    let stream = rows * row_bytes >= super::transpose::STREAM_MIN_BYTES && row_bytes >= 1024;
    run_units(rows, row_bytes, parallel, |r| {
        let (s, d) = (s, d);
        let mut od = Odometer::new(outer, outer_strides, r.start);
        for row in r {
            // SAFETY: od.off is the byte offset of a valid source row; row * row_bytes + row_bytes
            // <= total destination bytes; disjoint from other tasks' rows.
            unsafe {
                let (sp, dp) = (s.0.offset(od.off) as *const u8, d.0.add(row * row_bytes));
                if stream {
                    stream_copy(sp, dp, row_bytes)
                } else {
                    ptr::copy_nonoverlapping(sp, dp, row_bytes)
                }
            };
            od.step();
        }
    });
}

/// Copies `n` elements of type `T` spaced `stride` bytes apart into contiguous `dst`.
///
/// # Safety
/// The `n` source elements are readable (any alignment); `dst` writable for `n * size_of::<T>()`.
#[inline]
unsafe fn strided_row<T: Copy>(src: *const u8, stride: isize, n: usize, dst: *mut u8) {
    let d = dst as *mut T;
    if stride == 0 {
        // SAFETY: one readable element; n writable slots.
        unsafe {
            let v = ptr::read_unaligned(src as *const T);
            for i in 0..n {
                ptr::write_unaligned(d.add(i), v);
            }
        }
        return;
    }
    if stride == -(size_of::<T>() as isize) {
        // Reversed contiguous run (`a[::-1]`): a constant-stride loop LLVM vectorises with
        // reverse shuffles.
        let last = src.wrapping_offset(-((n as isize - 1) * size_of::<T>() as isize)) as *const T;
        for i in 0..n {
            // SAFETY: source elements n-1-i lie at last + (n-1-i); i < n destination slots.
            unsafe { ptr::write_unaligned(d.add(i), ptr::read_unaligned(last.add(n - 1 - i))) };
        }
        return;
    }
    let mut p = src;
    for i in 0..n {
        // SAFETY: p = src + i * stride is the i-th source element; i < n destination slots.
        unsafe {
            ptr::write_unaligned(d.add(i), ptr::read_unaligned(p as *const T));
            p = p.wrapping_offset(stride);
        }
    }
}

/// Generic strided copy: odometer over `outer`, inner loop of `n` elements `stride` bytes apart.
///
/// # Safety
/// The layout is validated; every element readable; `dst` writable for the whole output.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn generic(
    src: *const u8,
    dst: *mut u8,
    outer: &[usize],
    outer_strides: &[isize],
    n: usize,
    stride: isize,
    elem: usize,
    parallel: bool,
) {
    let rows: usize = outer.iter().product();
    let row_bytes = n * elem;
    let (s, d) = (SendPtr(src as *mut u8), SendPtr(dst));
    run_units(rows, row_bytes, parallel, |r| {
        let (s, d) = (s, d);
        let mut od = Odometer::new(outer, outer_strides, r.start);
        for row in r {
            let sp = s.0.wrapping_offset(od.off) as *const u8;
            let dp = d.0.wrapping_add(row * row_bytes);
            // SAFETY: sp is the first source element of this row, dp the start of its
            // destination row (disjoint from other tasks); widths match `elem`.
            unsafe {
                match elem {
                    1 => strided_row::<u8>(sp, stride, n, dp),
                    2 => strided_row::<u16>(sp, stride, n, dp),
                    4 => strided_row::<u32>(sp, stride, n, dp),
                    8 => strided_row::<u64>(sp, stride, n, dp),
                    16 => strided_row::<u128>(sp, stride, n, dp),
                    _ => {
                        let mut p = sp;
                        for i in 0..n {
                            ptr::copy_nonoverlapping(p, dp.add(i * elem), elem);
                            p = p.wrapping_offset(stride);
                        }
                    }
                }
            }
            od.step();
        }
    });
}
