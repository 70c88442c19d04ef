//! Cache-blocked transpose: `dst[a][b] = src[a * sa + b * sb]` for a 2-D block, repeated over
//! the remaining ("batch") axes.
//!
//! The block is walked in cache-line-sized squares (`L × L` elements with `L * elem = 64` bytes,
//! so every source and destination line touched is consumed entirely within the square). When
//! the source is unit-stride along `a`, the square is done with SIMD micro-kernels: AVX2 8×8 for
//! 4-byte elements, AVX2 4×4 for 8-byte, SSE2 8×8 for 2-byte, SSE2 16×16 for 1-byte; otherwise
//! (and on the edges) a scalar loop specialised by element width. Large outputs with 64-byte
//! aligned rows use streaming stores of whole lines (`STREAM_MIN_BYTES`).

use std::ptr;

use super::kernels::{SendPtr, run_units};

/// Transpose description in byte strides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Spec {
    /// Rows of the block (the source axis with the smallest stride) and its source / destination
    /// byte strides.
    na: usize,
    sa: isize,
    da: isize,
    /// Columns (the destination's last axis, destination stride = elem) and source byte stride.
    nb: usize,
    sb: isize,
    elem: usize,
    /// The other axes, with source and destination byte strides.
    bdims: Vec<usize>,
    bsrc: Vec<isize>,
    bdst: Vec<isize>,
}

impl Spec {
    /// `dims`/`strides`: a normalised layout (byte strides), `k`: the block-row axis (< last).
    pub(super) fn new(dims: &[usize], strides: &[isize], elem: usize, k: usize) -> Self {
        let nd = dims.len();
        let last = nd - 1;
        // C-contiguous destination strides in bytes: the element strides of
        // `crate::layout::c_strides_into` times `elem` (total <= nbytes <= isize::MAX).
        let dims_i64: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let mut elems = vec![0i64; nd];
        crate::layout::c_strides_into(&dims_i64, &mut elems);
        let dst_strides: Vec<isize> = elems.iter().map(|&s| s as isize * elem as isize).collect();
        let mut spec = Spec {
            na: dims[k],
            sa: strides[k],
            da: dst_strides[k],
            nb: dims[last],
            sb: strides[last],
            elem,
            bdims: Vec::new(),
            bsrc: Vec::new(),
            bdst: Vec::new(),
        };
        for i in 0..last {
            if i != k {
                spec.bdims.push(dims[i]);
                spec.bsrc.push(strides[i]);
                spec.bdst.push(dst_strides[i]);
            }
        }
        spec
    }

    pub(super) fn batches(&self) -> usize {
        self.bdims.iter().product()
    }
}

/// Outputs of at least this many bytes use streaming (non-temporal) stores when the
/// destination rows are 64-byte aligned: the output does not fit in cache anyway, and streaming
/// whole lines saves the read-for-ownership traffic (measured 2.5–3× faster on 64 MiB).
pub(super) const STREAM_MIN_BYTES: usize = 8 << 20;

/// Squares (of `L` rows) per parallel unit / per pass along the source rows. 8 measured best
/// for 4096² f32 (single thread: 8 ≈ 7.7 ms, 1 ≈ 10–13 ms with streaming stores).
const BAND_SQUARES: usize = 8;

/// Side of the cache-line square, in elements.
fn line_block(elem: usize) -> usize {
    match elem {
        1 => 64,
        2 => 32,
        4 => 16,
        8 => 8,
        _ => 8,
    }
}

type StripFn = unsafe fn(*const u8, isize, isize, *mut u8, isize, usize, usize, usize);

