//! Bounded fuzz harness for the strided copy planner and kernels (`dlbind::copy`), issue 6.
//!
//! `cargo fuzz` needs nightly, so these are plain `#[test]`s: each iteration decodes its input
//! with `arbitrary::Unstructured` from bytes of a seeded splitmix64 stream (see
//! `fuzz_common`). Three targets, each time-bounded (~3 s, with a minimum iteration count):
//!
//! - `extreme_values`: arbitrary shapes/strides (ndim 0..=70, mismatched lengths, 0/±1,
//!   `i64::MIN/MAX`, powers of two near overflow) and element sizes (1..16 bytes, odd and huge
//!   widths, sub-byte 1..7 bits). `contiguous_nbytes`, `is_c_contiguous` and `plan` must not
//!   panic and must agree with independent i128 oracles (exact byte count or the exact error;
//!   `Invalid` exactly when an offset reachable from element 0 leaves `isize`; the plan's
//!   sizes add up to the byte count; `Memcpy` exactly for contiguous layouts).
//!   `copy_to_contiguous` runs only where it must fail before touching memory (the expected
//!   error is checked and the destination must be untouched) or where every reachable element
//!   lies inside a real 256-byte source (then the output is compared with a naive gather).
//! - `small_layouts`: valid layouts (ndim 0..=6, dims 0..=7, strides -40..=40 incl. 0, random
//!   or structured as permuted/stepped/padded views, elements of 1, 2, 3, 4, 5, 6, 8, 12, 16, 32
//!   bytes, sub-byte contiguous and not) over a real, misaligned source covering every
//!   reachable element: output byte-for-byte equal to a naive index-loop gather, nothing
//!   written outside the destination range, planner consistent.
//! - `large_layouts`: 1-3 dims of up to a few thousand (1-12 MiB of output, 3 MiB in debug
//!   builds) so the parallel, row, streaming and SIMD-transpose paths run; same checks.
//!
//! Reproduce / run long (see `fuzz_common` for `DLBIND_FUZZ_SEED`, `DLBIND_FUZZ_START`,
//! `DLBIND_FUZZ_SECS`):
//!
//! ```sh
//! DLBIND_FUZZ_ITERS=2000000 cargo test --release -p dlbind --test fuzz_copy -- --nocapture
//! # large_layouts does far more work per iteration; run it on its own with fewer:
//! DLBIND_FUZZ_ITERS=5000 cargo test --release -p dlbind --test fuzz_copy large_layouts -- --nocapture
//! ```

mod fuzz_common;

use dlbind::copy::{
    CopyError, CopyPlan, ElemSize, PARALLEL_MIN_BYTES, PlanKind, contiguous_nbytes,
    copy_to_contiguous, is_c_contiguous, plan,
};
use fuzz_common::{ArbResult, Target, Unstructured, chance, edgy_i64, pick};

// ---------------------------------------------------------------------------------------------
// Independent oracles (i128/u128 arithmetic, no shared code with the crate).

/// Element count, or the error `contiguous_nbytes` must report for it.
fn oracle_numel(shape: &[i64]) -> Result<u128, CopyError> {
    if shape.iter().any(|&d| d < 0) {
        return Err(CopyError::NegativeDim);
    }
    // Zero-size arrays still need the other dims' product to be representable.
    let mut prod: u128 = 1;
    for &d in shape.iter().filter(|&&d| d != 0) {
        prod = prod.checked_mul(d as u128).ok_or(CopyError::Overflow)?;
    }
    if prod > usize::MAX as u128 {
        return Err(CopyError::Overflow);
    }
    Ok(if shape.contains(&0) { 0 } else { prod })
}

fn oracle_nbytes(shape: &[i64], elem: ElemSize) -> Result<usize, CopyError> {
    let n = oracle_numel(shape)?;
    let bytes = match elem {
        ElemSize::Bytes(b) => n.checked_mul(b as u128).ok_or(CopyError::Overflow)?,
        ElemSize::SubByte { bits } => (n * bits as u128).div_ceil(8),
    };
    if bytes > isize::MAX as u128 {
        return Err(CopyError::Overflow);
    }
    Ok(bytes as usize)
}

