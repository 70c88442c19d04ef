//! Bounded fuzz harness for the producer-tensor validator `dlbind::import::validate_dltensor`
//! (issue 6).
//!
//! `cargo fuzz` needs nightly, so this is a plain `#[test]`: each iteration decodes a
//! `DLTensor` description with `arbitrary::Unstructured` from bytes of a seeded splitmix64
//! stream (see `fuzz_common`), builds the tensor over test-owned `shape`/`strides` arrays (with
//! poison values past `ndim`, so reading too far shows up as a wrong verdict) and compares the
//! validator's verdict with an independent oracle of the contract:
//!
//! - the oracle computes the SET of broken fields (`dtype`, `device`, `ndim`, `shape`,
//!   `strides`, `data`, `byte_offset`) with checked i128 arithmetic (overflow = out of range);
//! - `Ok` ⇔ the set is empty; an error's message starts with `DLTensor.<field>` and that field
//!   is in the set (when several rules are broken any one may be reported); its kind is
//!   `UnsupportedDtype` for `dtype`, `MalformedTensor` for the rest; nothing panics.
//!
//! Inputs are mostly valid tensors with 0-3 fields mutated to edge values (NULL pointers,
//! lying `ndim`, negative / huge dims and strides, addresses near 0 and near `usize::MAX`,
//! offsets that wrap). `data` is never dereferenced: it is an address only. `ndim` above
//! `MAX_NDIM` comes with arrays that are long enough anyway (up to 200 entries) or NULL.
//! The default run (~3 s) must see every field's error and `Ok` at least once.
//!
//! Reproduce / run long (see `fuzz_common` for `DLBIND_FUZZ_SEED`, `DLBIND_FUZZ_START`,
//! `DLBIND_FUZZ_SECS`):
//!
//! ```sh
//! DLBIND_FUZZ_ITERS=2000000 cargo test --release -p dlbind --test fuzz_dltensor -- --nocapture
//! ```

mod fuzz_common;

use std::ffi::c_void;
use std::fmt;
use std::ptr;

use dlbind::copy::ElemSize;
use dlbind::import::{MAX_NDIM, validate_dltensor};
use dlbind::layout::validate_dtype;
use dlbind::spec::errors::FailureKind;
use dlbind::spec::types::{DLDataType, DLDevice, DLDeviceType, DLTensor};
use fuzz_common::{ArbResult, Target, Unstructured, chance, edgy_i64, pick};

const FIELDS: [&str; 7] = [
    "dtype",
    "device",
    "ndim",
    "shape",
    "strides",
    "data",
    "byte_offset",
];

/// Longest shape/strides array the test hands out (`ndim` up to this may be backed by it).
const MAX_ARRAY: usize = 200;
/// Poison past the meaningful entries: a validator reading beyond `ndim` sees a negative dim
/// (and a wild stride) and reports an error the oracle does not expect.
const POISON: [i64; 2] = [-3, i64::MIN];

/// A DLTensor description. `shape`/`strides`: `None` = NULL; otherwise the meaningful values
/// (at least `ndim` of them whenever `0 < ndim <= MAX_ARRAY`).
#[derive(Clone)]
struct Case {
    data: usize,
    device_type: i32,
    device_id: i32,
    ndim: i32,
    dtype: DLDataType,
    shape: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arr = |v: &Option<Vec<i64>>| match v {
            None => "NULL".to_string(),
            Some(v) => format!("{v:?}"),
        };
        write!(
            f,
            "DLTensor {{ data: {:#x}, device: ({}, {}), ndim: {}, dtype: (code {}, bits {}, lanes {}), \
             shape: {}, strides: {}, byte_offset: {:#x} }}",
            self.data,
            self.device_type,
            self.device_id,
            self.ndim,
            self.dtype.code,
            self.dtype.bits,
            self.dtype.lanes,
            arr(&self.shape),
            arr(&self.strides),
            self.byte_offset
        )
    }
}

/// Owns the arrays a `DLTensor` points into.
struct Built {
    tensor: DLTensor,
    _shape: Option<Vec<i64>>,
    _strides: Option<Vec<i64>>,
}

fn padded(v: &Option<Vec<i64>>) -> Option<Vec<i64>> {
    v.as_ref().map(|v| {
        let mut p = v.clone();
        p.extend(POISON.iter().cycle().take(8));
        p
    })
}