/// The strip kernel for this element width, or None for widths without one (`strip_bytes`).
/// `stream`: use the streaming-store variants (caller checked size and alignment).
fn select(elem: usize, unit_stride: bool, stream: bool) -> Option<StripFn> {
    #[cfg(target_arch = "x86_64")]
    if unit_stride {
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        match (elem, avx2, stream) {
            (4, true, false) => return Some(x86::strip_4_avx2),
            (4, true, true) => return Some(x86::strip_4_avx2_nt),
            (8, true, false) => return Some(x86::strip_8_avx2),
            (8, true, true) => return Some(x86::strip_8_avx2_nt),
            (1, _, false) => return Some(x86::strip_1_sse2),
            (1, _, true) => return Some(x86::strip_1_sse2_nt),
            (2, _, false) => return Some(x86::strip_2_sse2),
            (2, _, true) => return Some(x86::strip_2_sse2_nt),
            _ => {}
        }
    }
    let _ = (unit_stride, stream);
    match elem {
        1 => Some(strip_scalar::<u8>),
        2 => Some(strip_scalar::<u16>),
        4 => Some(strip_scalar::<u32>),
        8 => Some(strip_scalar::<u64>),
        16 => Some(strip_scalar::<u128>),
        _ => None,
    }
}

/// Run the transpose on the rayon pool when `parallel`.
///
/// # Safety
/// The spec comes from a validated layout; every source element readable; `dst` writable for
/// the whole output; no overlap.
pub(super) unsafe fn run(spec: &Spec, src: *const u8, dst: *mut u8, parallel: bool) {
    let l = line_block(spec.elem) * BAND_SQUARES;
    let bands = spec.na.div_ceil(l);
    let units = spec.batches() * bands;
    let unit_bytes = l * spec.nb * spec.elem;
    let total = spec.batches() * spec.na * spec.nb * spec.elem;
    // Every destination row starts at dst + (multiple of nb * elem): all rows are 64-byte
    // aligned iff dst is and a row is a multiple of 64 bytes.
    // (Unit tests also take the streaming path for about half of the small shapes.)
    let stream = total >= STREAM_MIN_BYTES || (cfg!(test) && (spec.na + spec.nb).is_multiple_of(2));
    let stream =
        stream && (dst as usize).is_multiple_of(64) && (spec.nb * spec.elem).is_multiple_of(64);
    let strip = select(spec.elem, spec.sa == spec.elem as isize, stream);
    let (s, d) = (SendPtr(src as *mut u8), SendPtr(dst));
    run_units(units, unit_bytes, parallel, |r| {
        let (s, d) = (s, d);
        #[cfg(target_arch = "x86_64")]
        let _fence = Fence;
        for u in r {
            let (batch, band) = (u / bands, u % bands);
            let (so, dof) = batch_offsets(&spec.bdims, &spec.bsrc, &spec.bdst, batch);
            let a0 = band * l;
            let a1 = (a0 + l).min(spec.na);
            // SAFETY: (so, dof) are the offsets of a valid batch; rows a0..a1 < na; each
            // (batch, band) writes a disjoint set of destination rows.
            unsafe {
                let (sp, dp) = (
                    s.0.wrapping_offset(so) as *const u8,
                    d.0.wrapping_offset(dof),
                );
                match strip {
                    Some(f) => f(sp, spec.sa, spec.sb, dp, spec.da, a0, a1, spec.nb),
                    None => strip_bytes(
                        sp, spec.sa, spec.sb, dp, spec.da, a0, a1, spec.nb, spec.elem,
                    ),
                }
            };
        }
    });
}

/// Orders non-temporal stores before the task ends (also on unwind).
#[cfg(target_arch = "x86_64")]
struct Fence;
#[cfg(target_arch = "x86_64")]
impl Drop for Fence {
    fn drop(&mut self) {
        // Not under Miri, which lacks a shim for `sfence` (its non-temporal stores are plain).
        // SAFETY: SSE is baseline on x86_64; sfence has no memory-safety preconditions.
        #[cfg(not(miri))]
        unsafe {
            std::arch::x86_64::_mm_sfence()
        };
    }
}

fn batch_offsets(dims: &[usize], s: &[isize], d: &[isize], mut flat: usize) -> (isize, isize) {
    let (mut so, mut dof) = (0isize, 0isize);
    for i in (0..dims.len()).rev() {
        let ix = (flat % dims[i]) as isize;
        flat /= dims[i];
        so += ix * s[i];
        dof += ix * d[i];
    }
    (so, dof)
}

