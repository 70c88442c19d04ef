//! `#[derive(FromDLPack)]`: the import side of a `#[dlpack(...)]` struct, from the same
//! validated [`Model`] as the export.
//!
//! The fields' roles say how to build the value from any import, so the derive writes every path
//! the runtime offers, each a plain function of the roles:
//! - `from_imported`: from a capsule or an exchange table's export (the handle kept in the
//!   `Buffer`);
//! - `from_imported_into`: the same, written field by field into a free-list instance;
//! - `from_python_view`: a view of numpy's array header or of a lending exchange table (no
//!   managed tensor);
//! - `share_from` / `share_into`: a view of an object of the same frozen type;
//! - `into_instance`: the free list's instance for a frozen type.
//!
//! Every path that takes foreign memory first checks it against what the fields can hold
//! (`__private::derived::check`: a fixed dtype, contiguity without a strides field, the CPU
//! without a device field, writability without a readonly field); fields without a role get
//! `Default::default()`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::{Data, DeriveInput, Member, Type};

use crate::model::{DataKind, DtypeSource, FieldRef, Model, Readonly};

/// A field and how its value is made.
enum Role<'a> {
    Data,
    Shape(&'a FieldRef),
    Strides(&'a FieldRef),
    Dtype,
    Device,
    Readonly(&'a FieldRef),
    Stream,
    Other,
}

fn role<'a>(model: &'a Model, m: &Member) -> Role<'a> {
    let is = |f: &Option<FieldRef>| f.as_ref().is_some_and(|f| &f.member == m);
    if &model.data.field.member == m {
        Role::Data
    } else if is(&model.shape) {
        Role::Shape(model.shape.as_ref().unwrap())
    } else if is(&model.strides) {
        Role::Strides(model.strides.as_ref().unwrap())
    } else if matches!(&model.dtype, DtypeSource::Field(f) if &f.member == m) {
        Role::Dtype
    } else if is(&model.device) {
        Role::Device
    } else if let Readonly::Field(f) = &model.readonly
        && &f.member == m
    {
        Role::Readonly(f)
    } else if is(&model.stream) {
        Role::Stream
    } else {
        Role::Other
    }
}

/// Where the parts of a new value come from.
struct Parts {
    dtype: TokenStream,
    shape: TokenStream,
    strides: TokenStream,
    device: TokenStream,
    writability: TokenStream,
    readonly: TokenStream,
    buffer: TokenStream,
}

fn is_buffer(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Buffer"),
        Type::Group(g) => is_buffer(&g.elem),
        Type::Paren(p) => is_buffer(&p.elem),
        _ => false,
    }
}

