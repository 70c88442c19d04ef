//! # dlbind — DLPack for Rust/PyO3
//!
//! Zero-copy export (`#[derive(DLPackExport)]` → `__dlpack__`, `__dlpack_device__`, the C
//! exchange table, the older array protocols) and import ([`from_dlpack`] → [`ImportedTensor`],
//! or straight into your own type with [`FromDLPack`] + [`add_from_dlpack`]) of DLPack 1.3
//! tensors. Every protocol constant, capsule name, keyword name, stream rule and exception
//! choice comes from the code generated from `spec/dlpack.yaml` ([`spec`]).
//!
//! ```ignore
//! use dlbind::prelude::*;
//! #[pyclass(frozen)]
//! #[derive(DLPackExport)]
//! struct Image {
//!     #[dlpack(data)] pixels: Vec<u8>,
//!     #[dlpack(shape)] dims: Vec<usize>,
//! }
//!
//! #[dlbind::pymethods] // in place of #[pymethods]: the derived methods go here too
//! impl Image {}
//! ```
//!
//! ## Public modules
//! | module | for |
//! |---|---|
//! | [`prelude`] | `use dlbind::prelude::*;`: the derive, the traits, the common types, PyO3's prelude |
//! | [`spec`] | the generated, read-only tables: ABI types, dtypes, element types, stream rules, errors, protocol names |
//! | [`layout`] | C strides, contiguity, byte spans, element sizes, the strided host copy |
//! | [`gpu`] | GPU memory ([`gpu::zeros`]), stream handles, the driver check; CUDA through `cudarc` with feature `cuda` |
//! | [`tuning`] | three performance knobs, each with a fast default: a type's free-list size, the copy pool's limit, the same-type shortcut |
//! | [`stats`] | process-wide counters: live exports, borrows, spare blocks, imports by path |
//!
//! ## How the crate reads (private modules)
//! * **Producer** (`export/`): the traits a type implements (`DLPackSource`, `DataSource`),
//!   negotiation (`request`: an `ExportRequest` → an `ExportPlan`), the managed tensor (`block`,
//!   `fill`, `capsule`, `device`), and the `__dlpack__` / `__dlpack_device__` methods (`method`).
//! * **Consumer** (`import/`): [`ImportedTensor`] (`tensor`, `validate`, `nd`), the import order
//!   written once (`order`: same type → numpy header → exchange table → `__dlpack__` → bridges),
//!   and the typed entry point (`typed`: [`FromDLPack`], [`add_from_dlpack`]).
//! * **Leaves** the pipelines call, which import neither pipeline's entry points: `bridges`
//!   (`__array_interface__`, CUDA/SYCL interfaces, the buffer protocol, numpy's header),
//!   `exchange` (the C exchange table, both directions), [`gpu`] (device plans and runtimes).
//! * **Base**: [`spec`], [`layout`], `copy` (kernels), `alloc`, `dtype`, `error`, `device`,
//!   `storage` ([`Buffer`]), `writability` ([`Writability`]), `args` (Python argument parsing)
//!   and `cpython` (every CPython internal: private symbols, interpreter state, C boundary,
//!   interned names, GC, free lists).
//!
//! The derive's expansion names only `dlbind::__private`.
#![deny(unsafe_op_in_unsafe_fn)]
// docs.rs (and scripts/docsrs.sh) document with `--cfg docsrs` on nightly: `doc_cfg` marks each
// item gated on a feature with it ("Available on crate feature `arrow` only"; decision 0026).
#![cfg_attr(docsrs, feature(doc_cfg))]
// `test-util` is not a user's feature: without it, the internal modules whose items the crate
// re-exports (`Buffer`, `Dims`, `from_dlpack`, ...) are private and cfg'd on
// `not(feature = "test-util")`, which is no condition of the items themselves (decision 0026).
#![cfg_attr(docsrs, doc(auto_cfg(hide(feature = "test-util"))))]
#![warn(missing_debug_implementations)]

// What dlbind supports, said at the top instead of as errors deep inside it (the supported and
// tested interpreters: docs/manual/interpreters.md).
#[cfg(PyPy)]
compile_error!(
    "dlbind supports CPython only: PyPy is not supported (dlbind's capsule, type-slot and \
     vectorcall paths are CPython's; build against CPython 3.11 or newer)"
);
#[cfg(GraalPy)]
compile_error!("dlbind supports CPython only: GraalPy is not supported");
#[cfg(all(not(PyPy), not(GraalPy), not(Py_3_11)))]
compile_error!(
    "dlbind needs CPython 3.11 or newer (or an abi3 build with pyo3/abi3-py311 or later): \
     its small-int, vectorcall and type-slot paths rely on 3.11's C API"
);
// Windows (decision 0019): a full-API build links CPython's private functions from the
// interpreter's DLL by name (`raw-dylib`, as PyO3 does), so the build script must know that
// DLL's name; an abi3 build links nothing of it (python3.dll only).
#[cfg(all(windows, not(Py_LIMITED_API), not(dlbind_python_dll)))]
compile_error!(
    "dlbind on Windows: the interpreter's DLL name in PyO3's configuration (`lib_name`) is not \
     one dlbind knows (python311 to python315, `_d` and `t` variants); a full-API build links \
     CPython's private functions from it"
);

pub mod adapters;
mod extent;
pub mod gpu;
pub mod layout;
pub mod prelude;
pub mod spec;
pub mod stats;
pub mod tuning;

/// Declares the internal modules: private, and public under the `test-util` feature, for
/// dlbind's own integration tests only (hidden from the docs, not covered by semver).
macro_rules! internal_modules {
    ($($m:ident),* $(,)?) => {$(
        #[cfg(feature = "test-util")]
        #[doc(hidden)]
        pub mod $m;
        #[cfg(not(feature = "test-util"))]
        mod $m;
    )*};
}

internal_modules!(
    alloc,
    args,
    bridges,
    copy,
    cpython,
    device,
    dims,
    dtype,
    error,
    exchange,
    export,
    import,
    storage,
    writability,
);

/// The generated ABI types under the name the generated code uses (`crate::ffi::…`).
pub(crate) use spec::types as ffi;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use dlbind_macros::{DLPackExport, FromDLPack, pymethods};

pub use bridges::{PythonView, numpy_view};
pub use device::Device;
pub use dims::Dims;
pub use error::DlpackError;
pub use export::{DLPackSource, DataSource, UncheckedExtent};
pub use extent::Extent;
pub use import::{FromDLPack, ImportedTensor, Slot, Written, add_from_dlpack, from_dlpack};
pub use spec::elements::DLPackElement;
pub use storage::Buffer;
pub use writability::Writability;