/// Scalar block `[a0, a1) × [b0, b1)`.
///
/// # Safety
/// All addressed elements valid (see `run`).
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_scalar<T: Copy>(
    src: *const u8,
    sa: isize,
    sb: isize,
    dst: *mut u8,
    da: isize,
    a0: usize,
    a1: usize,
    b0: usize,
    b1: usize,
) {
    for a in a0..a1 {
        let sp = src.wrapping_offset(a as isize * sa);
        let dp = dst.wrapping_offset(a as isize * da) as *mut T;
        for b in b0..b1 {
            // SAFETY: element (a, b) of the source block and its destination slot.
            unsafe {
                let v = ptr::read_unaligned(sp.wrapping_offset(b as isize * sb) as *const T);
                ptr::write_unaligned(dp.add(b), v);
            }
        }
    }
}

/// Rows `a0..a1`, all columns, scalar, in `L × L` squares.
///
/// # Safety
/// See `run`.
#[allow(clippy::too_many_arguments)]
unsafe fn strip_scalar<T: Copy>(
    src: *const u8,
    sa: isize,
    sb: isize,
    dst: *mut u8,
    da: isize,
    a0: usize,
    a1: usize,
    nb: usize,
) {
    let l = line_block(size_of::<T>());
    let mut b0 = 0;
    while b0 < nb {
        let b1 = (b0 + l).min(nb);
        // SAFETY: forwarded contract.
        unsafe { tile_scalar::<T>(src, sa, sb, dst, da, a0, a1, b0, b1) };
        b0 = b1;
    }
}