impl Case {
    fn build(&self) -> Built {
        // The validator may read `ndim` entries when 0 < ndim <= MAX_NDIM; the generator keeps
        // the arrays at least that long (and never pairs a larger ndim with a short array).
        if (1..=MAX_ARRAY as i64).contains(&(self.ndim as i64)) {
            for v in [&self.shape, &self.strides].into_iter().flatten() {
                assert!(
                    v.len() >= self.ndim as usize,
                    "test bug: array shorter than ndim"
                );
            }
        } else if self.ndim as i64 > MAX_ARRAY as i64 {
            assert!(
                self.shape.is_none() && self.strides.is_none(),
                "test bug: huge ndim with arrays"
            );
        }
        let mut shape = padded(&self.shape);
        let mut strides = padded(&self.strides);
        let tensor = DLTensor {
            data: ptr::without_provenance_mut::<c_void>(self.data),
            device: DLDevice {
                device_type: DLDeviceType(self.device_type),
                device_id: self.device_id,
            },
            ndim: self.ndim,
            dtype: self.dtype,
            shape: shape.as_mut().map_or(ptr::null_mut(), |v| v.as_mut_ptr()),
            strides: strides.as_mut().map_or(ptr::null_mut(), |v| v.as_mut_ptr()),
            byte_offset: self.byte_offset,
        };
        Built {
            tensor,
            _shape: shape,
            _strides: strides,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Oracle.

/// Checked i128 helpers: `None` = the value left i128, which for every rule below means "far
/// out of range" (so the rule is broken).
fn mul(a: i128, b: i128) -> Option<i128> {
    a.checked_mul(b)
}
fn add(a: i128, b: i128) -> Option<i128> {
    a.checked_add(b)
}

/// The set of fields the contract says are broken (empty = valid).
fn oracle(c: &Case) -> Vec<&'static str> {
    let mut broken = Vec::new();
    let bits: Option<i128> = match validate_dtype(c.dtype) {
        Ok(ElemSize::Bytes(b)) => Some(8 * b as i128),
        Ok(ElemSize::SubByte { bits }) => Some(bits as i128),
        Err(_) => {
            broken.push("dtype");
            None
        }
    };
    if DLDeviceType(c.device_type).name().is_none() || c.device_id < 0 {
        broken.push("device");
    }
    if c.ndim < 0 || c.ndim > MAX_NDIM {
        broken.push("ndim");
        return broken; // shape/strides cannot be read
    }
    let ndim = c.ndim as usize;
    let shape: &[i64] = match &c.shape {
        _ if ndim == 0 => &[],
        None => {
            broken.push("shape");
            return broken;
        }
        Some(v) => &v[..ndim],
    };
    if shape.iter().any(|&d| d < 0) {
        broken.push("shape");
        return broken; // no element count
    }
    // Product of the non-zero dims (None: beyond i128).
    let prod = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1i128, |p, &d| mul(p, d as i128));
    if prod.is_none_or(|p| p > i64::MAX as i128) {
        broken.push("shape");
    }
    if shape.contains(&0) {
        return broken; // no elements: data, byte_offset and strides are never looked at
    }
    if c.data == 0 {
        broken.push("data");
    }
    let base = c.data as i128 + c.byte_offset as i128;
    if base > usize::MAX as i128 {
        broken.push("byte_offset");
    }
    let Some(bits) = bits else { return broken };
    match &c.strides {
        None => {
            // C-contiguous byte size ceil(numel·bits/8) must fit in isize.
            let bytes = prod.and_then(|n| add(mul(n, bits)?, 7)).map(|nb| nb / 8);
            if bytes.is_none_or(|b| b > isize::MAX as i128) {
                broken.push("shape");
            } else if let Some(b) = bytes
                && base + b - 1 > usize::MAX as i128
            {
                // Not in the written contract (its wrap rule is for non-NULL strides only), but
                // such a tensor wraps the address space all the same; the implementation
                // reports it under `shape`.
                broken.push("shape");
            }
        }
        Some(v) => {
            let strides = &v[..ndim];
            let (mut lo, mut hi) = (Some(0i128), Some(0i128));
            for (&d, &s) in shape.iter().zip(strides) {
                let reach = (d as i128 - 1) * s as i128; // |.| < 2^126
                if reach < 0 {
                    lo = lo.and_then(|l| add(l, reach));
                } else {
                    hi = hi.and_then(|h| add(h, reach));
                }
            }
            // span = ceil((hi − lo + 1)·bits / 8) <= isize::MAX
            let span = lo
                .zip(hi)
                .and_then(|(l, h)| add(mul(add(h - l, 1)?, bits)?, 7))
                .map(|x| x / 8);
            // low = base + floor(lo·bits/8) >= 0; high = base + ceil((hi+1)·bits/8) − 1 <= usize::MAX
            let low = lo
                .and_then(|l| mul(l, bits))
                .map(|x| base + x.div_euclid(8));
            let high = hi
                .and_then(|h| add(mul(add(h, 1)?, bits)?, 7))
                .map(|x| base + x.div_euclid(8) - 1);
            if span.is_none_or(|s| s > isize::MAX as i128)
                || low.is_none_or(|l| l < 0)
                || high.is_none_or(|h| h > usize::MAX as i128)
            {
                broken.push("strides");
            }
        }
    }
    broken
}

// ---------------------------------------------------------------------------------------------
// Generator: a valid-looking tensor, then 0-3 mutations.

const VALID_DTYPES: [(u8, u8); 20] = [
    (2, 32),
    (2, 64),
    (2, 16),
    (0, 8),
    (0, 16),
    (0, 32),
    (0, 64),
    (1, 8),
    (1, 1),
    (0, 4),
    (1, 2),
    (4, 16),
    (5, 64),
    (5, 128),
    (6, 8),
    (10, 8),
    (12, 8),
    (15, 6),
    (16, 6),
    (17, 4),
];

fn known_device_types() -> Vec<i32> {
    (-2..=40)
        .filter(|&t| DLDeviceType(t).name().is_some())
        .collect()
}

fn gen_dims(u: &mut Unstructured<'_>, n: usize) -> ArbResult<Vec<i64>> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(match u.int_in_range(0u8..=19)? {
            0 => 0,
            1..=4 => 1,
            _ => u.int_in_range(2i64..=6)?,
        });
    }
    Ok(v)
}