/// C-contiguity: `Some(answer)`, or `None` where either answer is acceptable (the layout matches
/// but the element count exceeds `i64::MAX`, which the crate documents as "conservative").
fn oracle_contig(shape: &[i64], strides: &[i64]) -> Option<bool> {
    if shape.len() != strides.len() || shape.iter().any(|&d| d < 0) {
        return Some(false);
    }
    if shape.contains(&0) {
        return Some(true);
    }
    let mut expected: i128 = 1;
    let mut huge = false;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d == 1 {
            continue;
        }
        if huge || s as i128 != expected {
            return Some(false);
        }
        match expected.checked_mul(d as i128) {
            Some(e) if e <= i64::MAX as i128 => expected = e,
            _ => huge = true,
        }
    }
    if huge { None } else { Some(true) }
}

/// Lowest and highest byte offset (relative to element 0) of any element, `None` if the sums
/// leave i128. Zero-size arrays reach nothing: `(0, 0)`. Requires equal lengths.
fn oracle_extent(shape: &[i64], strides: &[i64], elem: usize) -> Option<(i128, i128)> {
    if shape.contains(&0) {
        return Some((0, 0));
    }
    let (mut lo, mut hi) = (0i128, 0i128);
    for (&d, &s) in shape.iter().zip(strides) {
        let reach = (d as i128 - 1)
            .checked_mul(s as i128)?
            .checked_mul(elem as i128)?;
        if reach < 0 {
            lo = lo.checked_add(reach)?;
        } else {
            hi = hi.checked_add(reach)?;
        }
    }
    Some((lo, hi))
}

/// Whether `plan`/`copy_to_contiguous` must accept the layout: equal lengths, a valid byte size,
/// and (with elements) every reachable byte offset from element 0 fits in `isize` (the last
/// byte of the highest element included).
fn oracle_valid(shape: &[i64], strides: &[i64], elem: usize) -> bool {
    if shape.len() != strides.len() {
        return false;
    }
    let Ok(nbytes) = oracle_nbytes(shape, ElemSize::Bytes(elem)) else {
        return false;
    };
    if nbytes == 0 {
        return true;
    }
    match oracle_extent(shape, strides, elem) {
        Some((lo, hi)) => lo >= isize::MIN as i128 && hi + elem as i128 <= isize::MAX as i128,
        None => false,
    }
}

/// Checks a plan against the oracles (valid, sizes adding up, Memcpy ⇔ contiguous).
fn check_plan(shape: &[i64], strides: &[i64], elem: usize, p: CopyPlan) -> Result<(), String> {
    let valid = oracle_valid(shape, strides, elem);
    if valid != (p.kind != PlanKind::Invalid) {
        return Err(format!("plan {p:?} but the oracle says valid = {valid}"));
    }
    if !valid {
        return if p.parallel {
            Err(format!("invalid plan marked parallel: {p:?}"))
        } else {
            Ok(())
        };
    }
    let nbytes = oracle_nbytes(shape, ElemSize::Bytes(elem)).expect("valid");
    let contig = oracle_contig(shape, strides);
    let fail = |why: &str| {
        Err(format!(
            "plan {p:?}: {why} (nbytes {nbytes}, contiguous {contig:?})"
        ))
    };
    match p.kind {
        PlanKind::Invalid => unreachable!(),
        PlanKind::Empty => {
            if nbytes != 0 {
                return fail("Empty with bytes to copy");
            }
        }
        _ if nbytes == 0 => return fail("nothing to copy but not Empty"),
        PlanKind::Memcpy { bytes } => {
            if bytes != nbytes || contig == Some(false) {
                return fail("Memcpy of a non-contiguous layout or of the wrong size");
            }
        }
        PlanKind::Rows { row_bytes, rows } => {
            if row_bytes == 0
                || row_bytes % elem != 0
                || row_bytes.checked_mul(rows) != Some(nbytes)
            {
                return fail("rows × row_bytes is not the byte count");
            }
        }
        PlanKind::Transpose2D {
            rows,
            cols,
            batches,
            elem_bytes,
            ..
        } => {
            let total = (rows as u128) * (cols as u128) * (batches as u128) * (elem_bytes as u128);
            // elem_bytes may be a short contiguous row copied as one wide element.
            if elem_bytes % elem != 0 || total != nbytes as u128 || rows < 2 || cols < 2 {
                return fail("transpose block × batches is not the byte count");
            }
        }
        PlanKind::Generic { elem_bytes } => {
            if elem_bytes == 0 || elem_bytes % elem != 0 || !nbytes.is_multiple_of(elem_bytes) {
                return fail("generic element width does not divide the byte count");
            }
        }
    }
    if contig == Some(true) && nbytes > 0 && p.kind != (PlanKind::Memcpy { bytes: nbytes }) {
        return fail("contiguous layout not planned as one Memcpy");
    }
    if p.parallel && (nbytes < PARALLEL_MIN_BYTES || p.kind == PlanKind::Empty) {
        return fail("parallel below PARALLEL_MIN_BYTES");
    }
    Ok(())
}

