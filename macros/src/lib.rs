//! `#[derive(DLPackExport)]`: zero-copy DLPack export for `#[pyclass]` array types (frozen or
//! not).
//!
//! A thin proc-macro crate: `attr` parses `#[dlpack(...)]` with syn, `model` validates the
//! struct into a small model (against the spec's dtype table, read from the generated table
//! `src/generated/derive_table.rs` by `spec_source`), and `expand` turns the model into code with quote. Use it through `dlbind`,
//! which re-exports it (`use dlbind::prelude::*;`): the expansion names only `::dlbind::__private::…` (serde's `_serde::__private` pattern).
//!
//! ```ignore
//! use dlbind::prelude::*;
//!
//! #[pyclass(frozen)]
//! #[derive(DLPackExport)]
//! struct Image {
//!     #[dlpack(data)]    pixels: Vec<u8>,
//!     #[dlpack(shape)]   dims: Vec<usize>,
//!     #[dlpack(strides)] strides: Vec<isize>,   // optional, in elements
//! }
//!
//! #[dlbind::pymethods]   // in place of #[pymethods]; the derived methods are merged into it
//! impl Image {}
//! ```
//!
//! Every derived class has exactly one block marked [`#[dlbind::pymethods]`](macro@pymethods)
//! (empty when it has no methods of its own): the derive emits no `#[pymethods]` block of its
//! own, so a class's own methods never collide with the derive's (decision 0025). A class whose
//! block is a plain `#[pymethods]`, or that has none, fails to compile with dlbind's message
//! saying which to write.
//!
//! | key | where | field type | meaning |
//! |---|---|---|---|
//! | `data` | field | `Vec<T>`, `Box<[T]>`, `Arc<[T]>` (`T: DLPackElement`), or any `dlbind::DataSource` (e.g. `dlbind::Buffer`) | element 0; dtype from the `T` the field holds unless given |
//! | `array` | field | owned `ndarray` array (`ArrayD<T>`, `Array<T, D>`, `Array1<T>`…) | data, shape, strides and dtype, always the element type's (runtime feature `ndarray`) |
//! | `shape` | field | `Vec<I>`, `Box<[I]>`, `[I; N]` (any integer `I`) or a type that derefs to `[I]` | required unless `array` |
//! | `strides` | field | as `shape`, in elements | optional; absent = C-contiguous |
//! | `dtype` | field | `dlbind::spec::types::DLDataType` | dynamic dtype |
//! | `dtype = "bfloat16"` | struct | — | a dtype name from the spec's table (raw storage) |
//! | `device` | field | `dlbind::Device` | default CPU |
//! | `readonly` | field (`bool`, or `dlbind::Writability` for data of unknown writability) or struct | — | narrows the storage's writability (`Vec`/`Box`/`Arc`/ndarray: read-only; `Buffer`: its own) |
//! | `stream` | field | `Option<u64>` | CUDA/ROCm stream with pending work on the data (default: the device's default stream) |
//! | `custom_traverse` | struct | — | the type writes `__traverse__` itself (see below) |
//! | `unchecked_extent` | struct | — | exports skip the span check (not the dtype's); needs `unsafe impl dlbind::UncheckedExtent` (see below) |
//! | `merge_pymethods` | struct | — | deprecated, no effect (a warning): what every derive does now, merging into the `#[dlbind::pymethods]` block |
//!
//! For a `DataSource` data field the derive also emits `__traverse__`, reporting the Python
//! objects the storage keeps alive (`DataSource::visit_python_refs`: a `Buffer` view's owner, a
//! bridge import's exporter, a dlbind export's owner), so that reference cycles through them are
//! collected. A type with Python fields of its own opts out with `#[dlpack(custom_traverse)]`
//! and calls `visit_python_refs` on its data field from its own `__traverse__`.
//!
//! The type must be a `#[pyclass]` (a compile error otherwise). Exports (capsules, memoryviews,
//! `__array_interface__` arrays, the exchange table's tensors) keep pointers into the data field
//! for as long as the consumer holds them, so nothing may reallocate it meanwhile:
//! * `#[pyclass(frozen)]` is the zero-cost path: only `&self` exists, an export keeps the object
//!   alive and nothing more. Element writes go through interior mutability.
//! * A plain `#[pyclass]` (with `&mut self` methods and setters) works too: every export holds a
//!   shared borrow of the object until the consumer releases it (a hidden guard object is the
//!   export's owner instead of the object), so a `&mut self` call raises PyO3's borrow error
//!   (`RuntimeError: Already borrowed`) while any export lives and works again afterwards — as
//!   numpy refuses to `resize` an array that is referenced. A `copy=True` export owns its copy
//!   and holds no borrow. What cannot hold a borrow is left out for such a class: the exchange
//!   table's non-owning `dltensor_from_py_object_no_sync` is NULL, and
//!   `__cuda_array_interface__` / `__sycl_usm_array_interface__` raise AttributeError (their
//!   consumers keep only the object), so consumers use `__dlpack__`. Each export costs one small
//!   guard object more than for a frozen class.
//!
//! Every export checks the dtype, that the shape and strides stay inside the extent the data
//! field's storage vouches for (`DataSource::extent`) and that a device field is the storage's
//! device (a frozen class whose data field is a `Buffer`, beside `Dims`, `Vec`, `Box<[_]>`,
//! `Arc<[_]>` or array shape and strides, checks once per instance: `__dlpack__` remembers a
//! pass in the instance's `Buffer`, decision 0022); a type whose constructors guarantee the
//! layout may skip the span check with `#[dlpack(unchecked_extent)]` plus `unsafe impl
//! dlbind::UncheckedExtent` (the attribute tells the derive, the unsafe impl is the promise;
//! either alone is a compile error).
//!
//! Every fact comes from a type (the data field's storage and elements, PyO3's `Frozen`, the
//! dims fields' `[..]`), never from how a type is spelled, and the expansion is hygienic: every
//! path absolute, every call a path, so nothing in the user's scope (a trait with `len`, an alias
//! `Vec`, a local `None`) changes its meaning (decision 0023, `dlbind_demo.hygiene`).
//!
//! Misuse is a compile error pointing at the offending span; see `tests/ui/cases/`.
//! The emitted `__dlpack__` takes its method and keyword names from the generated table, so
//! editing the spec, running `dlbind generate` and rebuilding changes them.
//!
//! The C exchange API (DLPack 1.3): every derived type also gets
//! `type(x).__dlpack_c_exchange_api__` (name from the spec), a `"dlpack_exchange_api"`
//! capsule pointing at a static `DLPackExchangeAPI` (see `dlbind::exchange`). Its allocator and
//! `to_py_object` entries build the type through `dlbind::FromDLPack` when the
//! type implements it (detected by autoref specialization, no attribute needed: the impl comes
//! from another derive or the user's hand, which this derive cannot see; otherwise they set a
//! `TypeError`); the non-owning `dltensor_from_py_object_no_sync` entry is present when the
//! class is frozen and its shape and strides fields hold `i64` (`field[..]` is a `[i64]`:
//! `Vec<i64>`, `Dims`, `[i64; N]`, `Box<[i64]>`, …), NULL otherwise. Whether the class is frozen
//! comes from PyO3's own `PyClass::Frozen`.
//!
//! Adding an emitted item (e.g. the buffer-protocol bridges) means one more function in
//! `expand.rs` fed by the same `model::Model`.

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