fn gen_strides(u: &mut Unstructured<'_>, shape: &[i64]) -> ArbResult<Option<Vec<i64>>> {
    Ok(match u.int_in_range(0u8..=9)? {
        0..=2 => None,
        3..=5 => {
            let mut s = vec![0i64; shape.len()];
            let mut acc = 1i64;
            for i in (0..shape.len()).rev() {
                s[i] = acc;
                acc = acc.saturating_mul(shape[i].max(1));
            }
            Some(s)
        }
        _ => {
            let mut s = Vec::with_capacity(shape.len());
            for _ in 0..shape.len() {
                s.push(u.int_in_range(-20i64..=20)?);
            }
            Some(s)
        }
    })
}

fn base_case(u: &mut Unstructured<'_>, devices: &[i32]) -> ArbResult<Case> {
    let (code, bits) = pick(u, &VALID_DTYPES)?;
    let ndim = match u.int_in_range(0u8..=19)? {
        0 => u.int_in_range(7usize..=MAX_NDIM as usize)?,
        1 | 2 => 0,
        _ => u.int_in_range(1usize..=6)?,
    };
    let shape = gen_dims(u, ndim)?;
    let strides = gen_strides(u, &shape)?;
    let (device_type, device_id) = if chance(u, 2, 3)? {
        (1, 0)
    } else {
        (pick(u, devices)?, u.int_in_range(0i32..=7)?)
    };
    Ok(Case {
        data: (u.int_in_range(1usize..=(1 << 40))? << 6) + (1 << 20),
        device_type,
        device_id,
        ndim: ndim as i32,
        dtype: DLDataType {
            code,
            bits,
            lanes: 1,
        },
        // ndim == 0: sometimes a NULL shape (valid), sometimes an empty array.
        shape: if ndim == 0 && chance(u, 1, 2)? {
            None
        } else {
            Some(shape)
        },
        strides,
        byte_offset: if chance(u, 3, 4)? {
            0
        } else {
            u.int_in_range(0u64..=4096)?
        },
    })
}

