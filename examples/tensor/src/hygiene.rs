// `dlbind_demo.hygiene` (issue 50): every form of both derives, expanded inside a module that
// shadows what an unhygienic expansion would name, as serde tests its derive under a shadowed
// prelude. The module defines traits whose methods are named like the calls an expansion could
// make (`len`, `as_ptr`, `as_slice`, `into`, `clone`, `deref`, `map`, `narrow`, `dtype`, ...),
// each answering wrongly, for `Dims`, slices, arrays, `Vec`, `Box`, `Arc` and dlbind's own types;
// aliases named `Vec`, `Option`, `Result`, `Box`, `Array1`, `Array` and `f32` that name other
// types; and local `Ok`, `Some` and `None`. Each type below either exports exactly what its
// storage holds (tests/python/test_hygiene.py reads every one through numpy, the buffer
// protocol and the array interface, and imports it back), or would not compile.
//
// This file is compiled twice: here, in the demo, and as the trybuild pass case
// tests/ui/cases/pass_hygiene.rs, which `include!`s it (no inner attributes, no `crate::`
// paths for that reason).

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    unused_imports,
    clippy::all
)]
pub mod shadowed {
    use dlbind::adapters::ndarray::ndarray;
    use dlbind::prelude::*;
    use pyo3::types::PyModule;

    // ---------------------------------------------------------------- aliases and values

    /// Element types named like others: a field spelled `Vec<f32>` here holds `f64`s in a
    /// boxed slice.
    pub type f32 = f64;
    pub type Vec<T> = std::boxed::Box<[T]>;
    pub type Box<T> = std::sync::Arc<T>;
    pub type Option<T> = core::result::Result<T, ()>;
    pub type Result<T, E = ()> = core::option::Option<(T, E)>;
    pub type Array1<T> = ndarray::Array2<T>;
    pub type Array<A, D> = ndarray::ArcArray<A, D>;

    pub const None: u8 = 0;
    pub fn Some<T>(_: T) -> u8 {
        1
    }
    pub fn Ok<T>(_: T) -> u8 {
        2
    }

    // ---------------------------------------------------------------- traits answering wrongly