/// Checks `contiguous_nbytes`, `is_c_contiguous` and `plan` (elements of `plan_elem` bytes).
fn check_pure(
    shape: &[i64],
    strides: &[i64],
    elem: ElemSize,
    plan_elem: usize,
) -> Result<(), String> {
    let got = contiguous_nbytes(shape, elem);
    let want = oracle_nbytes(shape, elem);
    if got != want {
        return Err(format!("contiguous_nbytes = {got:?}, oracle {want:?}"));
    }
    if let Ok(n) = got
        && n > isize::MAX as usize
    {
        return Err(format!("contiguous_nbytes = {n} > isize::MAX"));
    }
    let c = is_c_contiguous(shape, strides);
    if let Some(want) = oracle_contig(shape, strides)
        && c != want
    {
        return Err(format!("is_c_contiguous = {c}, oracle {want}"));
    }
    let p = plan(shape, strides, plan_elem);
    if plan(shape, strides, plan_elem) != p {
        return Err("plan is not deterministic".into());
    }
    check_plan(shape, strides, plan_elem, p)
}

// ---------------------------------------------------------------------------------------------
// Buffers and the reference gather.

const SENTINEL: u8 = 0xA5;

/// A source buffer with element 0 at `base`: every reachable element lies inside.
struct Source {
    buf: Vec<u8>,
    base: usize,
}

