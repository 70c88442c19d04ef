//! Layout normalisation, planning and dispatch.

use super::kernels;
use super::transpose;
use super::{CopyError, PARALLEL_MIN_BYTES};

/// Which kernel a copy uses (see the module docs of `copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    /// Zero elements (or zero-byte elements): nothing is read or written.
    Empty,
    /// The source is contiguous: one `memcpy` of `bytes`.
    Memcpy { bytes: usize },
    /// The last axis is contiguous: `rows` copies of `row_bytes` each.
    Rows { row_bytes: usize, rows: usize },
    /// Cache-blocked transpose: a `rows × cols` block (`cols` = the destination's last axis,
    /// `rows` = the axis with the smallest source stride), repeated `batches` times over the
    /// other axes. `unit_stride`: the source is unit-stride along `rows` (SIMD micro-kernels
    /// apply for 2/4/8-byte elements).
    Transpose2D {
        rows: usize,
        cols: usize,
        batches: usize,
        elem_bytes: usize,
        unit_stride: bool,
    },
    /// Odometer over the outer axes with a strided inner loop of `elem_bytes`-wide elements.
    /// (`elem_bytes` can be wider than the dtype when a short contiguous row is copied as one
    /// element.)
    Generic { elem_bytes: usize },
    /// Invalid input (mismatched lengths, negative dims, overflow).
    #[cfg_attr(not(any(test, feature = "test-util")), allow(dead_code))]
    Invalid,
}

/// The planner's decision: the kernel and whether it runs on the rayon pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyPlan {
    pub kind: PlanKind,
    pub parallel: bool,
}

/// A validated, normalised layout: no size-1 dims, adjacent mergeable dims merged, byte strides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Norm {
    pub dims: Vec<usize>,
    pub strides: Vec<isize>,
    pub elem: usize,
    /// Total bytes to write (0: nothing to do).
    pub nbytes: usize,
}

/// Validate and normalise. Every offset reachable from element 0 is checked to fit in `isize`.
pub(super) fn normalize(shape: &[i64], strides: &[i64], elem: usize) -> Result<Norm, CopyError> {
    if shape.len() != strides.len() {
        return Err(CopyError::ShapeStrideMismatch);
    }
    let nbytes = super::contiguous_nbytes(shape, super::ElemSize::Bytes(elem))?;
    let mut norm = Norm {
        dims: Vec::with_capacity(shape.len()),
        strides: Vec::with_capacity(shape.len()),
        elem,
        nbytes,
    };
    if nbytes == 0 {
        return Ok(norm);
    }
    // Every byte offset reachable from element 0, both ways, fits in `isize` (the one extent
    // computation, `extent::reach`); the per-dimension byte strides below then do too.
    let r = crate::extent::reach(shape, Some(strides), super::ElemSize::Bytes(elem))
        .map_err(|_| CopyError::Overflow)?;
    if r.below > isize::MIN.unsigned_abs() as u64 || r.above > isize::MAX as u64 {
        return Err(CopyError::Overflow);
    }
    let elem_i = isize::try_from(elem).map_err(|_| CopyError::Overflow)?;
    for (&d, &s) in shape.iter().zip(strides) {
        if d == 1 {
            continue;
        }
        let n = d as usize; // d > 1 (numel > 0 and no negatives)
        let sb = isize::try_from(s)
            .ok()
            .and_then(|s| s.checked_mul(elem_i))
            .ok_or(CopyError::Overflow)?;
        // Merge with the previous dim when it steps exactly over this one.
        if let (Some(&pd), Some(&ps)) = (norm.dims.last(), norm.strides.last())
            && sb.checked_mul(n as isize) == Some(ps)
        {
            let last = norm.dims.len() - 1;
            norm.dims[last] = pd * n; // <= numel, cannot overflow
            norm.strides[last] = sb;
            continue;
        }
        norm.dims.push(n);
        norm.strides.push(sb);
    }
    Ok(norm)
}

/// Execution details behind a [`CopyPlan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Strategy {
    Empty,
    Memcpy {
        bytes: usize,
    },
    /// Outer dims/strides (all but the last axis) and the row length in bytes.
    Rows {
        outer: Vec<usize>,
        outer_strides: Vec<isize>,
        row_bytes: usize,
    },
    /// Outer dims/strides (all but the last axis), the last axis and its stride, element width.
    Generic {
        outer: Vec<usize>,
        outer_strides: Vec<isize>,
        n: usize,
        stride: isize,
        elem: usize,
    },
    Transpose(transpose::Spec),
}