    /// A rank of 3 for every container (the derive's rank is the length of `&field[..]`).
    pub trait Len {
        fn len(&self) -> usize {
            3
        }
    }
    /// A null element 0.
    pub trait AsPtr {
        fn as_ptr(&self) -> *const u8 {
            std::ptr::null()
        }
    }
    /// No values at all.
    pub trait AsSlice {
        fn as_slice(&self) -> &'static [i64] {
            &[]
        }
    }
    /// The prelude's `Into` and `Clone`, and a `Deref`, of the same names, answering wrongly.
    pub trait Into<T> {
        fn into(self) -> T;
    }
    pub trait Clone {
        fn clone(&self) -> Dims {
            Dims::from(&[1i64 << 40][..])
        }
    }
    pub trait Deref {
        fn deref(&self) -> &'static [i64] {
            &[1 << 40]
        }
    }
    /// Each of them for `Dims`, slices, arrays, `Vec`, `Box` and `Arc`.
    macro_rules! shadow {
        ($($t:ty $(, $g:ident)? $(; const $n:ident)?);* $(;)?) => {$(
            impl<$($g,)? $(const $n: usize)?> Len for $t {}
            impl<$($g,)? $(const $n: usize)?> AsPtr for $t {}
            impl<$($g,)? $(const $n: usize)?> AsSlice for $t {}
            impl<$($g,)? $(const $n: usize)?> Clone for $t {}
            impl<$($g,)? $(const $n: usize)?> Deref for $t {}
            impl<$($g,)? $(const $n: usize)?> Into<i64> for &$t {
                fn into(self) -> i64 {
                    -1
                }
            }
        )*};
    }
    shadow! {
        Dims;
        [T], T;
        [T; N], T; const N;
        std::vec::Vec<T>, T;
        std::boxed::Box<[T]>, T;
        std::sync::Arc<[T]>, T;
    }

    /// dlbind's own types, by value (the first step of a method lookup).
    pub trait Facts: Sized {
        fn dtype(self) -> DLDataType {
            DLDataType {
                code: 2,
                bits: 64,
                lanes: 1,
            }
        }
        fn device(self) -> Device {
            Device::cuda(7)
        }
        fn writability(self) -> Writability {
            Writability::Writable
        }
        fn readonly(self) -> bool {
            false
        }
    }
    impl Facts for &dlbind::ImportedTensor {}
    impl Facts for &Buffer {}
    pub trait Widen {
        fn narrow(self, _: Writability) -> Writability;
        fn is_writable(self) -> bool;
    }
    impl Widen for &Writability {
        fn narrow(self, _: Writability) -> Writability {
            Writability::Writable
        }
        fn is_writable(self) -> bool {
            true
        }
    }
    pub trait Owns {
        fn owns_nothing(self) -> bool;
    }
    impl Owns for &Buffer {
        fn owns_nothing(self) -> bool {
            true
        }
    }
    pub trait Stream {
        fn map<F>(self, f: F) -> core::option::Option<u64>;
    }
    impl Stream for &core::option::Option<u64> {
        fn map<F>(self, _: F) -> core::option::Option<u64> {
            core::option::Option::Some(0xdead)
        }
    }

    // ---------------------------------------------------------------- every derive form

    /// The README's `Samples` (plain class, a `Vec` data field, an array shape), spelled with
    /// the aliases: the field holds `f64`s in a boxed slice, and that is what it exports.
    #[pyclass(module = "dlbind_demo.hygiene")]
    #[derive(DLPackExport)]
    pub struct Samples {
        #[dlpack(data)]
        values: Vec<f32>,
        #[dlpack(shape)]
        len: [usize; 1],
    }

    #[dlbind::pymethods]
    impl Samples {
        /// `n` values `0.5, 1.5, ...` (stored as `f64`: the alias `f32` is `f64`).
        #[new]
        fn new(n: usize) -> Samples {
            let values: Vec<f32> = (0..n).map(|i| i as f64 + 0.5).collect();
            Samples { values, len: [n] }
        }
    }

    /// The README's `Frame` (frozen, both derives, every field role) with `Dims`, whose every
    /// method the traits above answer wrongly.
    #[pyclass(frozen, module = "dlbind_demo.hygiene")]
    #[derive(DLPackExport, FromDLPack)]
    pub struct Frame {
        #[dlpack(data)]
        buf: Buffer,
        #[dlpack(dtype)]
        dtype: DLDataType,
        #[dlpack(shape)]
        shape: Dims,
        #[dlpack(strides)]
        strides: Dims,
        #[dlpack(device)]
        device: Device,
        #[dlpack(readonly)]
        readonly: bool,
    }

    #[dlbind::pymethods]
    impl Frame {}

    /// A plain class with both derives, a fixed dtype, a boxed-slice shape and a stream field
    /// (spelled in full: the alias `Option` is a `Result`).
    #[pyclass(module = "dlbind_demo.hygiene")]
    #[derive(DLPackExport, FromDLPack)]
    #[dlpack(dtype = "int32")]
    pub struct Plain {
        #[dlpack(data)]
        buf: Buffer,
        #[dlpack(shape)]
        shape: std::boxed::Box<[usize]>,
        #[dlpack(stream)]
        stream: core::option::Option<u64>,
    }

    #[dlbind::pymethods]
    impl Plain {}

    /// A frozen class over an `Arc<[i64]>` (spelled `Box<[i64]>`: the alias `Box` is `Arc`),
    /// a shape in an `Arc<[u32]>`, strides in a `Vec` (spelled in full), read-only always.
    #[pyclass(frozen, module = "dlbind_demo.hygiene")]
    #[derive(DLPackExport)]
    #[dlpack(readonly)]
    pub struct Shared {
        #[dlpack(data)]
        values: Box<[i64]>,
        #[dlpack(shape)]
        shape: Box<[u32]>,
        #[dlpack(strides)]
        strides: std::vec::Vec<i64>,
    }

    #[dlbind::pymethods]
    impl Shared {}

    /// An ndarray field spelled `Array1<f32>`: a 2-d array of `f64`.
    #[pyclass(frozen, module = "dlbind_demo.hygiene")]
    #[derive(DLPackExport)]
    pub struct Grid {
        #[dlpack(array)]
        a: Array1<f32>,
    }

    #[dlbind::pymethods]
    impl Grid {}

    /// A shared ndarray array spelled `Array<u8, Ix1>` (an `ArcArray`).
    #[pyclass(frozen, module = "dlbind_demo.hygiene")]
    #[derive(DLPackExport)]
    pub struct Bytes {
        #[dlpack(array)]
        a: Array<u8, ndarray::Ix1>,
    }

    #[dlbind::pymethods]
    impl Bytes {}

    /// `unchecked_extent` with its `unsafe impl`, and a `Writability` readonly field.
    #[pyclass(frozen, module = "dlbind_demo.hygiene")]
    #[derive(DLPackExport)]
    #[dlpack(unchecked_extent, dtype = "uint16")]
    pub struct Vouched {
        #[dlpack(data)]
        buf: Buffer,
        #[dlpack(shape)]
        shape: [i64; 2],
        #[dlpack(readonly)]
        readonly: Writability,
    }

    #[dlbind::pymethods]
    impl Vouched {}

    // SAFETY: `vouched` below is the only constructor: 6 `u16`s and shape [2, 3].
    unsafe impl dlbind::UncheckedExtent for Vouched {}

    /// A 2×3 `float32` `Frame` over a writable `Buffer`, values `0..6`, transposed (strides
    /// `[1, 3]`: shape `[3, 2]`).
    #[pyfunction]
    pub fn frame() -> Frame {
        let v: std::vec::Vec<core::primitive::f32> =
            (0..6).map(|i| i as core::primitive::f32).collect();
        Frame {
            buf: Buffer::from_vec(v),
            dtype: <core::primitive::f32 as dlbind::DLPackElement>::DTYPE,
            shape: Dims::from(&[3i64, 2][..]),
            strides: Dims::from(&[1i64, 3][..]),
            device: Device::CPU,
            readonly: false,
        }
    }

    /// Four `int32`s `[10, 20, 30, 40]`, stream `None`.
    #[pyfunction]
    pub fn plain() -> Plain {
        Plain {
            buf: Buffer::from_vec(std::vec![10i32, 20, 30, 40]),
            shape: std::boxed::Box::new([4]),
            stream: core::option::Option::None,
        }
    }

    /// `[0, 1, 2, 3, 4, 5]` as `i64`, every other one (shape `[3]`, strides `[2]`).
    #[pyfunction]
    pub fn shared() -> Shared {
        Shared {
            values: std::sync::Arc::from(std::vec![0i64, 1, 2, 3, 4, 5]),
            shape: std::sync::Arc::from(std::vec![3u32]),
            strides: std::vec![2],
        }
    }

    /// A 2×3 grid of `f64`, values `0..6`.
    #[pyfunction]
    pub fn grid() -> Grid {
        let a = ndarray::Array2::from_shape_fn((2, 3), |(i, j)| (3 * i + j) as f64);
        Grid { a }
    }

    /// Five bytes `1..=5` in an `ArcArray`.
    #[pyfunction]
    pub fn bytes() -> Bytes {
        let a: Array<u8, ndarray::Ix1> = ndarray::ArcArray::from_vec(std::vec![1u8, 2, 3, 4, 5]);
        Bytes { a }
    }

    /// 2×3 `uint16`s `0..6`, writable.
    #[pyfunction]
    pub fn vouched() -> Vouched {
        Vouched {
            buf: Buffer::from_vec((0u16..6).collect::<std::vec::Vec<u16>>()),
            shape: [2, 3],
            readonly: Writability::Writable,
        }
    }

    /// `dlbind_demo.hygiene`.
    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_class::<Samples>()?;
        m.add_class::<Frame>()?;
        m.add_class::<Plain>()?;
        m.add_class::<Shared>()?;
        m.add_class::<Grid>()?;
        m.add_class::<Bytes>()?;
        m.add_class::<Vouched>()?;
        dlbind::add_from_dlpack::<Plain>(m)?;
        dlbind::add_from_dlpack::<Frame>(m)?;
        for f in [
            wrap_pyfunction!(frame, m)?,
            wrap_pyfunction!(plain, m)?,
            wrap_pyfunction!(shared, m)?,
            wrap_pyfunction!(grid, m)?,
            wrap_pyfunction!(bytes, m)?,
            wrap_pyfunction!(vouched, m)?,
        ] {
            m.add_function(f)?;
        }
        core::result::Result::Ok(())
    }
}