mod attr;
mod expand;
mod import;
mod merge;
mod model;
mod spec;
mod spec_source;

/// Derives `dlbind::DLPackSource` and the Python methods `__dlpack__` and `__dlpack_device__`
/// (names and keyword names from the DLPack spec), the exchange table attribute, the older array
/// protocols and `__traverse__`, for a `#[pyclass]` struct (`frozen` for borrow-free exports).
/// The methods go into the type's one block marked [`#[dlbind::pymethods]`](macro@pymethods)
/// (`#[dlbind::pymethods] impl Type {}` when it has no methods of its own); without one, or with
/// a plain `#[pymethods]` block instead, the type does not compile and the error says which to
/// write. See the crate docs.
#[proc_macro_derive(DLPackExport, attributes(dlpack))]
pub fn derive_dlpack_export(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Derives `dlbind::FromDLPack` for a `#[dlpack(...)]` struct whose data field is a
/// `dlbind::Buffer`: the value built from any import, zero-copy, with every fast path the
/// runtime offers (in place into a free-list instance, from numpy's header, as a view of an
/// object of the same frozen type). Fields without a role get `Default::default()`.
#[proc_macro_derive(FromDLPack, attributes(dlpack))]
pub fn derive_from_dlpack(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    derive_import(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn derive_import(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let spec = spec::get().map_err(|e| {
        syn::Error::new(
            proc_macro2::Span::call_site(),
            format!("dlbind-macros: cannot load the DLPack spec: {e}"),
        )
    })?;
    let model = model::Model::from_derive_input(input, spec)?;
    import::expand(input, &model)
}

fn derive(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let spec = spec::get().map_err(|e| {
        syn::Error::new(
            proc_macro2::Span::call_site(),
            format!("dlbind-macros: cannot load the DLPack spec: {e}"),
        )
    })?;
    let model = model::Model::from_derive_input(input, spec)?;
    expand::expand(&model, spec)
}

/// Put on a `#[derive(DLPackExport)]` type's one `#[pymethods]` block in place of
/// `#[pymethods]`: the derive's methods (`__dlpack__`, `__dlpack_device__`, the exchange table
/// attribute, the buffer protocol, the array interfaces, `__traverse__`) are merged into this
/// block, so the crate needs no PyO3 `multiple-pymethods`. Every derived type has exactly one
/// such block; a type with no methods of its own writes an empty one.
///
/// ```ignore
/// #[pyclass(frozen)]
/// #[derive(DLPackExport)]
/// struct Samples { /* ... */ }
///
/// #[dlbind::pymethods]
/// impl Samples {
///     #[new]
///     fn new(n: usize) -> Self { /* ... */ }
/// }
///
/// #[pyclass(frozen)]
/// #[derive(DLPackExport)]
/// struct Frame { /* ... */ }
///
/// #[dlbind::pymethods]
/// impl Frame {}
/// ```
///
/// The block is handed, items and attributes as written, to the `macro_rules!` the derive emits
/// beside the type (`__dlbind_pymethods_<Type>`, found through the block's self type path), which
/// writes one `#[pyo3::pymethods]` block with both sets of items. A crate whose `pyo3` enables
/// `multiple-pymethods` may add further plain `#[pymethods]` blocks beside this one.
#[proc_macro_attribute]
pub fn pymethods(attr: TokenStream, item: TokenStream) -> TokenStream {
    merge::pymethods(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// What `__dlbind_pymethods_<Type>` (emitted by every `#[derive(DLPackExport)]`)
/// expands to: the merged `#[pymethods]` block. Named only through `dlbind::__private`.
#[doc(hidden)]
#[proc_macro]
pub fn __merge_pymethods(input: TokenStream) -> TokenStream {
    merge::merged_block(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
