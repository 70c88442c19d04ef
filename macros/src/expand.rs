//! Code generation from a validated [`Model`].
//!
//! Each emitted item has its own function so that later items (issue 5: the C exchange API
//! capsule `__dlpack_c_exchange_api__`, the buffer protocol and `__array_interface__` bridges)
//! are one more function and one more line in [`expand`].

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::Ident;

use crate::model::{DataKind, DtypeSource, FieldRef, Model, Readonly};
use crate::spec::SpecView;

pub fn expand(model: &Model, spec: &SpecView) -> syn::Result<TokenStream> {
    let assert = assert_pyclass(model);
    let source = source_impl(model);
    let methods = pymethods(spec)?;
    let exchange = exchange_impl(model);
    let exchange_attr = exchange_api_attr(spec)?;
    let bridges = bridges();
    let traverse = gc_traverse(model);
    let block = methods_block(model, quote! { #methods #exchange_attr #bridges #traverse });
    Ok(quote! {
        #assert
        #source
        #exchange
        #block
    })
}

/// Every Python method the derive adds goes into the type's one block marked
/// `#[dlbind::pymethods]` (in place of `#[pymethods]`), so that a type needs no PyO3
/// `multiple-pymethods` (nor the `inventory` it pulls in) unless its crate asks for it, and a
/// class's own methods never collide with a block of the derive's (decision 0025: PyO3 collects
/// one `PyMethods<T>` impl per class, a derive cannot see the user's blocks, and PyO3 refuses a
/// macro call inside a block, so the derive emits no block of its own).
///
/// Emitted here: a `macro_rules!` beside the type (`__dlbind_pymethods_<Type>`, re-exported with
/// `pub(crate) use` so that a block in another module finds it by the type's path), which the
/// attribute invokes with the block's attributes and items and which writes the one
/// `#[pyo3::pymethods]` block with both sets; and an assertion that the attribute ran (its
/// `MergedPyMethods` impl), so a class whose block is a plain `#[pymethods]`, or that has none,
/// fails with dlbind's message saying what to write instead of PyO3's E0119 or a class without
/// `__dlpack__`. A `#[dlpack(merge_pymethods)]` (the old opt-in, now what every derive does)
/// names a deprecated item at the key's span: a warning in the user's crate, nothing more.
fn methods_block(model: &Model, items: TokenStream) -> TokenStream {
    let ident = &model.ident;
    let mac = format_ident!("__dlbind_pymethods_{}", ident);
    let deprecated = model.merge_pymethods.map(|span| {
        quote_spanned! {span=>
            const _: () = ::dlbind::__private::deprecated::merge_pymethods();
        }
    });
    quote! {
        const _: () = ::dlbind::__private::assert_merged_pymethods::<#ident>();
        #deprecated
        #[doc(hidden)]
        #[allow(unused_macros)]
        macro_rules! #mac {
            ($($t:tt)*) => { ::dlbind::__private::merge_pymethods! { $($t)* { #items } } };
        }
        #[doc(hidden)]
        #[allow(unused_imports)]
        pub(crate) use #mac;
    }
}

/// `__traverse__` reporting the Python objects the data field holds
/// (`DataSource::visit_python_refs`: a `dlbind::Buffer` view's owner), so that the
/// garbage collector can collect a reference cycle through them. On a non-frozen class PyO3 runs
/// it under a shared borrow taken without blocking (exports' borrows do not stop it; an object
/// inside a `&mut self` call is skipped for that collection). Only for a
/// [`DataSource`](DataKind::Source) data field (slices and ndarray arrays hold no Python
/// objects), and not with `#[dlpack(custom_traverse)]`, where the type writes its own
/// `__traverse__` (calling `visit_python_refs` on the data field from it). No `__clear__`: the
/// collector breaks such a cycle at its other members, so the data stays alive for as long as
/// anything can still reach this object.
fn gc_traverse(model: &Model) -> TokenStream {
    if model.custom_traverse || !matches!(model.data.kind, DataKind::Source) {
        return TokenStream::new();
    }
    let data = access(&model.data.field);
    quote! {
        fn __traverse__(
            &self,
            visit: ::dlbind::__private::pyo3::PyVisit<'_>,
        ) -> ::core::result::Result<(), ::dlbind::__private::pyo3::PyTraverseError> {
            ::dlbind::__private::DataSource::visit_python_refs(&#data, &visit)
        }
    }
}

/// `const _: () = assert_pyclass::<T>();`: a clear error when the type is not a `#[pyclass]`.
/// Frozen or not: a frozen class only gives `&self`, and every export of a non-frozen one holds
/// a shared borrow of the object (in the capsule's block or a guard), so no `&mut self` method
/// or setter can reallocate the data under a live capsule, memoryview or numpy array.
fn assert_pyclass(model: &Model) -> TokenStream {
    let ident = &model.ident;
    quote_spanned! {ident.span()=>
        const _: () = ::dlbind::__private::assert_pyclass::<#ident>();
    }
}

fn access(f: &FieldRef) -> TokenStream {
    let m = &f.member;
    quote_spanned!(f.span=> self.#m)
}

fn source_impl(model: &Model) -> TokenStream {
    let ident = &model.ident;
    let data = access(&model.data.field);
    let dspan = model.data.field.span;

    // Element 0 and what the storage vouches for (extent, device, writability) come from one
    // place: the data field's `DataSource` impl (`Vec`, `Box<[T]>`, `Arc<[T]>`, `Buffer`, ...),
    // or, for an ndarray array, the array itself (consistent by construction, lent through `&`).
    let (data_ptr, storage, storage_writability) = match &model.data.kind {
        DataKind::Slice | DataKind::Source => (
            quote_spanned! {dspan=> ::dlbind::__private::DataSource::data_ptr(&#data) },
            quote_spanned! {dspan=>
                ::core::option::Option::Some((
                    ::dlbind::__private::DataSource::extent(&#data),
                    ::dlbind::__private::DataSource::device(&#data),
                ))
            },
            quote_spanned! {dspan=> ::dlbind::__private::DataSource::writability(&#data) },
        ),
        DataKind::Array => (
            quote_spanned! {dspan=> ::dlbind::__private::nd::data_ptr(&#data) },
            // Host memory; its extent is not read (the layout is trusted, below).
            quote! {
                ::core::option::Option::Some((
                    ::dlbind::__private::Extent::EMPTY,
                    ::dlbind::__private::Device::CPU,
                ))
            },
            quote! { ::dlbind::__private::Writability::ReadOnly },
        ),
    };
    // An ndarray array's shape and strides are its own (ndarray keeps them inside its data);
    // any other type's are checked on every export unless it `unsafe impl`s `UncheckedExtent`.
    let layout_trusted = match &model.data.kind {
        DataKind::Array => quote! { true },
        _ if model.unchecked_extent => {
            // The attribute says so and the type's `unsafe impl UncheckedExtent` promises it:
            // a safe attribute alone never skips the check.
            let ident = &model.ident;
            quote! {
                const _: () = ::dlbind::__private::assert_unchecked_extent::<#ident>();
                true
            }
        }
        _ => quote! { false },
    };
    // What lets the type `unsafe impl UncheckedExtent` (without the attribute that impl is a
    // compile error: it would skip nothing).
    let declares = if model.unchecked_extent && !matches!(model.data.kind, DataKind::Array) {
        quote! {
            #[automatically_derived]
            impl ::dlbind::__private::DeclaresUncheckedExtent for #ident {}
        }
    } else {
        quote!()
    };

    // The dtype of an element type is asked of the data field's own value, through the same
    // borrow the export reads: the type the compiler knows, whatever the field's spelling.
    let dtype = match &model.dtype {
        DtypeSource::Element => match &model.data.kind {
            DataKind::Array => {
                quote_spanned! {dspan=> ::dlbind::__private::nd::dtype(&#data) }
            }
            _ => quote_spanned! {dspan=> ::dlbind::__private::slice_dtype(&#data[..]) },
        },
        DtypeSource::Field(f) => {
            let a = access(f);
            quote_spanned! {f.span=> { let d: ::dlbind::__private::DLDataType = #a; d } }
        }
        DtypeSource::Fixed { entry, span } => {
            let (code, bits, lanes) = (entry.code, entry.bits, entry.lanes);
            quote_spanned! {*span=>
                ::dlbind::__private::DLDataType { code: #code, bits: #bits, lanes: #lanes }
            }
        }
    };

    let (ndim, fill_shape) = match (&model.data.kind, &model.shape) {
        (DataKind::Array, _) => (
            quote_spanned! {dspan=> ::dlbind::__private::nd::ndim(&#data) },
            quote_spanned! {dspan=> ::dlbind::__private::nd::fill_shape(&#data, out) },
        ),
        (_, Some(shape)) => {
            let s = access(shape);
            (
                quote_spanned! {shape.span=> ::dlbind::__private::dims_len(&#s[..]) },
                quote_spanned! {shape.span=> ::dlbind::__private::fill_dims(&#s[..], out) },
            )
        }
        (_, None) => unreachable!("validated: non-array data has a shape field"),
    };

    let fill_strides = match (&model.data.kind, &model.strides) {
        (DataKind::Array, _) => quote_spanned! {dspan=>
            ::dlbind::__private::nd::fill_strides(&#data, out)
        },
        (_, Some(strides)) => {
            let s = access(strides);
            quote_spanned! {strides.span=>
                ::dlbind::__private::fill_dims(&#s[..], out);
                true
            }
        }
        (_, None) => quote! { let _ = out; false },
    };

    let device = match &model.device {
        Some(f) => {
            let a = access(f);
            quote_spanned! {f.span=> { let d: ::dlbind::__private::Device = #a; d } }
        }
        None => quote! { ::dlbind::__private::Device::CPU },
    };
    // Without a device field every value is on the CPU: `__dlpack_device__` answers that
    // without reading (or, for a plain class, borrowing) the object.
    let fixed_device = match &model.device {
        Some(_) => quote! {},
        None => quote! {
            #[inline]
            fn dlpack_fixed_device() -> ::core::option::Option<::dlbind::__private::Device> {
                ::core::option::Option::Some(::dlbind::__private::Device::CPU)
            }
        },
    };

    // A `readonly` field is a `bool` or a `Writability` (`ReadonlyField`); it narrows what the
    // storage allows, never widens it (read-only storage stays read-only whatever the field).
    let writability = match &model.readonly {
        Readonly::Never => quote! { #storage_writability },
        Readonly::Always => quote! { ::dlbind::__private::Writability::ReadOnly },
        Readonly::Field(f) => {
            let a = access(f);
            quote_spanned! {f.span=>
                ::dlbind::__private::Writability::narrow(
                    ::dlbind::__private::ReadonlyField::writability(&#a),
                    #storage_writability,
                )
            }
        }
    };
    let readonly = quote! { !::dlbind::__private::Writability::is_writable(#writability) };

    // A frozen instance remembers that an export of it passed the check (decision 0022): the
    // data field's memo (a `Buffer`'s; no other storage has one), when the shape and strides
    // fields are containers whose values cannot change while shared (`FixedDims`, asked of the
    // field's own type by `FixedProbe`: any other type is checked on every export). The runtime reads it only for an
    // instance of a frozen class; the dtype and device fields are plain values.
    let memo = match (&model.data.kind, &model.shape) {
        (DataKind::Array, _) | (_, None) => quote! {},
        (_, Some(shape)) => {
            // The probe of the field's own type (from the borrow), answered by an inherent
            // method or `NotFixed`'s, both at the lookup's first step: a trait of the user's
            // scope cannot answer instead (it makes the call ambiguous).
            let fixed = |f: &FieldRef| {
                let a = access(f);
                quote_spanned! {f.span=>
                    ::dlbind::__private::FixedProbe::of(&#a).dlbind_fixed()
                }
            };
            let shape_fixed = fixed(shape);
            let strides_fixed = match &model.strides {
                Some(st) => fixed(st),
                None => quote! { true },
            };
            let of_data = quote_spanned! {dspan=>
                ::dlbind::__private::DataSource::__dlbind_memo(&#data)
            };
            quote! {
                #[inline]
                fn __dlbind_memo(
                    &self,
                ) -> ::core::option::Option<&::dlbind::__private::ExportMemo> {
                    #[allow(unused_imports)]
                    use ::dlbind::__private::NotFixed as _;
                    if #shape_fixed && #strides_fixed {
                        #of_data
                    } else {
                        ::core::option::Option::None
                    }
                }
            }
        }
    };

    let stream = match &model.stream {
        Some(f) => {
            let a = access(f);
            let body = quote_spanned! {f.span=> { let s: ::core::option::Option<u64> = #a; s } };
            quote! {
                #[inline]
                fn dlpack_stream(&self) -> ::core::option::Option<::dlbind::__private::StreamHandle> {
                    ::core::option::Option::map(#body, ::dlbind::__private::StreamHandle)
                }
            }
        }
        None => quote! {},
    };

    // SAFETY (of the emitted impl): the pointer is the data field's own (`Vec`/`Box`/`Arc`
    // slice, ndarray array or `DataSource`), shape and strides are the fields the user marked,
    // and every export checks them against the storage's extent (`__dlbind_storage`; skipped
    // only for ndarray arrays and `#[dlpack(unchecked_extent)]` types), refuses a device field
    // other than the storage's, and exports writable only what the storage calls writable
    // (never memory reached through `&`). `assert_pyclass` requires a `#[pyclass]`, and the memory stays put
    // while an export lives: a frozen class has no `&mut self`, and every export of a non-frozen
    // one (the emitted `__dlpack__` and exchange table, whose manager block keeps it, the buffer
    // and `__array_interface__`, through `SourceAccess::with_owner`'s guard) holds a shared
    // borrow of the object, so a `&mut self` method or setter fails with PyO3's borrow error
    // until the last export is released.
    quote! {
        #[automatically_derived]
        unsafe impl ::dlbind::__private::DLPackSource for #ident {
            #[inline]
            fn dlpack_data_ptr(&self) -> *mut ::core::ffi::c_void { #data_ptr }
            #[inline]
            fn dlpack_dtype(&self) -> ::dlbind::__private::DLDataType { #dtype }
            #[inline]
            fn dlpack_ndim(&self) -> usize { #ndim }
            #[inline]
            fn dlpack_fill_shape(&self, out: &mut [i64]) { #fill_shape }
            #[inline]
            fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool { #fill_strides }
            #[inline]
            fn dlpack_device(&self) -> ::dlbind::__private::Device { #device }
            #fixed_device
            #[inline]
            fn dlpack_readonly(&self) -> bool { #readonly }
            #[inline]
            fn dlpack_writability(&self) -> ::dlbind::__private::Writability { #writability }
            #[inline]
            fn __dlbind_storage(
                &self,
            ) -> ::core::option::Option<(::dlbind::__private::Extent, ::dlbind::__private::Device)> {
                #storage
            }
            #[inline]
            fn dlpack_layout_trusted(&self) -> bool { #layout_trusted }
            #memo
            #stream
        }
        #declares
    }
}

/// `unsafe impl dlbind::__private::ExchangeSource`: what the C exchange table needs beyond
/// `DLPackSource`:
/// * the constructor: `Some` when the type implements `dlbind::FromDLPack`, found by the
///   probe's inherent method (`dlbind::__private::probe`; the fallback trait at the same step
///   of the lookup, so no trait of the user's scope can answer): that impl comes from another
///   derive or from the user's hand, which this derive cannot see;
/// * borrowed dims for the non-owning `dltensor_from_py_object_no_sync`: when both the shape
///   and strides fields index (`field[..]`) to `[i64]` (`DimValue::as_i64s`). Types without a strides
///   field, or `#[dlpack(array)]` types, get a NULL entry (the spec allows it), and so do
///   non-frozen classes (decided by the runtime's table builder: the fill cannot hold a borrow).
fn exchange_impl(model: &Model) -> TokenStream {
    let ident = &model.ident;
    let dims = match (&model.data.kind, &model.shape, &model.strides) {
        (DataKind::Array, _, _) | (_, None, _) | (_, _, None) => None,
        (_, Some(shape), Some(strides)) => Some((shape, strides)),
    };
    let (supported, get) = match dims {
        None => (quote! { false }, quote! { ::core::option::Option::None }),
        Some((shape, strides)) => {
            let (sm, tm) = (&shape.member, &strides.member);
            let (sa, ta) = (access(shape), access(strides));
            (
                quote! {
                    ::dlbind::__private::dims_are_i64::<Self, _>(|__s: &Self| &__s.#sm[..])
                        && ::dlbind::__private::dims_are_i64::<Self, _>(|__s: &Self| &__s.#tm[..])
                },
                quote! {
                    ::core::option::Option::Some((
                        ::dlbind::__private::borrowed_dims(&#sa[..])?,
                        ::dlbind::__private::borrowed_dims(&#ta[..])?,
                    ))
                },
            )
        }
    };
    quote! {
        // SAFETY: the borrowed dims are the very fields `dlpack_fill_shape` / `dlpack_fill_strides`
        // copy from (converted by identity: they are `i64` already).
        #[automatically_derived]
        unsafe impl ::dlbind::__private::ExchangeSource for #ident {
            #[inline]
            fn exchange_constructor() -> ::core::option::Option<::dlbind::__private::Constructor> {
                use ::dlbind::__private::probe::NoConstructor as _;
                ::dlbind::__private::probe::Probe::<Self>::new().dlbind_constructor()
            }
            #[inline]
            fn exchange_dims_supported() -> bool { #supported }
            #[inline]
            fn exchange_dims(&self) -> ::core::option::Option<(&[i64], &[i64])> { #get }
        }
    }
}

/// `type(x).__dlpack_c_exchange_api__` (name from the spec IR): a class attribute holding the
/// capsule that points at the type's static `DLPackExchangeAPI`
/// (`dlbind::__private::exchange_api_capsule`). Nothing for specs without the attribute.
fn exchange_api_attr(spec: &SpecView) -> syn::Result<TokenStream> {
    let Some(name) = &spec.exchange_attr else {
        return Ok(TokenStream::new());
    };
    py_ident(name, "exchange API attribute")?;
    let f = format_ident!("__dlbind_dlpack_c_exchange_api__");
    Ok(quote! {
        #[classattr]
        #[pyo3(name = #name)]
        fn #f(
            py: ::dlbind::__private::pyo3::Python<'_>,
        ) -> ::dlbind::__private::pyo3::PyResult<::dlbind::__private::pyo3::Py<::dlbind::__private::pyo3::PyAny>> {
            ::dlbind::__private::exchange_api_capsule::<Self>(py)
        }
    })
}

/// The bridges to the older array protocols (`dlbind::__private::bridges`), one method per item
/// below. The names are fixed Python dunders (not in the DLPack spec).
fn bridges() -> TokenStream {
    let items = [
        getbuffer(),
        releasebuffer(),
        array_interface(),
        cuda_array_interface(),
        sycl_usm_array_interface(),
    ];
    quote! { #(#items)* }
}

/// The buffer protocol's `bf_getbuffer` (CPU-accessible data; BufferError otherwise).
fn getbuffer() -> TokenStream {
    quote! {
        unsafe fn __getbuffer__(
            slf: ::dlbind::__private::pyo3::Bound<'_, Self>,
            view: *mut ::dlbind::__private::pyo3::ffi::Py_buffer,
            flags: ::core::ffi::c_int,
        ) -> ::dlbind::__private::pyo3::PyResult<()> {
            // SAFETY: called by CPython's bf_getbuffer slot with a valid `view`.
            unsafe { ::dlbind::__private::bridges::getbuffer(&slf, view, flags) }
        }
    }
}

/// The buffer protocol's `bf_releasebuffer` (frees what `getbuffer` stored in the view).
fn releasebuffer() -> TokenStream {
    quote! {
        unsafe fn __releasebuffer__(
            _slf: ::dlbind::__private::pyo3::Bound<'_, Self>,
            view: *mut ::dlbind::__private::pyo3::ffi::Py_buffer,
        ) {
            // SAFETY: `view` was filled by `getbuffer` above (CPython's bf_releasebuffer contract).
            unsafe { ::dlbind::__private::bridges::releasebuffer(view) }
        }
    }
}

/// A `#[getter]` named `name` returning `::dlbind::__private::bridges::<func>(slf)`.
fn bridge_getter(name: &str, func: &str) -> TokenStream {
    let name = format_ident!("{name}");
    let func = format_ident!("{func}");
    quote! {
        #[getter]
        fn #name(
            slf: &::dlbind::__private::pyo3::Bound<'_, Self>,
        ) -> ::dlbind::__private::pyo3::PyResult<::dlbind::__private::pyo3::Py<::dlbind::__private::pyo3::PyAny>> {
            ::dlbind::__private::bridges::#func(slf)
        }
    }
}

/// numpy's `__array_interface__` (v3, CPU data; AttributeError when it does not apply).
fn array_interface() -> TokenStream {
    bridge_getter("__array_interface__", "array_interface")
}

/// `__cuda_array_interface__` (v3, CUDA data; AttributeError otherwise).
fn cuda_array_interface() -> TokenStream {
    bridge_getter("__cuda_array_interface__", "cuda_array_interface")
}

/// `__sycl_usm_array_interface__` (version 1, oneAPI data; AttributeError otherwise).
fn sycl_usm_array_interface() -> TokenStream {
    bridge_getter("__sycl_usm_array_interface__", "sycl_usm_array_interface")
}

/// A Python identifier from the spec as a Rust identifier (raw if it is a Rust keyword).
fn py_ident(name: &str, what: &str) -> syn::Result<Ident> {
    let valid = !name.is_empty()
        && name
            .chars()
            .next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
    if !valid {
        return Err(syn::Error::new(
            Span::call_site(),
            format!("the spec's {what} `{name}` is not a valid identifier"),
        ));
    }
    Ok(syn::parse_str::<Ident>(name).unwrap_or_else(|_| Ident::new_raw(name, Span::call_site())))
}

/// `__dlpack__` and `__dlpack_device__`, names from the spec.
///
/// `__dlpack__` and `__dlpack_device__` are emitted as class attributes holding the runtime's raw
/// descriptors (`dlbind::__private::dlpack_descriptor`, `dlpack_device_descriptor`; the first
/// call binds them to the class, see the runtime's `export::method`). `__dlpack__` parses
/// the keyword-only arguments itself, matching the interned keyword names of the generated
/// `dlbind::spec::protocol` module by identity. PyO3's generic argument parser costs more per call,
/// which alone misses the "≤ 0.9× numpy" export target. The method name comes from the spec IR;
/// the keyword names are checked here against the IR so a spec whose names are not identifiers
/// fails at compile time, and the runtime reads the same names from the generated code.
fn pymethods(spec: &SpecView) -> syn::Result<TokenStream> {
    let p = &spec.protocol;
    for n in p.dlpack_kwargs() {
        py_ident(n, "__dlpack__ keyword")?;
    }
    let dlpack_name = &p.dlpack_method;
    let device_name = &p.dlpack_device_method;
    let dlpack_fn = format_ident!("__dlbind_dlpack__");
    let device_fn = format_ident!("__dlbind_dlpack_device__");
    Ok(quote! {
        #[classattr]
        #[pyo3(name = #dlpack_name)]
        fn #dlpack_fn(
            py: ::dlbind::__private::pyo3::Python<'_>,
        ) -> ::dlbind::__private::pyo3::PyResult<::dlbind::__private::pyo3::Py<::dlbind::__private::pyo3::PyAny>> {
            ::dlbind::__private::dlpack_descriptor::<Self>(py)
        }

        #[classattr]
        #[pyo3(name = #device_name)]
        fn #device_fn(
            py: ::dlbind::__private::pyo3::Python<'_>,
        ) -> ::dlbind::__private::pyo3::PyResult<::dlbind::__private::pyo3::Py<::dlbind::__private::pyo3::PyAny>> {
            ::dlbind::__private::dlpack_device_descriptor::<Self>(py)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::fixture;
    use syn::parse_quote;

    fn expand_str(input: syn::DeriveInput) -> String {
        let spec = fixture();
        let m = Model::from_derive_input(&input, &spec).unwrap();
        let ts = expand(&m, &spec).unwrap();
        syn::parse2::<syn::File>(ts.clone()).expect("expansion parses as items");
        ts.to_string()
    }

    /// Every path the expansion names into dlbind goes through `::dlbind::__private` (serde's
    /// rule): the runtime's other modules can change without breaking derived code.
    #[test]
    fn expansion_names_only_the_private_module() {
        let cases: Vec<syn::DeriveInput> = vec![
            parse_quote! { struct A { #[dlpack(data)] v: Vec<f32>, #[dlpack(shape)] s: Vec<usize> } },
            parse_quote! {
                struct B {
                    #[dlpack(data)] buf: Buffer,
                    #[dlpack(dtype)] dt: DLDataType,
                    #[dlpack(shape)] s: Vec<i64>,
                    #[dlpack(strides)] st: Vec<i64>,
                    #[dlpack(device)] dev: Device,
                    #[dlpack(readonly)] ro: bool,
                    #[dlpack(stream)] stream: Option<u64>,
                }
            },
            parse_quote! { struct C { #[dlpack(array)] a: ndarray::ArrayD<f64> } },
        ];
        for input in cases {
            let s = expand_str(input);
            let total = s.matches(":: dlbind ::").count();
            let private = s.matches(":: dlbind :: __private ::").count();
            assert!(total > 10, "{s}");
            assert_eq!(total, private, "a path outside `::dlbind::__private`: {s}");
        }
    }

    /// The method calls (`.name(...)`) in an expansion, anywhere in its token tree.
    fn method_calls(ts: TokenStream, out: &mut Vec<String>) {
        use proc_macro2::{Delimiter, TokenTree};
        let tokens: Vec<TokenTree> = ts.into_iter().collect();
        for (i, t) in tokens.iter().enumerate() {
            if let TokenTree::Group(g) = t {
                method_calls(g.stream(), out);
            }
            if let (TokenTree::Punct(p), Some(TokenTree::Ident(name)), Some(TokenTree::Group(g))) =
                (t, tokens.get(i + 1), tokens.get(i + 2))
                && p.as_char() == '.'
                && g.delimiter() == Delimiter::Parenthesis
            {
                out.push(name.to_string());
            }
        }
    }

    /// Issue 50 (serde's hygiene): no call in either derive's expansion is a method call that a
    /// trait of the user's scope could answer. Every call is a path (`::dlbind::__private::…`,
    /// `::core::…`, `<T as Trait>::…`), except the two type probes, whose answers are found at
    /// the lookup's first step (an inherent method, or dlbind's fallback trait: a user's trait
    /// there makes the call ambiguous, a compile error).
    #[test]
    fn no_method_call_a_users_trait_could_answer() {
        let spec = fixture();
        let inputs: Vec<syn::DeriveInput> = vec![
            parse_quote! { struct A { #[dlpack(data)] v: Vec<f32>, #[dlpack(shape)] s: Vec<usize> } },
            parse_quote! {
                struct B {
                    #[dlpack(data)] buf: Buffer,
                    #[dlpack(dtype)] dt: DLDataType,
                    #[dlpack(shape)] s: Dims,
                    #[dlpack(strides)] st: Dims,
                    #[dlpack(device)] dev: Device,
                    #[dlpack(readonly)] ro: bool,
                    #[dlpack(stream)] stream: Option<u64>,
                }
            },
            parse_quote! {
                #[dlpack(dtype = "bfloat16", readonly, unchecked_extent, merge_pymethods)]
                struct C { #[dlpack(data)] b: Box<[u16]>, #[dlpack(shape)] s: [u32; 2], #[dlpack(strides)] t: Arc<[i64]> }
            },
            parse_quote! { struct D { #[dlpack(array)] a: ndarray::ArrayD<f64> } },
        ];
        for input in inputs {
            let m = Model::from_derive_input(&input, &spec).unwrap();
            let mut calls = Vec::new();
            method_calls(expand(&m, &spec).unwrap(), &mut calls);
            if matches!(m.data.kind, DataKind::Source) {
                method_calls(crate::import::expand(&input, &m).unwrap(), &mut calls);
            }
            calls.retain(|c| c != "dlbind_fixed" && c != "dlbind_constructor");
            assert!(calls.is_empty(), "{}: method calls {calls:?}", input.ident);
        }
    }

    #[test]
    fn expands_vec_struct() {
        let s = expand_str(parse_quote! {
            struct Image {
                #[dlpack(data)] pixels: Vec<u8>,
                #[dlpack(shape)] dims: Vec<usize>,
            }
        });
        assert!(
            s.contains("unsafe impl :: dlbind :: __private :: DLPackSource for Image"),
            "{s}"
        );
        assert!(
            s.contains(":: dlbind :: __private :: slice_dtype (& self . pixels [..])"),
            "{s}"
        );
        assert!(
            s.contains(":: dlbind :: __private :: dims_len (& self . dims [..])"),
            "{s}"
        );
        assert!(s.contains("dlpack_descriptor :: < Self >"), "{s}");
        assert!(s.contains("name = \"__dlpack__\""), "{s}");
        assert!(s.contains("let _ = out ; false"), "{s}");
        assert!(s.contains(":: dlbind :: __private :: Device :: CPU"), "{s}");
        assert!(s.contains("assert_pyclass :: < Image >"), "{s}");
        assert!(
            s.contains("unsafe impl :: dlbind :: __private :: ExchangeSource for Image"),
            "{s}"
        );
        assert!(s.contains("name = \"__dlpack_c_exchange_api__\""), "{s}");
        assert!(s.contains("exchange_api_capsule :: < Self >"), "{s}");
        for item in [
            "__getbuffer__",
            "__releasebuffer__",
            "__array_interface__",
            "__cuda_array_interface__",
            "__sycl_usm_array_interface__",
        ] {
            assert!(s.contains(item), "{item}: {s}");
        }
        // No strides field: no borrowed dims (NULL dltensor_from_py_object_no_sync).
        assert!(
            s.contains("fn exchange_dims_supported () -> bool { false }"),
            "{s}"
        );
    }

    /// Decision 0025: the derive emits no `#[pymethods]` block of its own, only the macro that
    /// `#[dlbind::pymethods]` hands the user's block to (the derived items inside it) and the
    /// assertion that the attribute ran; `merge_pymethods` adds only the deprecation's name.
    #[test]
    fn methods_go_only_into_the_users_block() {
        let plain = expand_str(parse_quote! {
            struct Samples { #[dlpack(data)] v: Vec<f32>, #[dlpack(shape)] s: [usize; 1] }
        });
        let keyed = expand_str(parse_quote! {
            #[dlpack(merge_pymethods)]
            struct Samples { #[dlpack(data)] v: Vec<f32>, #[dlpack(shape)] s: [usize; 1] }
        });
        for s in [&plain, &keyed] {
            assert!(
                s.contains("const _ : () = :: dlbind :: __private :: assert_merged_pymethods :: < Samples > () ;"),
                "{s}"
            );
            let (outside, inside) = s
                .split_once("macro_rules ! __dlbind_pymethods_Samples")
                .expect("the macro is always emitted");
            assert!(
                !outside.contains("pymethods ]"),
                "a block outside the macro: {s}"
            );
            assert!(!outside.contains("__dlpack__"), "{s}");
            assert!(
                inside.contains(":: dlbind :: __private :: merge_pymethods ! { $ ($ t) * {"),
                "{s}"
            );
            assert!(inside.contains("name = \"__dlpack__\""), "{s}");
            assert!(
                inside.contains("pub (crate) use __dlbind_pymethods_Samples ;"),
                "{s}"
            );
            assert!(!s.contains("compile_error"), "{s}");
        }
        let dep = ":: dlbind :: __private :: deprecated :: merge_pymethods () ;";
        assert!(!plain.contains(dep), "{plain}");
        assert!(keyed.contains(dep), "{keyed}");
        assert_eq!(plain, keyed.replace(&format!("const _ : () = {dep} "), ""));
    }

    /// Without a device field the device is fixed (`dlpack_fixed_device`: `__dlpack_device__`
    /// then never reads or borrows the object); with one, the value is asked.
    #[test]
    fn fixed_device_only_without_a_device_field() {
        let s = expand_str(parse_quote! {
            struct A { #[dlpack(data)] v: Vec<f32>, #[dlpack(shape)] s: [usize; 1] }
        });
        assert!(
            s.contains("fn dlpack_fixed_device () -> :: core :: option :: Option < :: dlbind :: __private :: Device > { :: core :: option :: Option :: Some (:: dlbind :: __private :: Device :: CPU) }"),
            "{s}"
        );
        let s = expand_str(parse_quote! {
            struct B { #[dlpack(data)] v: Vec<f32>, #[dlpack(shape)] s: Vec<i64>, #[dlpack(device)] dev: Device }
        });
        assert!(!s.contains("dlpack_fixed_device"), "{s}");
    }

    #[test]
    fn exchange_follows_the_spec() {
        let mut spec = fixture();
        let input: syn::DeriveInput = parse_quote! {
            struct T { #[dlpack(data)] a: Vec<f32>, #[dlpack(shape)] s: Vec<i64>, #[dlpack(strides)] st: Vec<i64> }
        };
        let m = Model::from_derive_input(&input, &spec).unwrap();
        let s = expand(&m, &spec).unwrap().to_string();
        assert!(
            s.contains("dims_are_i64 :: < Self , _ > (| __s : & Self | & __s . s [..])"),
            "{s}"
        );
        assert!(s.contains("borrowed_dims (& self . st [..]) ?"), "{s}");
        spec.exchange_attr = Some("__exchange_v9__".into());
        let s = expand(&m, &spec).unwrap().to_string();
        assert!(s.contains("name = \"__exchange_v9__\""), "{s}");
        spec.exchange_attr = None;
        let s = expand(&m, &spec).unwrap().to_string();
        assert!(!s.contains("exchange_api_capsule"), "{s}");
        assert!(s.contains("ExchangeSource for T"), "{s}");
    }

    #[test]
    fn method_names_follow_the_spec() {
        let mut spec = fixture();
        spec.protocol.dlpack_method = "__dlpack_v2__".into();
        spec.protocol.dlpack_device_method = "__where__".into();
        let input: syn::DeriveInput = parse_quote! {
            struct T { #[dlpack(data)] a: Vec<f32>, #[dlpack(shape)] s: [u8; 1] }
        };
        let m = Model::from_derive_input(&input, &spec).unwrap();
        let s = expand(&m, &spec).unwrap().to_string();
        assert!(s.contains("name = \"__dlpack_v2__\""), "{s}");
        assert!(s.contains("name = \"__where__\""), "{s}");
        assert!(!s.contains("name = \"__dlpack__\""), "{s}");
        spec.protocol.kw_stream = "not valid".into();
        assert!(expand(&m, &spec).is_err());
    }

    #[test]
    fn expands_fixed_dtype_and_fields() {
        let s = expand_str(parse_quote! {
            #[dlpack(dtype = "bfloat16", readonly)]
            struct R {
                #[dlpack(data)] b: Box<[u16]>,
                #[dlpack(shape)] s: [u32; 2],
                #[dlpack(strides)] st: [i32; 2],
                #[dlpack(device)] dev: Device,
            }
        });
        assert!(s.contains("code : 4u8 , bits : 16u8 , lanes : 1u16"), "{s}");
        assert!(
            s.contains("fn dlpack_writability (& self) -> :: dlbind :: __private :: Writability { :: dlbind :: __private :: Writability :: ReadOnly }"),
            "{s}"
        );
        assert!(s.contains("self . dev"), "{s}");
        assert!(s.contains("fill_dims (& self . st [..] , out)"), "{s}");
    }

    #[test]
    fn expands_source_and_array() {
        let s = expand_str(parse_quote! {
            struct T {
                #[dlpack(data)] buf: Buffer,
                #[dlpack(dtype)] dt: DLDataType,
                #[dlpack(shape)] s: Vec<i64>,
                #[dlpack(readonly)] ro: bool,
            }
        });
        assert!(
            s.contains(":: dlbind :: __private :: DataSource :: data_ptr (& self . buf)"),
            "{s}"
        );
        assert!(s.contains("self . dt"), "{s}");
        assert!(s.contains("self . ro"), "{s}");
        let s = expand_str(parse_quote! { struct A { #[dlpack(array)] a: ndarray::ArrayD<f64> } });
        assert!(s.contains("nd :: fill_strides (& self . a , out)"), "{s}");
        assert!(s.contains("nd :: ndim (& self . a)"), "{s}");
    }

    /// `__traverse__` is emitted for a DataSource data field only, and not with
    /// `#[dlpack(custom_traverse)]`.
    #[test]
    fn traverse_only_for_sources_without_custom_traverse() {
        let traverse = "visit_python_refs (& self . buf , & visit)";
        let s = expand_str(parse_quote! {
            struct T {
                #[dlpack(data)] buf: Buffer,
                #[dlpack(dtype)] dt: DLDataType,
                #[dlpack(shape)] s: Vec<i64>,
            }
        });
        assert!(s.contains("fn __traverse__") && s.contains(traverse), "{s}");
        let s = expand_str(parse_quote! {
            #[dlpack(custom_traverse)]
            struct T {
                #[dlpack(data)] buf: Buffer,
                #[dlpack(dtype)] dt: DLDataType,
                #[dlpack(shape)] s: Vec<i64>,
            }
        });
        assert!(!s.contains("__traverse__"), "{s}");
        let s = expand_str(parse_quote! {
            struct V { #[dlpack(data)] buf: Vec<u8>, #[dlpack(shape)] s: Vec<i64> }
        });
        assert!(!s.contains("__traverse__"), "{s}");
        let s = expand_str(parse_quote! { struct A { #[dlpack(array)] a: ndarray::ArrayD<f64> } });
        assert!(!s.contains("__traverse__"), "{s}");
    }
}