/// Any element width, element by element (`memcpy` of `elem` bytes), in 16 × 16 squares.
///
/// # Safety
/// See `run`.
#[allow(clippy::too_many_arguments)]
unsafe fn strip_bytes(
    src: *const u8,
    sa: isize,
    sb: isize,
    dst: *mut u8,
    da: isize,
    a0: usize,
    a1: usize,
    nb: usize,
    elem: usize,
) {
    const L: usize = 16;
    let mut b0 = 0;
    while b0 < nb {
        let b1 = (b0 + L).min(nb);
        for a in a0..a1 {
            let sp = src.wrapping_offset(a as isize * sa);
            let dp = dst.wrapping_offset(a as isize * da);
            for b in b0..b1 {
                // SAFETY: element (a, b) and its destination slot are valid (see `run`).
                unsafe {
                    ptr::copy_nonoverlapping(
                        sp.wrapping_offset(b as isize * sb),
                        dp.add(b * elem),
                        elem,
                    )
                };
            }
        }
        b0 = b1;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::tile_scalar;
    use std::arch::x86_64::*;

    /// 8×8 transpose of 4-byte elements in registers (`out[j][i] = r[i][j]`).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn tr8_ps(r: [__m256; 8]) -> [__m256; 8] {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }

    /// 4×4 transpose of 8-byte elements in registers.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn tr4_pd(r: [__m256d; 4]) -> [__m256d; 4] {
        let t0 = _mm256_unpacklo_pd(r[0], r[1]);
        let t1 = _mm256_unpackhi_pd(r[0], r[1]);
        let t2 = _mm256_unpacklo_pd(r[2], r[3]);
        let t3 = _mm256_unpackhi_pd(r[2], r[3]);
        [
            _mm256_permute2f128_pd::<0x20>(t0, t2),
            _mm256_permute2f128_pd::<0x20>(t1, t3),
            _mm256_permute2f128_pd::<0x31>(t0, t2),
            _mm256_permute2f128_pd::<0x31>(t1, t3),
        ]
    }

    /// 8×8 transpose of 2-byte elements in registers (SSE2).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn tr8_epi16(r: [__m128i; 8]) -> [__m128i; 8] {
        let a0 = _mm_unpacklo_epi16(r[0], r[1]);
        let a1 = _mm_unpackhi_epi16(r[0], r[1]);
        let a2 = _mm_unpacklo_epi16(r[2], r[3]);
        let a3 = _mm_unpackhi_epi16(r[2], r[3]);
        let a4 = _mm_unpacklo_epi16(r[4], r[5]);
        let a5 = _mm_unpackhi_epi16(r[4], r[5]);
        let a6 = _mm_unpacklo_epi16(r[6], r[7]);
        let a7 = _mm_unpackhi_epi16(r[6], r[7]);
        let b0 = _mm_unpacklo_epi32(a0, a2);
        let b1 = _mm_unpackhi_epi32(a0, a2);
        let b2 = _mm_unpacklo_epi32(a1, a3);
        let b3 = _mm_unpackhi_epi32(a1, a3);
        let b4 = _mm_unpacklo_epi32(a4, a6);
        let b5 = _mm_unpackhi_epi32(a4, a6);
        let b6 = _mm_unpacklo_epi32(a5, a7);
        let b7 = _mm_unpackhi_epi32(a5, a7);
        [
            _mm_unpacklo_epi64(b0, b4),
            _mm_unpackhi_epi64(b0, b4),
            _mm_unpacklo_epi64(b1, b5),
            _mm_unpackhi_epi64(b1, b5),
            _mm_unpacklo_epi64(b2, b6),
            _mm_unpackhi_epi64(b2, b6),
            _mm_unpacklo_epi64(b3, b7),
            _mm_unpackhi_epi64(b3, b7),
        ]
    }

    /// 16×16 transpose of bytes in registers (SSE2).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn tr16_epi8(r: [__m128i; 16]) -> [__m128i; 16] {
        let mut a = [_mm_setzero_si128(); 16];
        for k in 0..8 {
            a[2 * k] = _mm_unpacklo_epi8(r[2 * k], r[2 * k + 1]);
            a[2 * k + 1] = _mm_unpackhi_epi8(r[2 * k], r[2 * k + 1]);
        }
        let mut b = [_mm_setzero_si128(); 16];
        for g in 0..4 {
            let x = &a[4 * g..4 * g + 4];
            b[4 * g] = _mm_unpacklo_epi16(x[0], x[2]);
            b[4 * g + 1] = _mm_unpackhi_epi16(x[0], x[2]);
            b[4 * g + 2] = _mm_unpacklo_epi16(x[1], x[3]);
            b[4 * g + 3] = _mm_unpackhi_epi16(x[1], x[3]);
        }
        let mut c = [_mm_setzero_si128(); 16];
        for h in 0..2 {
            let (x, y) = (&b[8 * h..8 * h + 4], &b[8 * h + 4..8 * h + 8]);
            for q in 0..4 {
                c[8 * h + 2 * q] = _mm_unpacklo_epi32(x[q], y[q]);
                c[8 * h + 2 * q + 1] = _mm_unpackhi_epi32(x[q], y[q]);
            }
        }
        let mut o = [_mm_setzero_si128(); 16];
        for m in 0..8 {
            o[2 * m] = _mm_unpacklo_epi64(c[m], c[m + 8]);
            o[2 * m + 1] = _mm_unpackhi_epi64(c[m], c[m + 8]);
        }
        o
    }

    /// # Safety
    /// The 16×16 block is valid (SSE2 is baseline on x86_64).
    #[inline]
    unsafe fn micro_1(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 16 unaligned 16-byte loads / stores of valid rows.
        unsafe {
            let r: [__m128i; 16] = std::array::from_fn(|i| {
                _mm_loadu_si128(src.offset(i as isize * sb) as *const __m128i)
            });
            for (j, v) in tr16_epi8(r).into_iter().enumerate() {
                _mm_storeu_si128(dst.offset(j as isize * da) as *mut __m128i, v);
            }
        }
    }

    /// # Safety
    /// The 16 (a) × 64 (b) block is valid; destination rows 16-byte aligned.
    #[inline]
    unsafe fn line_1_nt(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 64 unaligned loads of valid rows; 64 aligned streaming stores to valid rows.
        unsafe {
            let mut o = [[_mm_setzero_si128(); 16]; 4];
            for (q, oq) in o.iter_mut().enumerate() {
                let base = src.offset(q as isize * 16 * sb);
                let r: [__m128i; 16] = std::array::from_fn(|i| {
                    _mm_loadu_si128(base.offset(i as isize * sb) as *const __m128i)
                });
                *oq = tr16_epi8(r);
            }
            for j in 0..16 {
                let d = dst.offset(j as isize * da) as *mut __m128i;
                for (q, oq) in o.iter().enumerate() {
                    _mm_stream_si128(d.add(q), oq[j]);
                }
            }
        }
    }

    // Micro-kernels. `src` points at source element (a, b), rows `src + i*sb` are successive b;
    // `dst` points at destination element (a, b), rows `dst + j*da` are successive a.
    // `*_line` kernels do M (a) × L (b) so that every destination row gets one whole 64-byte
    // line; with NT they use streaming stores (destination rows must then be 64-byte aligned).

    /// # Safety
    /// AVX2; the 8×8 block is valid.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn micro_4(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 8 unaligned loads of valid source rows, 8 unaligned stores to valid rows.
        unsafe {
            let ld = |i: isize| _mm256_loadu_ps(src.offset(i * sb) as *const f32);
            let o = tr8_ps([ld(0), ld(1), ld(2), ld(3), ld(4), ld(5), ld(6), ld(7)]);
            for (j, v) in o.into_iter().enumerate() {
                _mm256_storeu_ps(dst.offset(j as isize * da) as *mut f32, v);
            }
        }
    }

    /// # Safety
    /// AVX2; the 8 (a) × 16 (b) block is valid; destination rows 32-byte aligned.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn line_4_nt(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 16 unaligned loads of valid source rows; 16 aligned streaming stores to valid
        // destination rows (alignment per the contract).
        unsafe {
            let ld = |i: isize| _mm256_loadu_ps(src.offset(i * sb) as *const f32);
            let lo = tr8_ps([ld(0), ld(1), ld(2), ld(3), ld(4), ld(5), ld(6), ld(7)]);
            let hi = tr8_ps([ld(8), ld(9), ld(10), ld(11), ld(12), ld(13), ld(14), ld(15)]);
            for j in 0..8 {
                let d = dst.offset(j as isize * da) as *mut f32;
                _mm256_stream_ps(d, lo[j]);
                _mm256_stream_ps(d.add(8), hi[j]);
            }
        }
    }

    /// # Safety
    /// AVX2; the 4×4 block is valid.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn micro_8(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 4 unaligned loads / stores of valid rows.
        unsafe {
            let ld = |i: isize| _mm256_loadu_pd(src.offset(i * sb) as *const f64);
            let o = tr4_pd([ld(0), ld(1), ld(2), ld(3)]);
            for (j, v) in o.into_iter().enumerate() {
                _mm256_storeu_pd(dst.offset(j as isize * da) as *mut f64, v);
            }
        }
    }

    /// # Safety
    /// AVX2; the 4 (a) × 8 (b) block is valid; destination rows 32-byte aligned.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn line_8_nt(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 8 unaligned loads of valid rows; 8 aligned streaming stores to valid rows.
        unsafe {
            let ld = |i: isize| _mm256_loadu_pd(src.offset(i * sb) as *const f64);
            let lo = tr4_pd([ld(0), ld(1), ld(2), ld(3)]);
            let hi = tr4_pd([ld(4), ld(5), ld(6), ld(7)]);
            for j in 0..4 {
                let d = dst.offset(j as isize * da) as *mut f64;
                _mm256_stream_pd(d, lo[j]);
                _mm256_stream_pd(d.add(4), hi[j]);
            }
        }
    }

    /// # Safety
    /// The 8×8 block is valid (SSE2 is baseline on x86_64).
    #[inline]
    unsafe fn micro_2(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 8 unaligned 16-byte loads / stores of valid rows.
        unsafe {
            let ld = |i: isize| _mm_loadu_si128(src.offset(i * sb) as *const __m128i);
            let o = tr8_epi16([ld(0), ld(1), ld(2), ld(3), ld(4), ld(5), ld(6), ld(7)]);
            for (j, v) in o.into_iter().enumerate() {
                _mm_storeu_si128(dst.offset(j as isize * da) as *mut __m128i, v);
            }
        }
    }

    /// # Safety
    /// The 8 (a) × 32 (b) block is valid; destination rows 16-byte aligned.
    #[inline]
    unsafe fn line_2_nt(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 32 unaligned loads of valid rows; 32 aligned streaming stores to valid rows.
        unsafe {
            let ld = |i: isize| _mm_loadu_si128(src.offset(i * sb) as *const __m128i);
            let mut o = [[_mm_setzero_si128(); 8]; 4];
            for (q, oq) in o.iter_mut().enumerate() {
                let i = q as isize * 8;
                *oq = tr8_epi16([
                    ld(i),
                    ld(i + 1),
                    ld(i + 2),
                    ld(i + 3),
                    ld(i + 4),
                    ld(i + 5),
                    ld(i + 6),
                    ld(i + 7),
                ]);
            }
            for j in 0..8 {
                let d = dst.offset(j as isize * da) as *mut __m128i;
                for (q, oq) in o.iter().enumerate() {
                    _mm_stream_si128(d.add(q), oq[j]);
                }
            }
        }
    }

    /// Generates a strip function: rows `a0..a1`, all columns, in `L × L` squares (`L` elements
    /// = 64 bytes) walked b-square by b-square, a-square by a-square; full squares use the
    /// micro-kernels (`$line` per M rows when given: whole-line streaming stores), partial
    /// squares on the edges the scalar loop.
    macro_rules! strip_fn {
        ($(#[$attr:meta])* $name:ident, $t:ty, $l:expr, $m:expr, $micro:ident $(, $line:ident)?) => {
            /// # Safety
            /// The source is unit-stride along `a` (`sa == size_of::<T>()`), the CPU supports
            /// the micro-kernels' instructions, and the contract of `super::run` holds; for the
            /// streaming variant every destination row start is 64-byte aligned.
            $(#[$attr])*
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn $name(
                src: *const u8,
                sa: isize,
                sb: isize,
                dst: *mut u8,
                da: isize,
                a0: usize,
                a1: usize,
                nb: usize,
            ) {
                const L: usize = $l;
                const M: usize = $m;
                let e = size_of::<$t>() as isize;
                let mut b0 = 0;
                while b0 < nb {
                    let b1 = (b0 + L).min(nb);
                    let mut as0 = a0;
                    while as0 < a1 {
                        let as1 = (as0 + L).min(a1);
                        if as1 - as0 == L && b1 - b0 == L {
                            let mut ma = as0;
                            while ma < as1 {
                                let sp = src.wrapping_offset(ma as isize * sa + b0 as isize * sb);
                                let dp = dst.wrapping_offset(ma as isize * da + b0 as isize * e);
                                $(
                                    // SAFETY: a full M × L block of the valid square;
                                    // features and alignment per the contract.
                                    unsafe { $line(sp, sb, dp, da) };
                                    ma += M;
                                    continue;
                                )?
                                #[allow(unreachable_code)]
                                {
                                    let mut mb = b0;
                                    while mb < b1 {
                                        let off = (mb - b0) as isize;
                                        // SAFETY: a full M × M block of the valid square;
                                        // features per the contract.
                                        unsafe { $micro(sp.wrapping_offset(off * sb), sb, dp.wrapping_offset(off * e), da) };
                                        mb += M;
                                    }
                                    ma += M;
                                }
                            }
                        } else {
                            // SAFETY: forwarded contract (edge block).
                            unsafe { tile_scalar::<$t>(src, sa, sb, dst, da, as0, as1, b0, b1) };
                        }
                        as0 = as1;
                    }
                    b0 = b1;
                }
            }
        };
    }

    strip_fn!(
        #[target_feature(enable = "avx2")]
        strip_4_avx2,
        u32,
        16,
        8,
        micro_4
    );
    strip_fn!(
        #[target_feature(enable = "avx2")]
        strip_4_avx2_nt,
        u32,
        16,
        8,
        micro_4,
        line_4_nt
    );
    strip_fn!(
        #[target_feature(enable = "avx2")]
        strip_8_avx2,
        u64,
        8,
        4,
        micro_8
    );
    strip_fn!(
        #[target_feature(enable = "avx2")]
        strip_8_avx2_nt,
        u64,
        8,
        4,
        micro_8,
        line_8_nt
    );
    strip_fn!(strip_1_sse2, u8, 64, 16, micro_1);
    strip_fn!(strip_1_sse2_nt, u8, 64, 16, micro_1, line_1_nt);
    strip_fn!(strip_2_sse2, u16, 32, 8, micro_2);
    strip_fn!(strip_2_sse2_nt, u16, 32, 8, micro_2, line_2_nt);
}