impl Source {
    /// `lo`/`hi`: the byte extent from `oracle_extent`; `misalign` extra bytes in front.
    fn new(lo: i128, hi: i128, elem: usize, misalign: usize, salt: u64) -> Self {
        let len = (hi - lo) as usize + elem + misalign + 16;
        let buf = (0..len as u64)
            .map(|i| ((i ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
            .collect();
        Source {
            buf,
            base: misalign + (-lo) as usize,
        }
    }
}

/// A 64-byte aligned destination window (plus `misalign`) with sentinel bytes around it.
struct Dest {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl Dest {
    fn new(len: usize, misalign: usize) -> Self {
        let buf = vec![SENTINEL; len + misalign + 192];
        let start = (buf.as_ptr() as usize).next_multiple_of(64) - buf.as_ptr() as usize + misalign;
        Dest { buf, start, len }
    }

    fn ptr(&mut self) -> *mut u8 {
        self.buf[self.start..].as_mut_ptr()
    }

    fn untouched(&self) -> bool {
        self.buf.iter().all(|&b| b == SENTINEL)
    }

    /// Compares the window with `want` and checks the sentinel outside it.
    fn check(&self, want: &[u8]) -> Result<(), String> {
        let got = &self.buf[self.start..self.start + self.len];
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            return Err(format!(
                "output differs from the reference at byte {i} of {}",
                want.len()
            ));
        }
        if got.len() != want.len() {
            return Err(format!(
                "output length {} != reference {}",
                got.len(),
                want.len()
            ));
        }
        if let Some(i) = self.buf[..self.start].iter().rposition(|&b| b != SENTINEL) {
            return Err(format!(
                "wrote {} bytes before the destination",
                self.start - i
            ));
        }
        if let Some(i) = self.buf[self.start + self.len..]
            .iter()
            .position(|&b| b != SENTINEL)
        {
            return Err(format!("wrote past the destination (+{i})"));
        }
        Ok(())
    }
}

/// Naive gather: every multi-index in C order, the element at Σ idx·stride·elem from `base`.
fn reference(src: &Source, shape: &[i64], strides: &[i64], elem: usize) -> Vec<u8> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let n: usize = dims.iter().product();
    let mut out = Vec::with_capacity(n * elem);
    if n == 0 {
        return out;
    }
    let steps: Vec<i128> = strides.iter().map(|&s| s as i128 * elem as i128).collect();
    let mut idx = vec![0usize; dims.len()];
    let mut off: i128 = src.base as i128;
    for _ in 0..n {
        let o = off as usize;
        out.extend_from_slice(&src.buf[o..o + elem]);
        for k in (0..dims.len()).rev() {
            idx[k] += 1;
            off += steps[k];
            if idx[k] < dims[k] {
                break;
            }
            off -= steps[k] * dims[k] as i128;
            idx[k] = 0;
        }
    }
    out
}

/// Runs `copy_to_contiguous` on a real source and destination and checks the result against
/// the reference gather. The layout must be valid and its extent inside `src`.
fn copy_and_compare(
    src: &Source,
    shape: &[i64],
    strides: &[i64],
    elem: ElemSize,
    dst_misalign: usize,
) -> Result<(), String> {
    let need = oracle_nbytes(shape, elem).map_err(|e| format!("not a valid case: {e:?}"))?;
    let want = match elem {
        // Zero-byte output (zero-size array or zero-width elements): nothing to gather.
        _ if need == 0 => Vec::new(),
        ElemSize::Bytes(b) => reference(src, shape, strides, b),
        ElemSize::SubByte { .. } => src.buf[src.base..src.base + need].to_vec(),
    };
    let mut dst = Dest::new(need, dst_misalign);
    // SAFETY: every element reachable from element 0 lies inside `src.buf` (the caller sized it
    // from the oracle extent); `dst` is writable for `need` bytes; distinct allocations.
    let r = unsafe {
        copy_to_contiguous(
            src.buf.as_ptr().add(src.base),
            shape,
            strides,
            elem,
            dst.ptr(),
            need,
        )
    };
    if r != Ok(()) {
        return Err(format!("copy_to_contiguous = {r:?}, expected Ok"));
    }
    dst.check(&want).map_err(|e| match elem {
        ElemSize::Bytes(b) => format!("{e}; plan {:?}", plan(shape, strides, b)),
        ElemSize::SubByte { .. } => e,
    })
}

// ---------------------------------------------------------------------------------------------
// (a) Extreme values.

const BYTE_WIDTHS: [usize; 5] = [1, 2, 4, 8, 16];

fn extreme_dim(u: &mut Unstructured<'_>, nonneg: bool) -> ArbResult<i64> {
    let d = match u.int_in_range(0u8..=9)? {
        0..=2 => u.int_in_range(0i64..=4)?,
        3 | 4 => 1,
        _ => edgy_i64(u)?,
    };
    Ok(if nonneg {
        d.checked_abs().unwrap_or(i64::MAX)
    } else {
        d
    })
}

fn extreme_elem(u: &mut Unstructured<'_>) -> ArbResult<ElemSize> {
    Ok(match u.int_in_range(0u8..=19)? {
        0..=14 => ElemSize::Bytes(pick(u, &BYTE_WIDTHS)?),
        15 | 16 => ElemSize::SubByte {
            bits: u.int_in_range(1u32..=7)?,
        },
        17 | 18 => ElemSize::Bytes(pick(
            u,
            &[
                0,
                3,
                5,
                12,
                32,
                1 << 20,
                1 << 40,
                1 << 62,
                isize::MAX as usize,
                1 << 63,
                usize::MAX,
            ],
        )?),
        _ => ElemSize::SubByte {
            bits: pick(u, &[0, 8, 9, 64, u32::MAX])?,
        },
    })
}

#[derive(Debug)]
struct ExtremeCase {
    shape: Vec<i64>,
    strides: Vec<i64>,
    elem: ElemSize,
    plan_elem: usize,
    dst_len: usize,
}

fn extreme_case(u: &mut Unstructured<'_>) -> ArbResult<ExtremeCase> {
    let ndim = match u.int_in_range(0u8..=9)? {
        0..=6 => u.int_in_range(0usize..=8)?,
        7 | 8 => u.int_in_range(9usize..=70)?,
        _ => u.int_in_range(62usize..=70)?,
    };
    let nonneg = chance(u, 3, 4)?;
    let mut shape = Vec::with_capacity(ndim);
    for _ in 0..ndim {
        shape.push(extreme_dim(u, nonneg)?);
    }
    let nstrides = if chance(u, 9, 10)? {
        ndim
    } else {
        match u.int_in_range(0u8..=2)? {
            0 => ndim.saturating_sub(u.int_in_range(1usize..=3)?),
            1 => ndim + u.int_in_range(1usize..=3)?,
            _ => u.int_in_range(0usize..=70)?,
        }
    };
    let mut strides = Vec::with_capacity(nstrides);
    for _ in 0..nstrides {
        strides.push(if chance(u, 1, 2)? {
            u.int_in_range(-8i64..=8)?
        } else {
            edgy_i64(u)?
        });
    }
    let elem = extreme_elem(u)?;
    let plan_elem = match elem {
        ElemSize::Bytes(b) => b,
        ElemSize::SubByte { .. } => pick(u, &BYTE_WIDTHS)?,
    };
    let dst_len = match oracle_nbytes(&shape, elem) {
        Ok(need) if need <= DST_CAP && chance(u, 3, 4)? => need,
        _ => u.int_in_range(0usize..=DST_CAP)?,
    };
    Ok(ExtremeCase {
        shape,
        strides,
        elem,
        plan_elem,
        dst_len,
    })
}

/// Real destination capacity for the extreme family (dst_len never exceeds it).
const DST_CAP: usize = 64;
/// The extreme family's source: 256 bytes, element 0 in the middle.
const SRC_HALF: i128 = 128;

#[derive(Debug, Default)]
struct ExtremeStats {
    ran_ok: u64,
    expected_err: u64,
    skipped_copy: u64,
    plans: [u64; 7],
}

fn plan_index(k: PlanKind) -> usize {
    match k {
        PlanKind::Empty => 0,
        PlanKind::Memcpy { .. } => 1,
        PlanKind::Rows { .. } => 2,
        PlanKind::Transpose2D { .. } => 3,
        PlanKind::Generic { .. } => 4,
        PlanKind::Invalid => 5,
    }
}

fn run_extreme(c: &ExtremeCase, stats: &mut ExtremeStats) -> Result<(), String> {
    check_pure(&c.shape, &c.strides, c.elem, c.plan_elem)?;
    stats.plans[plan_index(plan(&c.shape, &c.strides, c.plan_elem).kind)] += 1;

    // The outcome copy_to_contiguous must have, in the documented check order.
    enum Expect {
        Fail(CopyError),
        /// Ok, and the output equals the reference (everything reachable is inside the source).
        Copy,
        /// Valid but would read outside the test's source: not run.
        Skip,
    }
    let need = oracle_nbytes(&c.shape, c.elem);
    let expect = if c.shape.len() != c.strides.len() {
        Expect::Fail(CopyError::ShapeStrideMismatch)
    } else {
        match need.clone() {
            Err(e) => Expect::Fail(e),
            Ok(need) if c.dst_len < need => Expect::Fail(CopyError::DestinationTooSmall {
                need,
                have: c.dst_len,
            }),
            Ok(need) => match c.elem {
                ElemSize::SubByte { .. } if need == 0 => Expect::Copy,
                ElemSize::SubByte { .. } => match oracle_contig(&c.shape, &c.strides) {
                    Some(false) => Expect::Fail(CopyError::SubByteNotContiguous),
                    // need <= DST_CAP: the packed bytes lie inside the source's upper half.
                    Some(true) => Expect::Copy,
                    None => Expect::Skip,
                },
                ElemSize::Bytes(b) => {
                    if !oracle_valid(&c.shape, &c.strides, b) {
                        Expect::Fail(CopyError::Overflow)
                    } else {
                        match oracle_extent(&c.shape, &c.strides, b) {
                            Some((lo, hi)) if lo >= -SRC_HALF && hi + b as i128 <= SRC_HALF => {
                                Expect::Copy
                            }
                            _ => Expect::Skip,
                        }
                    }
                }
            },
        }
    };
    let src = Source::new(-SRC_HALF, SRC_HALF - 1, 1, 0, c.dst_len as u64);
    match expect {
        Expect::Skip => stats.skipped_copy += 1,
        Expect::Copy => {
            if need.as_ref().ok() != Some(&c.dst_len) {
                // A larger dst_len is valid too, but the window check wants the exact size.
                stats.skipped_copy += 1;
                return Ok(());
            }
            copy_and_compare(&src, &c.shape, &c.strides, c.elem, 0)?;
            stats.ran_ok += 1;
        }
        Expect::Fail(want) => {
            let mut dst = Dest::new(DST_CAP, 0);
            // SAFETY: the oracle says this call fails validation before any memory is touched
            // (checked below); `dst` is really writable for DST_CAP >= dst_len bytes and `src`
            // is a real 256-byte buffer.
            let r = unsafe {
                copy_to_contiguous(
                    src.buf.as_ptr().add(src.base),
                    &c.shape,
                    &c.strides,
                    c.elem,
                    dst.ptr(),
                    c.dst_len,
                )
            };
            if r != Err(want.clone()) {
                return Err(format!(
                    "copy_to_contiguous = {r:?}, expected Err({want:?})"
                ));
            }
            if !dst.untouched() {
                return Err(format!(
                    "copy_to_contiguous failed with {want:?} but wrote the destination"
                ));
            }
            stats.expected_err += 1;
        }
    }
    Ok(())
}

#[test]
fn extreme_values() {
    let mut stats = ExtremeStats::default();
    let run = Target::new("extreme_values")
        .min_iters(2000)
        .run(|u, desc| {
            let Ok(c) = extreme_case(u) else {
                return Ok(());
            };
            *desc = format!("{c:?}");
            run_extreme(&c, &mut stats)
        });
    println!("extreme_values: {stats:?}");
    // Every outcome class must actually occur (the generator is not vacuous).
    if !run.exact || run.iters >= 2000 {
        assert!(stats.ran_ok > 0 && stats.expected_err > 0, "{stats:?}");
        assert!(
            stats.plans.iter().take(6).all(|&n| n > 0),
            "not every plan kind seen: {stats:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (b) Small valid layouts over a real source.

const SMALL_WIDTHS: [usize; 10] = [1, 2, 3, 4, 5, 6, 8, 12, 16, 32];

#[derive(Debug)]
struct SmallCase {
    shape: Vec<i64>,
    strides: Vec<i64>,
    elem: ElemSize,
    misalign: usize,
    dst_misalign: usize,
}

/// Strides of a permuted, stepped (±1, ±2, 0) and padded view of a C-contiguous storage.
fn structured_strides(
    u: &mut Unstructured<'_>,
    dims: &[usize],
    max_pad: usize,
) -> ArbResult<Vec<i64>> {
    let n = dims.len();
    let mut perm: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = u.int_in_range(0..=i)?;
        perm.swap(i, j);
    }
    let mut strides = vec![0i64; n];
    let mut acc = 1i64;
    for &ax in perm.iter().rev() {
        let step = match u.int_in_range(0u8..=11)? {
            0..=6 => 1i64,
            7 | 8 => -1,
            9 => 2,
            10 => -2,
            _ => 0,
        };
        let pad = if chance(u, 1, 3)? {
            u.int_in_range(1..=max_pad)?
        } else {
            0
        };
        strides[ax] = acc * step;
        acc *= (dims[ax].max(1) * step.unsigned_abs().max(1) as usize + pad) as i64;
    }
    Ok(strides)
}

fn c_strides(dims: &[usize]) -> Vec<i64> {
    let mut s = vec![0i64; dims.len()];
    let mut acc = 1i64;
    for i in (0..dims.len()).rev() {
        s[i] = acc;
        acc *= dims[i] as i64;
    }
    s
}

fn small_case(u: &mut Unstructured<'_>) -> ArbResult<SmallCase> {
    let ndim = u.int_in_range(0usize..=6)?;
    let mut dims = Vec::with_capacity(ndim);
    for _ in 0..ndim {
        dims.push(match u.int_in_range(0u8..=9)? {
            0 => 0,
            1 | 2 => 1,
            _ => u.int_in_range(2usize..=7)?,
        });
    }
    // Keep each case cheap: at most 4096 elements.
    while dims.iter().product::<usize>() > 4096 {
        let i = (0..dims.len()).max_by_key(|&i| dims[i]).unwrap();
        dims[i] /= 2;
    }
    let sub_byte = chance(u, 1, 6)?;
    let mut strides = if sub_byte {
        // Mostly contiguous (copied), sometimes permuted/stepped (refused).
        if chance(u, 3, 4)? {
            c_strides(&dims)
        } else {
            structured_strides(u, &dims, 2)?
        }
    } else {
        match u.int_in_range(0u8..=5)? {
            0 | 1 => {
                let mut s = Vec::with_capacity(ndim);
                for _ in 0..ndim {
                    s.push(match u.int_in_range(0u8..=5)? {
                        0 => 0,
                        1 => pick(u, &[1, -1])?,
                        _ => u.int_in_range(-40i64..=40)?,
                    });
                }
                s
            }
            2 => c_strides(&dims),
            _ => structured_strides(u, &dims, 3)?,
        }
    };
    // Size-1 dims ignore their stride, and a zero-size array reads nothing: any value goes.
    let empty = dims.contains(&0);
    for (i, s) in strides.iter_mut().enumerate() {
        if (dims[i] == 1 || empty) && chance(u, 1, 4)? {
            *s = edgy_i64(u)?;
        }
    }
    let elem = if sub_byte {
        ElemSize::SubByte {
            bits: u.int_in_range(1u32..=7)?,
        }
    } else {
        ElemSize::Bytes(pick(u, &SMALL_WIDTHS)?)
    };
    Ok(SmallCase {
        shape: dims.iter().map(|&d| d as i64).collect(),
        strides,
        elem,
        misalign: u.int_in_range(0usize..=15)?,
        dst_misalign: u.int_in_range(0usize..=7)?,
    })
}

fn run_small(c: &SmallCase, salt: u64, stats: &mut [u64; 8]) -> Result<(), String> {
    let plan_elem = match c.elem {
        ElemSize::Bytes(b) => b,
        ElemSize::SubByte { .. } => 1,
    };
    check_pure(&c.shape, &c.strides, c.elem, plan_elem)?;
    match c.elem {
        ElemSize::Bytes(b) => {
            let p = plan(&c.shape, &c.strides, b);
            if p.kind == PlanKind::Invalid {
                return Err("a small valid layout was planned Invalid".into());
            }
            stats[plan_index(p.kind)] += 1;
            let (lo, hi) = oracle_extent(&c.shape, &c.strides, b).expect("small");
            let src = Source::new(lo, hi, b, c.misalign, salt);
            copy_and_compare(&src, &c.shape, &c.strides, c.elem, c.dst_misalign)
        }
        ElemSize::SubByte { .. } => {
            let need = oracle_nbytes(&c.shape, c.elem).expect("small");
            let src = Source::new(0, need as i128, 1, c.misalign, salt);
            match oracle_contig(&c.shape, &c.strides) {
                Some(true) => {
                    stats[6] += 1;
                    copy_and_compare(&src, &c.shape, &c.strides, c.elem, c.dst_misalign)
                }
                _ => {
                    stats[7] += 1;
                    let mut dst = Dest::new(need, c.dst_misalign);
                    // SAFETY: refused before reading (checked), and the packed bytes would be
                    // inside `src` anyway; dst writable for `need` bytes.
                    let r = unsafe {
                        copy_to_contiguous(
                            src.buf.as_ptr().add(src.base),
                            &c.shape,
                            &c.strides,
                            c.elem,
                            dst.ptr(),
                            need,
                        )
                    };
                    let want = if need == 0 {
                        Ok(())
                    } else {
                        Err(CopyError::SubByteNotContiguous)
                    };
                    if r != want {
                        return Err(format!(
                            "sub-byte non-contiguous copy = {r:?}, expected {want:?}"
                        ));
                    }
                    if !dst.untouched() {
                        return Err("refused sub-byte copy wrote the destination".into());
                    }
                    Ok(())
                }
            }
        }
    }
}

#[test]
fn small_layouts() {
    // Counts per plan kind (Empty, Memcpy, Rows, Transpose2D, Generic, Invalid) and sub-byte
    // copied / refused.
    let mut stats = [0u64; 8];
    let mut salt = 0u64;
    let run = Target::new("small_layouts").min_iters(1000).run(|u, desc| {
        let Ok(c) = small_case(u) else { return Ok(()) };
        *desc = format!("{c:?}");
        salt = salt.wrapping_add(0x51);
        run_small(&c, salt, &mut stats)
    });
    println!(
        "small_layouts: Empty {} Memcpy {} Rows {} Transpose2D {} Generic {} | sub-byte copied {} refused {}",
        stats[0], stats[1], stats[2], stats[3], stats[4], stats[6], stats[7]
    );
    if !run.exact || run.iters >= 1000 {
        assert!(
            stats[..5].iter().chain(&stats[6..]).all(|&n| n > 0),
            "some path was never exercised: {stats:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (c) Large layouts: parallel split, rows, streaming stores, SIMD transposes.

#[derive(Debug)]
struct LargeCase {
    shape: Vec<i64>,
    strides: Vec<i64>,
    elem: usize,
    misalign: usize,
    dst_misalign: usize,
}

fn large_case(u: &mut Unstructured<'_>) -> ArbResult<LargeCase> {
    let max_bytes: usize = if cfg!(debug_assertions) {
        3 << 20
    } else {
        12 << 20
    };
    let elem = pick(u, &[1usize, 2, 4, 8, 16, 3, 12])?;
    let target = u.int_in_range((1usize << 20)..=max_bytes)? / elem;
    let ndim = u.int_in_range(1usize..=3)?;
    let mut dims: Vec<usize> = match ndim {
        1 => vec![target],
        2 => {
            let a = u.int_in_range(1usize..=4000)?;
            vec![a, (target / a).clamp(1, 4000)]
        }
        _ => {
            let b = u.int_in_range(2usize..=6)?;
            let a = u.int_in_range(64usize..=2000)?;
            vec![b, a, (target / (a * b)).clamp(1, 4000)]
        }
    };
    let strides = if chance(u, 1, 5)? {
        let mut s = Vec::with_capacity(ndim);
        for _ in 0..ndim {
            s.push(u.int_in_range(-5i64..=5)?);
        }
        s
    } else {
        structured_strides(u, &dims, 17)?
    };
    // The source spans the extent: keep it under ~4× the output (and 48 MiB).
    loop {
        let shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let (lo, hi) = oracle_extent(&shape, &strides, elem).expect("bounded");
        if ((hi - lo) as usize) <= (4 * max_bytes).min(48 << 20) {
            break;
        }
        let i = (0..dims.len()).max_by_key(|&i| dims[i]).unwrap();
        dims[i] /= 2;
    }
    Ok(LargeCase {
        shape: dims.iter().map(|&d| d as i64).collect(),
        strides,
        elem,
        misalign: u.int_in_range(0usize..=15)?,
        dst_misalign: if chance(u, 1, 2)? {
            0
        } else {
            u.int_in_range(1usize..=7)?
        },
    })
}

#[test]
fn large_layouts() {
    let mut stats = [0u64; 6];
    let mut parallel = 0u64;
    let mut salt = 0u64;
    let run = Target::new("large_layouts")
        .min_iters(6)
        .input_bytes(256)
        .run(|u, desc| {
            let Ok(c) = large_case(u) else { return Ok(()) };
            let p = plan(&c.shape, &c.strides, c.elem);
            *desc = format!("{c:?} plan {p:?}");
            check_pure(&c.shape, &c.strides, ElemSize::Bytes(c.elem), c.elem)?;
            stats[plan_index(p.kind)] += 1;
            parallel += p.parallel as u64;
            let (lo, hi) = oracle_extent(&c.shape, &c.strides, c.elem).expect("bounded");
            salt = salt.wrapping_add(0x3F1);
            let src = Source::new(lo, hi, c.elem, c.misalign, salt);
            copy_and_compare(
                &src,
                &c.shape,
                &c.strides,
                ElemSize::Bytes(c.elem),
                c.dst_misalign,
            )
        });
    println!(
        "large_layouts: Empty {} Memcpy {} Rows {} Transpose2D {} Generic {}, parallel {parallel}",
        stats[0], stats[1], stats[2], stats[3], stats[4]
    );
    if !run.exact || run.iters >= 200 {
        assert!(stats[1..5].iter().sum::<u64>() > 0);
    }
}