/// Keeps the arrays consistent with a new `ndim`: long enough (extended with valid values) for
/// `0..=MAX_ARRAY`, NULL above that, untouched when negative.
fn set_ndim(c: &mut Case, ndim: i32) {
    c.ndim = ndim;
    if ndim as i64 > MAX_ARRAY as i64 {
        c.shape = None;
        c.strides = None;
    } else if ndim > 0 {
        let n = ndim as usize;
        if let Some(v) = &mut c.shape
            && v.len() < n
        {
            v.resize(n, 1);
        }
        if let Some(v) = &mut c.strides
            && v.len() < n
        {
            v.resize(n, 0);
        }
    }
}

fn some_index(u: &mut Unstructured<'_>, c: &Case) -> ArbResult<Option<usize>> {
    let n = c.ndim.clamp(0, MAX_ARRAY as i32) as usize;
    let len = c.shape.as_ref().map_or(0, |v| v.len()).min(n);
    Ok(if len == 0 {
        None
    } else {
        Some(u.int_in_range(0..=len - 1)?)
    })
}

fn mutate(u: &mut Unstructured<'_>, c: &mut Case) -> ArbResult<()> {
    match u.int_in_range(0u8..=6)? {
        0 => {
            // dtype: any code (incl. unknown / opaque), bits and lanes.
            c.dtype = DLDataType {
                code: if chance(u, 4, 5)? {
                    u.int_in_range(0u8..=19)?
                } else {
                    u.arbitrary()?
                },
                bits: pick(
                    u,
                    &[0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32, 64, 128, 255],
                )?,
                lanes: if chance(u, 3, 4)? {
                    1
                } else {
                    pick(u, &[0u16, 2, 4, 16, u16::MAX])?
                },
            };
        }
        1 => {
            if chance(u, 1, 2)? {
                c.device_type = pick(u, &[0, -1, 5, 6, 19, 20, 100, i32::MIN, i32::MAX])?;
                if chance(u, 1, 4)? {
                    c.device_type = u.arbitrary()?;
                }
            } else {
                c.device_id = pick(u, &[-1, -2, i32::MIN, i32::MAX, 0])?;
            }
        }
        2 => {
            let n = match u.int_in_range(0u8..=9)? {
                0 => -1,
                1 => i32::MIN,
                2 => u.int_in_range(i32::MIN..=-1)?,
                3 => MAX_NDIM,
                4 => MAX_NDIM + 1,
                5 => u.int_in_range(MAX_NDIM + 1..=MAX_ARRAY as i32)?,
                6 => i32::MAX,
                7 => u.int_in_range(MAX_ARRAY as i32 + 1..=i32::MAX)?,
                _ => u.int_in_range(0..=MAX_NDIM)?,
            };
            set_ndim(c, n);
        }
        3 => match u.int_in_range(0u8..=5)? {
            0 => c.shape = None,
            1 => {
                if let Some(i) = some_index(u, c)? {
                    let v = pick(u, &[-1i64, -2, i64::MIN, i64::MIN + 1])?;
                    c.shape.as_mut().unwrap()[i] = if chance(u, 1, 3)? {
                        -(edgy_i64(u)?.unsigned_abs().clamp(1, i64::MAX as u64) as i64)
                    } else {
                        v
                    };
                }
            }
            2 => {
                if let Some(i) = some_index(u, c)? {
                    c.shape.as_mut().unwrap()[i] = 0;
                }
            }
            _ => {
                // Big dims: overflowing products, or byte sizes just around isize::MAX.
                for _ in 0..u.int_in_range(1u8..=3)? {
                    if let Some(i) = some_index(u, c)? {
                        let k = u.int_in_range(30u32..=62)?;
                        let d = match u.int_in_range(0u8..=3)? {
                            0 => i64::MAX,
                            1 => (1i64 << k).saturating_add(u.int_in_range(-1i64..=1)?),
                            2 => (i64::MAX / pick(u, &[1i64, 2, 4, 8, 16])?)
                                .saturating_add(u.int_in_range(-1i64..=1)?),
                            _ => edgy_i64(u)?.max(0),
                        };
                        c.shape.as_mut().unwrap()[i] = d;
                    }
                }
            }
        },
        4 => match u.int_in_range(0u8..=3)? {
            0 => c.strides = None,
            1 => {
                // An arbitrary array, at least `ndim` long (never with an ndim above MAX_ARRAY).
                if c.ndim as i64 > MAX_ARRAY as i64 {
                    return Ok(());
                }
                let n = c
                    .shape
                    .as_ref()
                    .map_or(0, |v| v.len())
                    .max(c.ndim.max(0) as usize);
                let mut s = Vec::with_capacity(n);
                for _ in 0..n {
                    s.push(if chance(u, 1, 2)? {
                        u.int_in_range(-30i64..=30)?
                    } else {
                        edgy_i64(u)?
                    });
                }
                c.strides = Some(s);
            }
            _ => {
                if let (Some(i), Some(s)) = (some_index(u, c)?, c.strides.as_mut()) {
                    s[i] = edgy_i64(u)?;
                }
            }
        },
        5 => {
            c.data = match u.int_in_range(0u8..=5)? {
                0 | 1 => 0,
                2 => pick(u, &[1usize, 8, 64, 4096])?,
                3 => usize::MAX - u.int_in_range(0usize..=4096)?,
                4 => usize::MAX / 2 + u.int_in_range(0usize..=4096)?,
                _ => u.arbitrary()?,
            };
        }
        _ => {
            c.byte_offset = match u.int_in_range(0u8..=4)? {
                0 => u64::MAX,
                1 => ((usize::MAX - c.data) as u64).saturating_add(u.int_in_range(0u64..=2)?),
                2 => ((usize::MAX - c.data) as u64).saturating_sub(u.int_in_range(0u64..=4096)?),
                3 => 1 << 63,
                _ => u.arbitrary()?,
            };
        }
    }
    Ok(())
}

