//! `#[dlbind::pymethods]`: a derived type's one `#[pymethods]` block with the derive's methods
//! merged in (every `#[derive(DLPackExport)]` type has one; see `expand::methods_block`).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::spanned::Spanned;

pub fn pymethods(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    if !attr.is_empty() {
        return Err(syn::Error::new(
            attr.span(),
            "`#[dlbind::pymethods]` takes no arguments",
        ));
    }
    let block: syn::ItemImpl = syn::parse2(item)?;
    if block.trait_.is_some() {
        return Err(syn::Error::new(
            block.span(),
            "`#[dlbind::pymethods]` goes on an inherent `impl Type { ... }` block",
        ));
    }
    if !block.generics.params.is_empty() {
        return Err(syn::Error::new(
            block.generics.span(),
            "`#[dlbind::pymethods]`: a `#[pyclass]` cannot be generic",
        ));
    }
    if let Some(u) = &block.unsafety {
        return Err(syn::Error::new(
            u.span(),
            "`#[dlbind::pymethods]`: the block cannot be `unsafe`",
        ));
    }
    let syn::Type::Path(tp) = &*block.self_ty else {
        return Err(syn::Error::new(
            block.self_ty.span(),
            "`#[dlbind::pymethods]` needs the type by name (`impl Samples`, `impl crate::m::Samples`)",
        ));
    };
    if tp.qself.is_some() {
        return Err(syn::Error::new(
            tp.span(),
            "`#[dlbind::pymethods]` needs the type by name",
        ));
    }
    // The derive's macro lives beside the type: same path, last segment replaced.
    let mut path = tp.path.clone();
    let last = path.segments.last_mut().expect("a type path has a segment");
    if !last.arguments.is_empty() {
        return Err(syn::Error::new(
            last.arguments.span(),
            "`#[dlbind::pymethods]`: a `#[pyclass]` cannot be generic",
        ));
    }
    last.ident = format_ident!("__dlbind_pymethods_{}", last.ident);
    let ty = &tp.path;
    let attrs = &block.attrs;
    let items = &block.items;
    Ok(quote! {
        #path! { #ty; #(#attrs)* { #(#items)* } }
    })
}

/// `__private::merge_pymethods! { Type; #[attrs]* { user items } { derived items } }`: what the
/// derive's `__dlbind_pymethods_<Type>` macro hands on. Writes the one `#[pymethods]` block.
/// The derived items are given this macro's call-site span (a proc-macro span, as derive
/// output has), so that they read as generated code: lints the user's crate sets (e.g. edition
/// 2024's `unsafe_op_in_unsafe_fn` on PyO3's wrapper of `__getbuffer__`) apply to the user's
/// items only.
pub fn merged_block(input: TokenStream) -> syn::Result<TokenStream> {
    struct Input {
        ty: syn::Path,
        attrs: Vec<syn::Attribute>,
        user: TokenStream,
        derived: TokenStream,
    }
    impl syn::parse::Parse for Input {
        fn parse(input: syn::parse::ParseStream) -> syn::Result<Self> {
            let ty: syn::Path = input.parse()?;
            input.parse::<syn::Token![;]>()?;
            let attrs = input.call(syn::Attribute::parse_outer)?;
            let user;
            syn::braced!(user in input);
            let derived;
            syn::braced!(derived in input);
            Ok(Input {
                ty,
                attrs,
                user: user.parse()?,
                derived: derived.parse()?,
            })
        }
    }
    let Input {
        ty,
        attrs,
        user,
        derived,
    } = syn::parse2(input)?;
    let derived = respan(derived, proc_macro2::Span::call_site());
    Ok(quote! {
        #(#attrs)*
        #[::dlbind::__private::pyo3::pymethods]
        #[pyo3(crate = "::dlbind::__private::pyo3")]
        impl #ty {
            #user
            #derived
        }
        #[automatically_derived]
        impl ::dlbind::__private::MergedPyMethods for #ty {}
    })
}

fn respan(ts: TokenStream, span: proc_macro2::Span) -> TokenStream {
    use proc_macro2::{Group, TokenTree};
    ts.into_iter()
        .map(|tt| match tt {
            TokenTree::Group(g) => {
                let mut n = Group::new(g.delimiter(), respan(g.stream(), span));
                n.set_span(span);
                TokenTree::Group(n)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}