pub fn expand(input: &DeriveInput, model: &Model) -> syn::Result<TokenStream> {
    if !matches!(model.data.kind, DataKind::Source) || !is_buffer(&model.data.field.ty) {
        return Err(syn::Error::new(
            model.data.field.span,
            "`#[derive(FromDLPack)]` keeps the import in the data field: it must be a \
             `dlbind::Buffer` (or write `impl FromDLPack` by hand)",
        ));
    }
    let Data::Struct(data) = &input.data else {
        unreachable!("validated by the model")
    };
    let members: Vec<Member> = data.fields.members().collect();
    let ident = &model.ident;
    let d = quote!(::dlbind::__private::derived);
    let p = quote!(::dlbind::__private);

    let name = ident.to_string();
    let fixed = match &model.dtype {
        DtypeSource::Fixed { entry, .. } => {
            let (code, bits, lanes) = (entry.code, entry.bits, entry.lanes);
            quote!(::core::option::Option::Some(#p::DLDataType { code: #code, bits: #bits, lanes: #lanes }))
        }
        _ => quote!(::core::option::Option::None),
    };
    let strided = model.strides.is_some();
    let any_device = model.device.is_some();
    let readonly_ok = !matches!(model.readonly, Readonly::Never);
    let want = quote! {
        const WANT: #d::Want = #d::Want {
            name: #name,
            dtype: #fixed,
            strided: #strided,
            any_device: #any_device,
            readonly_ok: #readonly_ok,
        };
    };

    // The value of each field from `parts` (the data field last: it takes the handle).
    let value = |m: &Member, parts: &Parts, fallible: bool| -> TokenStream {
        let dims = |f: &FieldRef, what: &str, src: &TokenStream| {
            let ty = &f.ty;
            if fallible {
                quote_spanned!(f.span=> #d::dims::<#ty>(&WANT, #what, #src)?)
            } else {
                src.clone()
            }
        };
        match role(model, m) {
            Role::Data => parts.buffer.clone(),
            Role::Shape(f) => dims(f, "shape", &parts.shape),
            Role::Strides(f) => dims(f, "strides", &parts.strides),
            Role::Dtype => parts.dtype.clone(),
            Role::Device => parts.device.clone(),
            Role::Readonly(f) => {
                let ty = &f.ty;
                let w = &parts.writability;
                quote_spanned!(f.span=> <#ty as #p::ReadonlyField>::from_writability(#w))
            }
            Role::Stream => quote!(::core::option::Option::None),
            Role::Other => quote!(::core::default::Default::default()),
        }
    };
    let data_member = &model.data.field.member;
    let ordered: Vec<&Member> = members
        .iter()
        .filter(|m| *m != data_member)
        .chain(std::iter::once(data_member))
        .collect();

    let literal = |parts: &Parts| {
        let inits = ordered.iter().map(|m| {
            let v = value(m, parts, true);
            quote!(#m: #v)
        });
        quote!(#ident { #(#inits),* })
    };
    let check = |parts: &Parts| {
        let Parts {
            dtype,
            shape,
            strides,
            device,
            readonly,
            ..
        } = parts;
        quote!(#d::check(&WANT, #dtype, #shape, #strides, #device, #readonly))
    };

    // From an imported handle `t`.
    let imported = Parts {
        // Every call fully qualified (issue 50): a trait of the user's scope with a method of the
        // same name cannot stand in for the tensor's own.
        dtype: quote!(#d::ImportedTensor::dtype(&__t)),
        shape: quote!(#d::ImportedTensor::shape(&__t)),
        strides: quote!(#d::ImportedTensor::strides(&__t)),
        device: quote!(#d::ImportedTensor::device(&__t)),
        writability: quote!(#d::ImportedTensor::writability(&__t)),
        readonly: quote!(#d::ImportedTensor::readonly(&__t)),
        buffer: quote!(<#d::Buffer as ::core::convert::From<#d::ImportedTensor>>::from(__t)),
    };
    let imported_check = check(&imported);
    let imported_literal = literal(&imported);
    // In place: the converted dims first (declining on any failure: `from_imported` then
    // reports it), then the writes.
    let pre_dims = |parts: &Parts| {
        let mut pre = Vec::new();
        for (f, what, src) in [
            (model.shape.as_ref(), "shape", &parts.shape),
            (model.strides.as_ref(), "strides", &parts.strides),
        ] {
            if let Some(f) = f {
                let ty = &f.ty;
                let local = quote::format_ident!("__{}", what);
                // `None` for a type written in place (`DimsField::IN_PLACE`, a constant: the
                // branch not taken compiles away).
                pre.push(quote_spanned! {f.span=>
                    let #local: ::core::option::Option<#ty> = if <#ty as #d::DimsField>::IN_PLACE {
                        ::core::option::Option::None
                    } else {
                        match <#ty as #d::DimsField>::from_dims(#src) {
                            ::core::option::Option::Some(v) => ::core::option::Option::Some(v),
                            ::core::option::Option::None => return ::core::result::Result::Err(__t),
                        }
                    };
                });
            }
        }
        quote!(#(#pre)*)
    };
    let imported_pre = pre_dims(&imported);
    // Field-by-field writes through `__p` (`out`'s pointer). `pre_dims` makes the fallible shape
    // and strides values first, so that no write happens before the last check; the dims fields
    // come from its locals, or are written in place from the tensor's values.
    let dims_write = |m: &Member, f: &FieldRef, local: TokenStream, src: &TokenStream| {
        let ty = &f.ty;
        quote! {
            match #local {
                ::core::option::Option::Some(__v) => ::core::ptr::write(&raw mut (*__p).#m, __v),
                ::core::option::Option::None => {
                    <#ty as #d::DimsField>::write_in_place(&raw mut (*__p).#m, #src)
                }
            }
        }
    };
    let imported_writes = {
        let ws = ordered.iter().map(|m| match role(model, m) {
            Role::Shape(f) => dims_write(m, f, quote!(__shape), &imported.shape),
            Role::Strides(f) => dims_write(m, f, quote!(__strides), &imported.strides),
            _ => {
                let v = value(m, &imported, false);
                quote!(::core::ptr::write(&raw mut (*__p).#m, #v);)
            }
        });
        quote!(#(#ws)*)
    };

    // From a view of memory another Python object owns.
    let view = Parts {
        dtype: quote!(__v.dtype),
        shape: quote!(__v.shape),
        strides: quote!(__v.strides),
        device: quote!(__v.device),
        writability: quote!(#p::Writability::from_readonly(__v.readonly)),
        readonly: quote!(__v.readonly),
        // SAFETY (emitted): the runtime's view describes memory its owner keeps valid while
        // alive; the buffer holds a strong reference to the owner.
        buffer: quote!(unsafe {
            #d::Buffer::view(
                ::dlbind::__private::pyo3::Bound::unbind(::dlbind::__private::pyo3::Bound::clone(__v.owner)),
                __v.data,
                __v.extent,
                __v.device,
                __v.readonly,
            )
        }),
    };
    let view_check = check(&view);
    let view_literal = literal(&view);

    // From an object of the same (frozen) type: its own field values, the buffer a view of its
    // memory kept alive by it (or by the owner it views).
    let field = |f: &Option<FieldRef>| {
        f.as_ref().map(|f| {
            let m = &f.member;
            quote!(::core::clone::Clone::clone(&__this.#m))
        })
    };
    let data = &model.data.field.member;
    let share_readonly = match &model.readonly {
        Readonly::Never => quote!(false),
        Readonly::Always => quote!(true),
        Readonly::Field(f) => {
            let m = &f.member;
            quote!(!#p::Writability::is_writable(#p::ReadonlyField::writability(&__this.#m)))
        }
    };
    let shared = Parts {
        dtype: match &model.dtype {
            DtypeSource::Field(f) => {
                let m = &f.member;
                quote!(__this.#m)
            }
            _ => quote!(()),
        },
        shape: field(&model.shape).unwrap_or_default(),
        strides: field(&model.strides).unwrap_or_default(),
        device: field(&model.device).unwrap_or_default(),
        writability: match &model.readonly {
            Readonly::Field(f) => {
                let m = &f.member;
                quote!(#p::ReadonlyField::writability(&__this.#m))
            }
            _ => quote!(#p::Writability::Writable),
        },
        readonly: quote!(()),
        // SAFETY (emitted): `__source` owns `__this.#data` (a frozen object: never changed while
        // alive), and element 0 and the device are the buffer's own.
        buffer: quote!(unsafe {
            #d::Buffer::share_view(
                &__this.#data,
                #p::pyo3::Bound::py(__source),
                #p::pyo3::Bound::as_any(__source),
                #p::DataSource::data_ptr(&__this.#data),
                #p::DataSource::device(&__this.#data),
                #share_readonly,
            )
        }),
    };
    let share_inits = ordered.iter().map(|m| {
        let v = value(m, &shared, false);
        quote!(#m: #v)
    });
    let share_literal = quote!(#ident { #(#share_inits),* });
    // The dims fields cloned where they live (`DimsField::clone_to`: an inline `Dims` copied
    // directly, not cloned on the stack and moved).
    let share_writes = ordered.iter().map(|m| match role(model, m) {
        Role::Shape(f) | Role::Strides(f) => {
            let ty = &f.ty;
            quote!(<#ty as #d::DimsField>::clone_to(&__this.#m, &raw mut (*__p).#m);)
        }
        _ => {
            let v = value(m, &shared, false);
            quote!(::core::ptr::write(&raw mut (*__p).#m, #v);)
        }
    });

    // Frozen or not, from PyO3's own `PyClass::Frozen` (`derived::ClassKind`).
    let kind = quote!(<<Self as #p::pyo3::PyClass>::Frozen as #d::ClassKind<Self>>);

    // The direct release (no PyO3 deallocation trampoline), for a type whose fields are all
    // roles: the buffer's Python reference given back at once, the rest (dims, dtype, device,
    // flags) plain data. A field of the user's own may hold a `Py<…>`, whose drop outside the
    // trampoline would be delayed: such a type keeps PyO3's deallocation.
    let all_roles = members
        .iter()
        .all(|m| !matches!(role(model, m), Role::Other));
    let dims_empty: Vec<TokenStream> = [model.shape.as_ref(), model.strides.as_ref()]
        .into_iter()
        .flatten()
        .map(|f| {
            let (m, ty) = (&f.member, &f.ty);
            quote!(<#ty as #d::DimsField>::owns_nothing(&self.#m))
        })
        .collect();
    // Whether an instance must be GC-tracked: a type whose fields are all roles holds Python
    // references only in its data field, which answers; any other keeps the default (tracked).
    let needs_tracking = if all_roles {
        quote! {
            #[inline(always)]
            fn __dlbind_needs_tracking(&self, py: #p::pyo3::Python<'_>) -> bool {
                #p::DataSource::__dlbind_needs_tracking(&self.#data, || {
                    <Self as #p::pyo3::PyTypeInfo>::type_object_raw(py)
                })
            }
        }
    } else {
        quote!()
    };
    let (release_impl, setup) = if all_roles {
        (
            quote! {
                #[automatically_derived]
                impl #d::ReleasePython for #ident {
                    #[inline]
                    fn release_python_refs(
                        &mut self,
                        py: #p::pyo3::Python<'_>,
                    ) -> #d::Released {
                        if !#d::Buffer::release_python_refs(&mut self.#data, py) {
                            return #d::Released::No;
                        }
                        #d::released(#d::Buffer::owns_nothing(&self.#data), true #(&& #dims_empty)*)
                    }
                }
            },
            quote! {
                #[inline]
                fn __dlbind_setup(py: #p::pyo3::Python<'_>) {
                    #kind::direct_release(py)
                }
            },
        )
    } else {
        (quote!(), quote!())
    };

    // SAFETY (of the emitted in-place writes): `__p` is the slot's pointer, valid for writes of
    // a `Self`; every field is written exactly once (the list is the struct's own fields), and
    // nothing between the first write and `assume_written` can fail or return early.
    Ok(quote! {
        #[automatically_derived]
        impl #d::FromDLPack for #ident {
            #[inline]
            fn from_imported(
                _py: #p::pyo3::Python<'_>,
                __t: #d::ImportedTensor,
            ) -> #p::pyo3::PyResult<Self> {
                #want
                #imported_check?;
                ::core::result::Result::Ok(#imported_literal)
            }

            #[inline(always)]
            fn from_imported_into<'__a>(
                _py: #p::pyo3::Python<'_>,
                __t: #d::ImportedTensor,
                mut __out: #d::Slot<'__a, Self>,
            ) -> ::core::result::Result<#d::Written<'__a, Self>, #d::ImportedTensor> {
                #want
                if ::core::result::Result::is_err(&#imported_check) {
                    return ::core::result::Result::Err(__t);
                }
                #imported_pre
                let __p = #d::Slot::as_mut_ptr(&mut __out);
                unsafe {
                    #imported_writes
                    ::core::result::Result::Ok(#d::Slot::assume_written(__out))
                }
            }

            #[inline(always)]
            fn from_python_view(
                __v: &#d::PythonView<'_, '_>,
            ) -> ::core::option::Option<#p::pyo3::PyResult<Self>> {
                #want
                // A nested function, not a closure called in place: LLVM left such a closure out
                // of line in the demo's `Tensor`, returning the value through memory.
                #[inline(always)]
                fn __dlbind_view(
                    __v: &#d::PythonView<'_, '_>,
                ) -> #p::pyo3::PyResult<#ident> {
                    #view_check?;
                    ::core::result::Result::Ok(#view_literal)
                }
                ::core::option::Option::Some(__dlbind_view(__v))
            }

            #[inline(always)]
            fn share_from(
                __source: &#p::pyo3::Bound<'_, Self>,
            ) -> ::core::option::Option<#p::pyo3::PyResult<Self>> {
                let __this = #kind::frozen_ref(__source)?;
                ::core::option::Option::Some(::core::result::Result::Ok(#share_literal))
            }

            #[inline(always)]
            fn share_into<'__a>(
                __source: &#p::pyo3::Bound<'_, Self>,
                mut __out: #d::Slot<'__a, Self>,
            ) -> ::core::option::Option<#d::Written<'__a, Self>> {
                let __this = #kind::frozen_ref(__source)?;
                let __p = #d::Slot::as_mut_ptr(&mut __out);
                unsafe {
                    #(#share_writes)*
                    ::core::option::Option::Some(#d::Slot::assume_written(__out))
                }
            }

            #setup

            #needs_tracking

            #[inline(always)]
            fn into_instance(
                py: #p::pyo3::Python<'_>,
                value: Self,
            ) -> #p::pyo3::PyResult<#p::pyo3::Bound<'_, Self>> {
                #kind::instance(py, value, |__v: &Self| {
                    #d::FromDLPack::__dlbind_needs_tracking(__v, py)
                })
            }
        }

        #release_impl
    })
}