fn gen_case(u: &mut Unstructured<'_>, devices: &[i32]) -> ArbResult<Case> {
    let mut c = base_case(u, devices)?;
    let n = match u.int_in_range(0u8..=19)? {
        0..=4 => 0,
        5..=15 => 1,
        16..=18 => 2,
        _ => 3,
    };
    for _ in 0..n {
        mutate(u, &mut c)?;
    }
    Ok(c)
}

// ---------------------------------------------------------------------------------------------
// The property.

/// Outcome counters: `[Ok, dtype, device, ndim, shape, strides, data, byte_offset]`.
type Counts = [u64; 8];

fn check(c: &Case, counts: &mut Counts) -> Result<(), String> {
    let broken = oracle(c);
    let built = c.build();
    // SAFETY: shape/strides are NULL or test-owned arrays with at least `ndim` readable entries
    // whenever 0 < ndim <= MAX_ARRAY (>= MAX_NDIM), NULL for larger ndim (asserted in build);
    // `data` is never dereferenced by the contract.
    let got = unsafe { validate_dltensor(&built.tensor) };
    match got {
        Ok(_extent) => {
            if !broken.is_empty() {
                return Err(format!(
                    "validate_dltensor = Ok, but the oracle says broken: {broken:?}"
                ));
            }
            counts[0] += 1;
        }
        Err(e) => {
            let msg = e.message();
            let Some(rest) = msg.strip_prefix("DLTensor.") else {
                return Err(format!(
                    "error message does not start with `DLTensor.`: {msg:?}"
                ));
            };
            let field = rest.split([':', ' ']).next().unwrap_or("");
            let Some(idx) = FIELDS.iter().position(|f| *f == field) else {
                return Err(format!("unknown field `{field}` in {msg:?}"));
            };
            if !broken.contains(&field) {
                return Err(format!(
                    "reported `{field}` ({msg:?}), oracle says broken: {broken:?}"
                ));
            }
            let want = if field == "dtype" {
                FailureKind::UnsupportedDtype
            } else {
                FailureKind::MalformedTensor
            };
            if e.kind() != want {
                return Err(format!(
                    "kind {:?} for `{field}` ({msg:?}), expected {want:?}",
                    e.kind()
                ));
            }
            counts[1 + idx] += 1;
        }
    }
    Ok(())
}