pub(super) fn make_plan(norm: &Norm) -> (CopyPlan, Strategy) {
    let parallel = norm.nbytes >= PARALLEL_MIN_BYTES && rayon::current_num_threads() > 1;
    let (kind, strat) = plan_inner(&norm.dims, &norm.strides, norm.elem, norm.nbytes);
    (
        CopyPlan {
            kind,
            parallel: parallel && kind != PlanKind::Empty,
        },
        strat,
    )
}

fn plan_inner(
    dims: &[usize],
    strides: &[isize],
    elem: usize,
    nbytes: usize,
) -> (PlanKind, Strategy) {
    if nbytes == 0 {
        return (PlanKind::Empty, Strategy::Empty);
    }
    let nd = dims.len();
    if nd == 0 || (nd == 1 && strides[0] == elem as isize) {
        return (
            PlanKind::Memcpy { bytes: nbytes },
            Strategy::Memcpy { bytes: nbytes },
        );
    }
    let last = nd - 1;
    let (n_last, s_last) = (dims[last], strides[last]);
    if nd == 1 && s_last != elem as isize {
        let kind = PlanKind::Generic { elem_bytes: elem };
        return (
            kind,
            Strategy::Generic {
                outer: Vec::new(),
                outer_strides: Vec::new(),
                n: n_last,
                stride: s_last,
                elem,
            },
        );
    }
    let outer = dims[..last].to_vec();
    let outer_strides = strides[..last].to_vec();
    if s_last == elem as isize {
        let row_bytes = n_last * elem;
        if row_bytes <= 16 && row_bytes.is_power_of_two() && row_bytes > elem {
            // Short contiguous rows: copy each row as one wide element.
            return plan_inner(&outer, &outer_strides, row_bytes, nbytes);
        }
        let rows = nbytes / row_bytes;
        return (
            PlanKind::Rows { row_bytes, rows },
            Strategy::Rows {
                outer,
                outer_strides,
                row_bytes,
            },
        );
    }
    // The axis (other than the last) with the smallest non-zero |stride|; innermost wins ties.
    // (Broadcast axes are left to the odometer.)
    let (k, s_k) = strides[..last]
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, s)| **s != 0)
        .min_by_key(|(_, s)| s.unsigned_abs())
        .map(|(i, &s)| (i, s))
        .unwrap_or((0, isize::MAX));
    if s_last != 0 && s_k.unsigned_abs() < s_last.unsigned_abs() && n_last > 1 {
        let spec = transpose::Spec::new(dims, strides, elem, k);
        let kind = PlanKind::Transpose2D {
            rows: dims[k],
            cols: n_last,
            batches: spec.batches(),
            elem_bytes: elem,
            unit_stride: s_k == elem as isize,
        };
        return (kind, Strategy::Transpose(spec));
    }
    (
        PlanKind::Generic { elem_bytes: elem },
        Strategy::Generic {
            outer,
            outer_strides,
            n: n_last,
            stride: s_last,
            elem,
        },
    )
}

/// Run a normalised copy.
///
/// # Safety
/// `norm` came from [`normalize`] for the caller's shape/strides; every element reachable from
/// `src` is readable; `dst` is writable for `norm.nbytes` bytes; no overlap.
pub(super) unsafe fn execute(norm: &Norm, src: *const u8, dst: *mut u8) {
    let (plan, strat) = make_plan(norm);
    let par = plan.parallel;
    // SAFETY: (all arms) the strategy's offsets were validated by `normalize` and enumerate
    // exactly the source elements / the `nbytes` destination bytes; caller contract for the rest.
    unsafe {
        match strat {
            Strategy::Empty => {}
            Strategy::Memcpy { bytes } => kernels::memcpy_parallel(src, dst, bytes),
            Strategy::Rows {
                outer,
                outer_strides,
                row_bytes,
            } => kernels::rows(src, dst, &outer, &outer_strides, row_bytes, par),
            Strategy::Generic {
                outer,
                outer_strides,
                n,
                stride,
                elem,
            } => kernels::generic(src, dst, &outer, &outer_strides, n, stride, elem, par),
            Strategy::Transpose(spec) => transpose::run(&spec, src, dst, par),
        }
    }
}
