//! `#[derive(DLPackExport)]`: zero-copy DLPack export for `#[pyclass]` array types.
//!
//! A thin proc-macro crate: [`attr`] parses `#[dlpack(...)]` with syn, [`model`] validates the
//! struct into a small model (against the spec's dtype table, read through `dlbind-codegen`),
//! and [`expand`] turns the model into code with quote. Use it through `dlbind`, which re-exports
//! it (`use dlbind::prelude::*;`): the expansion refers to `::dlbind::…` paths.
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
//! ```
//!
//! Keys: on fields `data`, `array`, `shape`, `strides`, `dtype`, `device`, `readonly`;
//! on the struct `dtype = "<spec dtype name>"` and `readonly`.

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

mod attr;
mod expand;
mod model;
mod spec;
mod spec_source;

/// Derives `dlbind::export::DLPackSource` and a `#[pymethods]` block with `__dlpack__` and
/// `__dlpack_device__` (names and keyword names from the DLPack spec). See the crate docs.
#[proc_macro_derive(DLPackExport, attributes(dlpack))]
pub fn derive_dlpack_export(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
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