#[test]
fn validate_dltensor_matches_contract() {
    let devices = known_device_types();
    assert!(
        devices.contains(&1) && !devices.contains(&5),
        "device table: {devices:?}"
    );
    let mut counts: Counts = [0; 8];
    let run = Target::new("validate_dltensor_matches_contract")
        .min_iters(20_000)
        .input_bytes(512)
        .run(|u, desc| {
            let Ok(c) = gen_case(u, &devices) else {
                return Ok(());
            };
            *desc = format!("{c:?} (oracle: {:?})", oracle(&c));
            check(&c, &mut counts)
        });
    let names = ["Ok"].iter().chain(FIELDS.iter());
    let summary: Vec<String> = names.zip(counts).map(|(n, k)| format!("{n} {k}")).collect();
    println!("validate_dltensor outcomes: {}", summary.join(", "));
    if !run.exact || run.iters >= 20_000 {
        assert!(
            counts.iter().all(|&k| k > 0),
            "not every outcome was exercised: {summary:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Fixed cases (found by the fuzzer or at its boundaries).

fn fixed(
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    dtype: (u8, u8),
    data: usize,
    byte_offset: u64,
) -> Case {
    Case {
        data,
        device_type: 1,
        device_id: 0,
        ndim: shape.len() as i32,
        dtype: DLDataType {
            code: dtype.0,
            bits: dtype.1,
            lanes: 1,
        },
        shape: Some(shape),
        strides,
        byte_offset,
    }
}

#[test]
fn fixed_boundaries() {
    let mut counts: Counts = [0; 8];
    let f64_ = (2, 64);
    let f4 = (17, 4);
    let cases = [
        (true, fixed(vec![2, 3], None, f64_, 0x1000, 0)),
        (true, fixed(vec![], None, f64_, 0x1000, 8)),
        // Zero-size: data, byte_offset and strides are not looked at.
        (
            true,
            fixed(
                vec![0, i64::MAX],
                Some(vec![i64::MIN, i64::MAX]),
                f64_,
                0,
                u64::MAX,
            ),
        ),
        (true, fixed(vec![3], Some(vec![-1]), f64_, 64, 0)),
        // The lowest element exactly at address 0 is not below 0.
        (true, fixed(vec![3], Some(vec![-1]), f64_, 8, 8)),
        // 3 × 4 bits = 2 bytes ending exactly at usize::MAX.
        (true, fixed(vec![3], None, f4, usize::MAX - 1, 0)),
        (true, fixed(vec![3], Some(vec![1]), f4, usize::MAX - 1, 0)),
        (false, fixed(vec![3], Some(vec![-1]), f64_, 8, 0)),
        (false, fixed(vec![2], None, f64_, 0, 0)),
        (false, fixed(vec![2], None, f64_, usize::MAX, 1)),
        (false, fixed(vec![3], None, f4, usize::MAX, 0)),
        (false, fixed(vec![3], Some(vec![1]), f4, usize::MAX, 0)),
        (false, fixed(vec![i64::MAX / 8 + 1], None, f64_, 64, 0)),
        (
            false,
            fixed(vec![i64::MAX, 2], Some(vec![0, 0]), f64_, 64, 0),
        ),
        (false, fixed(vec![-1, 0], None, f64_, 64, 0)),
        (
            false,
            fixed(vec![2], Some(vec![i64::MAX / 8 + 1]), f64_, 64, 0),
        ),
    ];
    for (valid, c) in &cases {
        assert_eq!(
            oracle(c).is_empty(),
            *valid,
            "oracle disagrees with the case table: {c:?} {:?}",
            oracle(c)
        );
        if let Err(e) = check(c, &mut counts) {
            panic!("{c:?}: {e}");
        }
    }
}

/// Regression (found by `validate_dltensor_matches_contract`): shape `[2^62]` with stride
/// `2^62` of 8-byte elements spans ~2^130 bits. The validator once computed the span in
/// unchecked i128, so release builds wrapped to a negative span and accepted the tensor, and
/// debug builds panicked. It must be refused as `DLTensor.strides`.
#[test]
fn huge_span_does_not_overflow() {
    let mut counts: Counts = [0; 8];
    for (shape, strides) in [
        (vec![1i64 << 62], vec![1i64 << 62]),
        (vec![1i64 << 62], vec![-(1i64 << 62)]),
        (vec![i64::MAX], vec![i64::MAX]),
        (vec![i64::MAX], vec![i64::MIN]),
        (vec![2, i64::MAX / 2], vec![i64::MIN, i64::MAX]),
    ] {
        let c = fixed(shape, Some(strides), (2, 64), 1 << 40, 0);
        if let Err(e) = check(&c, &mut counts) {
            panic!("{c:?}: {e}");
        }
    }
}
