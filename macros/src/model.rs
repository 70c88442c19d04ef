//! The validated model of a `#[derive(DLPackExport)]` struct.
//!
//! [`Model::from_derive_input`] is a plain function of the parsed item and the spec view, so all
//! validation (and its error messages and spans) is unit-tested without running the macro.

use proc_macro2::Span;
use syn::{
    Data, DeriveInput, Fields, GenericArgument, Ident, Member, PathArguments, Type,
    spanned::Spanned,
};

use crate::attr::{self, Item, Key, push_err};
use crate::spec::{DtypeEntry, SpecView};

/// A field the expansion reads, with enough to emit well-spanned code.
#[derive(Debug, Clone)]
pub struct FieldRef {
    pub member: Member,
    pub ty: Type,
    /// Span of the field's type (errors from type checking the emitted code point here).
    pub span: Span,
    /// Span of the `#[dlpack(...)]` key that gave the field its role.
    pub key_span: Span,
}

impl FieldRef {
    pub fn name(&self) -> String {
        match &self.member {
            Member::Named(i) => i.to_string(),
            Member::Unnamed(i) => i.index.to_string(),
        }
    }
}

/// How the data field is stored.
#[derive(Debug, Clone)]
pub enum DataKind {
    /// `Vec<T>`, `Box<[T]>`, `Arc<[T]>`: a contiguous slice of `T` (the expansion asks the
    /// field's value for `T`; the spelling only picks this kind, which the compiler then checks).
    Slice,
    /// Any other type implementing `::dlbind::DataSource` (e.g. `dlbind::Buffer`).
    Source,
    /// `#[dlpack(array)]`: an owned `ndarray` array giving pointer, shape and strides.
    Array,
}

#[derive(Debug, Clone)]
pub struct DataField {
    pub field: FieldRef,
    pub kind: DataKind,
}

/// Where the exported dtype comes from.
#[derive(Debug, Clone)]
pub enum DtypeSource {
    /// The element type of the data field itself (`Vec`/`Box`/`Arc` slices and ndarray arrays):
    /// `DLPackElement::DTYPE` of the elements the field's value holds, asked of the borrow the
    /// export reads (`slice_dtype(&self.data[..])`, `nd::dtype(&self.data)`), never of how the
    /// field's type is spelled (issue 50: an alias can name any element type).
    Element,
    /// A `#[dlpack(dtype)]` field of type `dlbind::spec::types::DLDataType`.
    Field(FieldRef),
    /// Struct-level `#[dlpack(dtype = "name")]`, resolved against the spec's table.
    Fixed { entry: DtypeEntry, span: Span },
}

#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // built once per derive
pub enum Readonly {
    Never,
    Always,
    Field(FieldRef),
}

#[derive(Debug, Clone)]
pub struct Model {
    pub ident: Ident,
    pub data: DataField,
    /// `None` only for `DataKind::Array`.
    pub shape: Option<FieldRef>,
    pub strides: Option<FieldRef>,
    pub dtype: DtypeSource,
    pub device: Option<FieldRef>,
    pub readonly: Readonly,
    /// `#[dlpack(stream)]`: an `Option<u64>` field naming the stream with pending work.
    pub stream: Option<FieldRef>,
    /// Struct-level `#[dlpack(custom_traverse)]`: the type writes its own `__traverse__`, so
    /// the derive emits none (see `expand::gc_traverse`).
    pub custom_traverse: bool,
    /// Struct-level `#[dlpack(unchecked_extent)]`: exports skip the span check, which the
    /// type's `unsafe impl dlbind::UncheckedExtent` vouches for (the expansion requires it).
    pub unchecked_extent: bool,
    /// Where the struct says `#[dlpack(merge_pymethods)]`, a key kept for crates that wrote it:
    /// merging into the user's `#[dlbind::pymethods]` block is what every derive does now
    /// (decision 0025), so the key changes nothing and only earns a `deprecated` warning there.
    pub merge_pymethods: Option<Span>,
}

/// Role slots filled while walking the fields.
#[derive(Default)]
struct Slots {
    data: Option<(Key, FieldRef)>,
    shape: Option<FieldRef>,
    strides: Option<FieldRef>,
    dtype: Option<FieldRef>,
    device: Option<FieldRef>,
    readonly: Option<FieldRef>,
    stream: Option<FieldRef>,
}

impl Model {
    pub fn from_derive_input(input: &DeriveInput, spec: &SpecView) -> syn::Result<Model> {
        let fields = match &input.data {
            Data::Struct(s) => &s.fields,
            Data::Enum(e) => {
                return Err(syn::Error::new(
                    e.enum_token.span,
                    "DLPackExport can only be derived for structs, not enums",
                ));
            }
            Data::Union(u) => {
                return Err(syn::Error::new(
                    u.union_token.span,
                    "DLPackExport can only be derived for structs, not unions",
                ));
            }
        };

        if !input.generics.params.is_empty() || input.generics.where_clause.is_some() {
            // Alone: checks of fields that mention the parameters would only add noise.
            return Err(syn::Error::new(
                input.generics.span(),
                "DLPackExport does not support generic structs (a #[pyclass] cannot be generic); \
                 use a concrete type",
            ));
        }

        let mut errors: Option<syn::Error> = None;

        // Struct-level items: `dtype = "…"`, `readonly`.
        let mut top = StructItems::default();
        match attr::parse_items(&input.attrs) {
            Err(e) => push_err(&mut errors, e),
            Ok(items) => {
                for item in items {
                    if let Err(e) = struct_item(&item, &mut top) {
                        push_err(&mut errors, e);
                    }
                }
            }
        }

        // Field roles.
        let mut slots = Slots::default();
        let empty = syn::punctuated::Punctuated::new();
        let field_list = match fields {
            Fields::Named(f) => &f.named,
            Fields::Unnamed(f) => &f.unnamed,
            Fields::Unit => &empty,
        };
        for (index, field) in field_list.iter().enumerate() {
            let items = match attr::parse_items(&field.attrs) {
                Ok(items) => items,
                Err(e) => {
                    push_err(&mut errors, e);
                    continue;
                }
            };
            let mut first: Option<Key> = None;
            for item in items {
                if let Some(k) = first {
                    push_err(
                        &mut errors,
                        syn::Error::new(
                            item.span,
                            format!(
                                "a field takes one #[dlpack] role; this one already has `{}`",
                                k.name()
                            ),
                        ),
                    );
                    continue;
                }
                first = Some(item.key);
                let member = match &field.ident {
                    Some(i) => Member::Named(i.clone()),
                    None => Member::Unnamed(syn::Index {
                        index: index as u32,
                        span: field.span(),
                    }),
                };
                let fref = FieldRef {
                    member,
                    ty: field.ty.clone(),
                    span: field.ty.span(),
                    key_span: item.span,
                };
                if let Err(e) = field_item(&item, fref, &mut slots) {
                    push_err(&mut errors, e);
                }
            }
        }

        // Cross-field rules.
        let model = finish(input, spec, slots, top, &mut errors);
        match (errors, model) {
            (None, Some(m)) => Ok(m),
            (Some(e), _) => Err(e),
            (None, None) => unreachable!("finish returns None only after recording an error"),
        }
    }
}

/// The struct-level `#[dlpack(...)]` items.
#[derive(Default)]
struct StructItems {
    /// `dtype = "…"`.
    dtype: Option<syn::LitStr>,
    /// `readonly`.
    readonly: Option<Span>,
    /// `custom_traverse`.
    custom_traverse: Option<Span>,
    /// `unchecked_extent`.
    unchecked_extent: Option<Span>,
    /// `merge_pymethods` (deprecated, no effect).
    merge_pymethods: Option<Span>,
}

fn struct_item(item: &Item, top: &mut StructItems) -> syn::Result<()> {
    let StructItems {
        dtype,
        readonly,
        custom_traverse,
        unchecked_extent,
        merge_pymethods,
    } = top;
    match item.key {
        Key::Dtype => {
            let Some(v) = &item.value else {
                return Err(syn::Error::new(
                    item.span,
                    "a struct-level dtype needs a name: `#[dlpack(dtype = \"float32\")]`",
                ));
            };
            if dtype.is_some() {
                return Err(syn::Error::new(item.span, "duplicate struct-level `dtype`"));
            }
            *dtype = Some(v.clone());
        }
        Key::Readonly => {
            if let Some(v) = &item.value {
                return Err(syn::Error::new(v.span(), "`readonly` takes no value"));
            }
            if readonly.is_some() {
                return Err(syn::Error::new(
                    item.span,
                    "duplicate struct-level `readonly`",
                ));
            }
            *readonly = Some(item.span);
        }
        Key::CustomTraverse => {
            if let Some(v) = &item.value {
                return Err(syn::Error::new(
                    v.span(),
                    "`custom_traverse` takes no value",
                ));
            }
            if custom_traverse.is_some() {
                return Err(syn::Error::new(
                    item.span,
                    "duplicate struct-level `custom_traverse`",
                ));
            }
            *custom_traverse = Some(item.span);
        }
        Key::UncheckedExtent | Key::MergePymethods => {
            let name = item.key.name();
            if let Some(v) = &item.value {
                return Err(syn::Error::new(
                    v.span(),
                    format!("`{name}` takes no value"),
                ));
            }
            let slot = if item.key == Key::UncheckedExtent {
                unchecked_extent
            } else {
                merge_pymethods
            };
            if slot.is_some() {
                return Err(syn::Error::new(
                    item.span,
                    format!("duplicate struct-level `{name}`"),
                ));
            }
            *slot = Some(item.span);
        }
        k => {
            return Err(syn::Error::new(
                item.span,
                format!(
                    "`#[dlpack({})]` goes on a field; on the struct only `dtype = \"…\"`, \
                     `readonly`, `custom_traverse` and `unchecked_extent` are allowed",
                    k.name()
                ),
            ));
        }
    }
    Ok(())
}

fn field_item(item: &Item, f: FieldRef, slots: &mut Slots) -> syn::Result<()> {
    if let Some(v) = &item.value {
        let msg = if item.key == Key::Dtype {
            "`dtype = \"…\"` goes on the struct; on a field of type `DLDataType` write `#[dlpack(dtype)]`"
                .to_string()
        } else {
            format!("`{}` takes no value", item.key.name())
        };
        return Err(syn::Error::new(v.span(), msg));
    }
    let dup = |existing: &FieldRef, key: Key| {
        syn::Error::new(
            item.span,
            format!(
                "duplicate `#[dlpack({})]` field: `{}` already has it",
                key.name(),
                existing.name()
            ),
        )
    };
    let slot = match item.key {
        Key::Data | Key::Array => {
            if let Some((k, existing)) = &slots.data {
                return Err(syn::Error::new(
                    item.span,
                    format!(
                        "duplicate data field: `{}` is already the data (`#[dlpack({})]`)",
                        existing.name(),
                        k.name()
                    ),
                ));
            }
            slots.data = Some((item.key, f));
            return Ok(());
        }
        Key::Shape => &mut slots.shape,
        Key::Strides => &mut slots.strides,
        Key::Dtype => &mut slots.dtype,
        Key::Device => &mut slots.device,
        Key::Readonly => &mut slots.readonly,
        Key::Stream => &mut slots.stream,
        Key::CustomTraverse | Key::UncheckedExtent | Key::MergePymethods => {
            let name = item.key.name();
            return Err(syn::Error::new(
                item.span,
                format!("`{name}` goes on the struct: `#[dlpack({name})]` above it"),
            ));
        }
    };
    if let Some(existing) = slot {
        return Err(dup(existing, item.key));
    }
    *slot = Some(f);
    Ok(())
}

fn finish(
    input: &DeriveInput,
    spec: &SpecView,
    slots: Slots,
    top: StructItems,
    errors: &mut Option<syn::Error>,
) -> Option<Model> {
    let Some((data_key, data_field)) = slots.data else {
        push_err(
            errors,
            syn::Error::new(
                input.ident.span(),
                "DLPackExport needs a `#[dlpack(data)]` field (Vec<T>, Box<[T]>, Arc<[T]> or a \
                 DataSource such as dlbind::Buffer) or a `#[dlpack(array)]` ndarray field",
            ),
        );
        return None;
    };

    let kind = data_kind(data_key, &data_field, errors)?;
    if let (DataKind::Array, Some(span)) = (&kind, top.unchecked_extent) {
        push_err(
            errors,
            syn::Error::new(
                span,
                "`unchecked_extent` has nothing to skip on a `#[dlpack(array)]` type: an ndarray \
             array's shape and strides are its own and are never checked",
            ),
        );
        return None;
    }
    let ok = dims_are_valid(&kind, &slots.shape, &slots.strides, &data_field, errors);
    let dtype = dtype_source(top.dtype, slots.dtype, &kind, &data_field, spec, errors);
    let readonly = readonly_source(top.readonly, slots.readonly, errors);
    if !ok {
        return None;
    }
    Some(Model {
        ident: input.ident.clone(),
        data: DataField {
            field: data_field,
            kind,
        },
        shape: slots.shape,
        strides: slots.strides,
        dtype: dtype?,
        device: slots.device,
        readonly: readonly?,
        stream: slots.stream,
        custom_traverse: top.custom_traverse.is_some(),
        unchecked_extent: top.unchecked_extent.is_some(),
        merge_pymethods: top.merge_pymethods,
    })
}

/// What the data field is: an ndarray array (`#[dlpack(array)]`), a `Vec`/`Box`/`Arc` slice of a
/// known element type, or any other [`DataSource`](DataKind::Source).
fn data_kind(
    data_key: Key,
    data_field: &FieldRef,
    errors: &mut Option<syn::Error>,
) -> Option<DataKind> {
    Some(if data_key == Key::Array {
        if !is_owned_ndarray(&data_field.ty) {
            push_err(
                errors,
                syn::Error::new(
                    data_field.span,
                    "`#[dlpack(array)]` expects an owned ndarray array: `ArrayD<T>`, \
                     `Array<T, D>`, `Array1<T>` … `Array6<T>` or `ArcArray<T, D>`",
                ),
            );
            return None;
        }
        DataKind::Array
    } else {
        match slice_elem(&data_field.ty) {
            Some(_) => DataKind::Slice,
            None => DataKind::Source,
        }
    })
}

/// Checks the shape and strides fields against the data kind (an ndarray array brings its own;
/// anything else needs a shape) and their types; `false` after reporting a problem.
fn dims_are_valid(
    kind: &DataKind,
    shape: &Option<FieldRef>,
    strides: &Option<FieldRef>,
    data_field: &FieldRef,
    errors: &mut Option<syn::Error>,
) -> bool {
    let mut ok = true;
    if let DataKind::Array = kind {
        for (f, key) in [(shape, Key::Shape), (strides, Key::Strides)] {
            if let Some(f) = f {
                ok = false;
                push_err(
                    errors,
                    syn::Error::new(
                        f.key_span,
                        format!(
                            "`#[dlpack({})]` conflicts with `#[dlpack(array)]`: the array field \
                             `{}` provides shape and strides",
                            key.name(),
                            data_field.name()
                        ),
                    ),
                );
            }
        }
    } else if shape.is_none() {
        ok = false;
        push_err(
            errors,
            syn::Error::new(
                data_field.key_span,
                format!(
                    "the data field `{}` needs a `#[dlpack(shape)]` field (Vec<I> or [I; N] of an \
                     integer type)",
                    data_field.name()
                ),
            ),
        );
    }
    for (f, key) in [(shape, Key::Shape), (strides, Key::Strides)] {
        if let Some(f) = f
            && !is_dims_type(&f.ty)
        {
            ok = false;
            push_err(
                errors,
                syn::Error::new(
                    f.span,
                    format!(
                        "`#[dlpack({})]` expects `Vec<I>`, `Box<[I]>` or `[I; N]` with `I` an \
                         integer type (or a type that derefs to `[I]`)",
                        key.name()
                    ),
                ),
            );
        }
    }
    ok
}

/// Where the dtype comes from: the struct's `dtype = "…"`, a `#[dlpack(dtype)]` field, or the
/// data's element type; exactly one of them.
fn dtype_source(
    struct_dtype: Option<syn::LitStr>,
    field: Option<FieldRef>,
    kind: &DataKind,
    data_field: &FieldRef,
    spec: &SpecView,
    errors: &mut Option<syn::Error>,
) -> Option<DtypeSource> {
    if let DataKind::Array = kind {
        // An ndarray array's layout is trusted (its shape and strides are its own), so its dtype
        // must be its elements' too: a named dtype could describe more bytes than it holds.
        let why = format!(
            "the array's shape and strides are trusted, so its dtype must be its element type's: \
             store the elements as one of {} (e.g. `Array1<f64>`), or use a `dlbind::Buffer` \
             data field with a `#[dlpack(dtype)]`, whose span is checked",
            spec.rust_type_names()
        );
        let mut refused = false;
        if let Some(lit) = &struct_dtype {
            refused = true;
            push_err(
                errors,
                syn::Error::new(
                    lit.span(),
                    format!(
                        "`dtype = \"{}\"` cannot name the dtype of a `#[dlpack(array)]` field: {why}",
                        lit.value()
                    ),
                ),
            );
        }
        if let Some(f) = &field {
            refused = true;
            push_err(
                errors,
                syn::Error::new(
                    f.key_span,
                    format!(
                        "a `#[dlpack(dtype)]` field (`{}`) cannot name the dtype of a `#[dlpack(array)]` field: {why}",
                        f.name()
                    ),
                ),
            );
        }
        return if refused {
            None
        } else {
            Some(DtypeSource::Element)
        };
    }
    match (struct_dtype, field) {
        (Some(lit), Some(field)) => {
            push_err(
                errors,
                syn::Error::new(
                    lit.span(),
                    format!(
                        "dtype given twice: struct-level `dtype = \"{}\"` and the `#[dlpack(dtype)]` \
                         field `{}`",
                        lit.value(),
                        field.name()
                    ),
                ),
            );
            None
        }
        (Some(lit), None) => match spec.dtype_by_name(&lit.value()) {
            Some(entry) => Some(DtypeSource::Fixed {
                entry: entry.clone(),
                span: lit.span(),
            }),
            None => {
                push_err(
                    errors,
                    syn::Error::new(
                        lit.span(),
                        format!(
                            "unknown dtype `{}`; known: {}",
                            lit.value(),
                            spec.dtype_names()
                        ),
                    ),
                );
                None
            }
        },
        (None, Some(field)) => Some(DtypeSource::Field(field)),
        (None, None) => match kind {
            // The element type's dtype, asked of the type itself by the expansion (a type
            // without one is the compiler's error, `DLPackElement`'s message).
            DataKind::Slice | DataKind::Array => Some(DtypeSource::Element),
            DataKind::Source => {
                push_err(
                    errors,
                    syn::Error::new(
                        data_field.span,
                        format!(
                            "the data field `{}` of type `{}` has no static element type: add a \
                             `#[dlpack(dtype)]` field of type `dlbind::spec::types::DLDataType` or \
                             `#[dlpack(dtype = \"…\")]` on the struct",
                            data_field.name(),
                            type_text(&data_field.ty)
                        ),
                    ),
                );
                None
            }
        },
    }
}

/// Whether exports are read-only: always (on the struct), per a `#[dlpack(readonly)]` field, or
/// never; not both.
fn readonly_source(
    struct_readonly: Option<Span>,
    field: Option<FieldRef>,
    errors: &mut Option<syn::Error>,
) -> Option<Readonly> {
    match (struct_readonly, field) {
        (Some(span), Some(field)) => {
            push_err(
                errors,
                syn::Error::new(
                    span,
                    format!(
                        "readonly given twice: on the struct and as the field `{}`",
                        field.name()
                    ),
                ),
            );
            None
        }
        (Some(_), None) => Some(Readonly::Always),
        (None, Some(f)) => Some(Readonly::Field(f)),
        (None, None) => Some(Readonly::Never),
    }
}

// ---------------------------------------------------------------------------------------------
// Type inspection helpers (syntactic; the compiler checks the rest through spanned expressions).

fn strip(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => strip(&g.elem),
        Type::Paren(p) => strip(&p.elem),
        t => t,
    }
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match strip(ty) {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

fn type_args(seg: &syn::PathSegment) -> Vec<&Type> {
    match &seg.arguments {
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|g| match g {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `Vec<T>` → T, `Box<[T]>` / `Arc<[T]>` → T.
pub fn slice_elem(ty: &Type) -> Option<Type> {
    let seg = last_segment(ty)?;
    let args = type_args(seg);
    let [arg] = args.as_slice() else { return None };
    match seg.ident.to_string().as_str() {
        "Vec" => Some((*arg).clone()),
        "Box" | "Arc" => match strip(arg) {
            Type::Slice(s) => Some((*s.elem).clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Whether the type is spelled as an owned ndarray array with an element type argument: this
/// only picks the data kind (the `nd::` helpers' bounds check the actual type, element
/// included; issue 50).
pub fn is_owned_ndarray(ty: &Type) -> bool {
    let Some(seg) = last_segment(ty) else {
        return false;
    };
    let owned = matches!(
        seg.ident.to_string().as_str(),
        "Array"
            | "ArrayD"
            | "Array0"
            | "Array1"
            | "Array2"
            | "Array3"
            | "Array4"
            | "Array5"
            | "Array6"
            | "ArcArray"
            | "ArcArray1"
            | "ArcArray2"
    );
    owned && !type_args(seg).is_empty()
}

const INTEGERS: &[&str] = &[
    "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64", "isize",
];

fn is_integer(ty: &Type) -> bool {
    match strip(ty) {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .get_ident()
            .is_some_and(|i| INTEGERS.contains(&i.to_string().as_str())),
        _ => false,
    }
}

/// Whether `ty` can be a shape/strides field: `Vec<I>`, `Box<[I]>`, `Arc<[I]>`, `[I; N]` with `I`
/// an integer type, or another named type (e.g. a small inline vector) that the compiler will
/// check derefs to `[I]`. Scalars, tuples, references and containers of non-integers are not.
pub fn is_dims_type(ty: &Type) -> bool {
    match strip(ty) {
        Type::Array(a) => is_integer(&a.elem),
        t @ Type::Path(p) if p.qself.is_none() => match slice_elem(t) {
            Some(elem) => is_integer(&elem),
            None => {
                let scalar = p.path.get_ident().is_some_and(|i| {
                    INTEGERS.contains(&i.to_string().as_str())
                        || ["f32", "f64", "bool", "char", "str", "String"]
                            .contains(&i.to_string().as_str())
                });
                !scalar
            }
        },
        _ => false,
    }
}

fn type_text(ty: &Type) -> String {
    let s = quote::ToTokens::to_token_stream(ty).to_string();
    s.replace(" < ", "<")
        .replace(" >", ">")
        .replace("< ", "<")
        .replace(" , ", ", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::fixture;
    use syn::parse_quote;

    fn model(input: DeriveInput) -> syn::Result<Model> {
        Model::from_derive_input(&input, &fixture())
    }

    fn err(input: DeriveInput) -> String {
        match model(input) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    #[test]
    fn vec_with_shape_and_strides() {
        let m = model(parse_quote! {
            struct Image {
                #[dlpack(data)] pixels: Vec<u8>,
                #[dlpack(shape)] dims: Vec<usize>,
                #[dlpack(strides)] strides: Vec<isize>,
            }
        })
        .unwrap();
        assert!(matches!(m.data.kind, DataKind::Slice));
        assert_eq!(m.shape.as_ref().unwrap().name(), "dims");
        assert_eq!(m.strides.as_ref().unwrap().name(), "strides");
        assert!(matches!(m.dtype, DtypeSource::Element));
        assert!(matches!(m.readonly, Readonly::Never));
        assert!(m.device.is_none());
    }

    #[test]
    fn box_arc_and_paths() {
        for ty in [
            quote::quote!(Box<[f32]>),
            quote::quote!(std::sync::Arc<[half::bf16]>),
            quote::quote!(::std::vec::Vec<num_complex::Complex<f32>>),
            quote::quote!(Vec<bool>),
        ] {
            let input: DeriveInput = syn::parse2(quote::quote! {
                struct T { #[dlpack(data)] d: #ty, #[dlpack(shape)] s: [u32; 2] }
            })
            .unwrap();
            let m = model(input).unwrap_or_else(|e| panic!("{ty}: {e}"));
            assert!(matches!(m.dtype, DtypeSource::Element));
        }
    }

    #[test]
    fn stream_field_and_duplicate_stream() {
        let m = model(parse_quote! {
            struct T { #[dlpack(data)] d: Vec<f32>, #[dlpack(shape)] s: Vec<usize>, #[dlpack(stream)] pending: Option<u64> }
        })
        .unwrap();
        assert_eq!(m.stream.unwrap().name(), "pending");
        let m = model(parse_quote! { struct T { #[dlpack(data)] d: Vec<f32>, #[dlpack(shape)] s: Vec<usize> } }).unwrap();
        assert!(m.stream.is_none());
        let e = model(parse_quote! {
            struct T { #[dlpack(data)] d: Vec<f32>, #[dlpack(shape)] s: Vec<usize>,
                       #[dlpack(stream)] a: Option<u64>, #[dlpack(stream)] b: Option<u64> }
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("stream"), "{e}");
    }

    #[test]
    fn buffer_with_dtype_field_device_readonly() {
        let m = model(parse_quote! {
            struct Tensor {
                #[dlpack(data)] buf: dlbind::Buffer,
                #[dlpack(dtype)] dtype: DLDataType,
                #[dlpack(shape)] shape: Vec<i64>,
                #[dlpack(strides)] strides: Vec<i64>,
                #[dlpack(device)] device: Device,
                #[dlpack(readonly)] readonly: bool,
                other: String,
            }
        })
        .unwrap();
        assert!(matches!(m.data.kind, DataKind::Source));
        assert!(matches!(m.dtype, DtypeSource::Field(_)));
        assert!(matches!(m.readonly, Readonly::Field(_)));
        assert_eq!(m.device.unwrap().name(), "device");
    }

    #[test]
    fn struct_level_dtype_and_readonly() {
        let m = model(parse_quote! {
            #[dlpack(dtype = "bfloat16", readonly)]
            struct Raw { #[dlpack(data)] bytes: Vec<u16>, #[dlpack(shape)] n: [usize; 1] }
        })
        .unwrap();
        match m.dtype {
            DtypeSource::Fixed { entry, .. } => {
                assert_eq!((entry.code, entry.bits, entry.lanes), (4, 16, 1))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(m.readonly, Readonly::Always));
    }

    #[test]
    fn raw_storage_skips_element_check() {
        model(parse_quote! {
            #[dlpack(dtype = "float8_e4m3fn")]
            struct Raw { #[dlpack(data)] bytes: Vec<[u8; 1]>, #[dlpack(shape)] n: Vec<u64> }
        })
        .unwrap();
    }

    #[test]
    fn ndarray_field() {
        for ty in [
            quote::quote!(ndarray::ArrayD<f32>),
            quote::quote!(Array<i64, Ix2>),
            quote::quote!(Array3<u8>),
        ] {
            let input: DeriveInput =
                syn::parse2(quote::quote! { struct A { #[dlpack(array)] a: #ty } }).unwrap();
            let m = model(input).unwrap_or_else(|e| panic!("{ty}: {e}"));
            assert!(matches!(m.data.kind, DataKind::Array));
            assert!(m.shape.is_none());
        }
    }

    #[test]
    fn tuple_struct() {
        let m = model(parse_quote! {
            struct T(#[dlpack(data)] Vec<f32>, #[dlpack(shape)] Vec<usize>);
        })
        .unwrap();
        assert_eq!(m.data.field.name(), "0");
        assert_eq!(m.shape.unwrap().name(), "1");
    }

    #[test]
    fn no_data_field() {
        let e = err(parse_quote! { struct T { #[dlpack(shape)] s: Vec<usize> } });
        assert!(e.contains("needs a `#[dlpack(data)]` field"), "{e}");
        let e = err(parse_quote! { struct T; });
        assert!(e.contains("needs a `#[dlpack(data)]` field"), "{e}");
    }

    #[test]
    fn duplicates() {
        let e = err(parse_quote! {
            struct T { #[dlpack(data)] a: Vec<u8>, #[dlpack(data)] b: Vec<u8>, #[dlpack(shape)] s: Vec<usize> }
        });
        assert!(
            e.contains("duplicate data field: `a` is already the data"),
            "{e}"
        );
        let e = err(parse_quote! {
            struct T { #[dlpack(data)] a: Vec<u8>, #[dlpack(shape)] s: Vec<usize>, #[dlpack(shape)] t: Vec<usize> }
        });
        assert!(
            e.contains("duplicate `#[dlpack(shape)]` field: `s` already has it"),
            "{e}"
        );
        let e = err(parse_quote! {
            struct T { #[dlpack(data)] a: Vec<u8>, #[dlpack(shape)] s: Vec<usize>,
                       #[dlpack(strides)] x: Vec<isize>, #[dlpack(strides)] y: Vec<isize> }
        });
        assert!(
            e.contains("duplicate `#[dlpack(strides)]` field: `x` already has it"),
            "{e}"
        );
        let e = err(parse_quote! {
            struct T { #[dlpack(data, shape)] a: Vec<u8> }
        });
        assert!(e.contains("one #[dlpack] role"), "{e}");
    }

    #[test]
    fn data_without_shape() {
        let e = err(parse_quote! { struct T { #[dlpack(data)] a: Vec<u8> } });
        assert!(
            e.contains("the data field `a` needs a `#[dlpack(shape)]` field"),
            "{e}"
        );
    }

    #[test]
    fn array_with_shape_conflicts() {
        let e = err(parse_quote! {
            struct T { #[dlpack(array)] a: ndarray::ArrayD<f32>, #[dlpack(shape)] s: Vec<usize> }
        });
        assert!(e.contains("conflicts with `#[dlpack(array)]`"), "{e}");
        let e = err(parse_quote! { struct T { #[dlpack(array)] a: Vec<f32> } });
        assert!(e.contains("expects an owned ndarray array"), "{e}");
    }

    #[test]
    fn bad_shape_type() {
        for ty in [
            quote::quote!(Vec<f32>),
            quote::quote!(usize),
            quote::quote!((usize, usize)),
            quote::quote!([f64; 2]),
            quote::quote!(&'static [usize]),
        ] {
            let input: DeriveInput = syn::parse2(quote::quote! {
                struct T { #[dlpack(data)] a: Vec<u8>, #[dlpack(shape)] s: #ty }
            })
            .unwrap();
            let e = err(input);
            assert!(e.contains("integer type"), "{ty}: {e}");
        }
        // A named container type is left to the compiler (it must deref to `[I]`).
        model(parse_quote! {
            struct T { #[dlpack(data)] a: Vec<u8>, #[dlpack(shape)] s: Dims, #[dlpack(strides)] t: Box<[isize]> }
        })
        .unwrap();
    }

    #[test]
    fn unknown_key() {
        let e = err(parse_quote! {
            struct T { #[dlpack(data)] a: Vec<u8>, #[dlpack(shape)] s: Vec<usize>, #[dlpack(stride)] t: Vec<isize> }
        });
        assert!(e.contains("unknown dlpack attribute `stride`"), "{e}");
    }

    /// The element type is the compiler's to check (`DLPackElement`), through any alias: the
    /// model reads nothing from how it is spelled.
    #[test]
    fn element_types_are_not_read_from_spelling() {
        for ty in [
            quote::quote!(Vec<String>),
            quote::quote!(Vec<Elem>),
            quote::quote!(Box<[num_complex::Complex<u8>]>),
        ] {
            let input: DeriveInput = syn::parse2(quote::quote! {
                struct T { #[dlpack(data)] a: #ty, #[dlpack(shape)] s: Vec<usize> }
            })
            .unwrap();
            let m = model(input).unwrap_or_else(|e| panic!("{ty}: {e}"));
            assert!(matches!(m.dtype, DtypeSource::Element));
        }
    }

    /// Issue 50: an ndarray array's layout is trusted, so its dtype is its element type's; a
    /// struct-level dtype or a dtype field on it is refused, saying why.
    #[test]
    fn an_array_field_takes_no_named_dtype() {
        let e = err(parse_quote! {
            #[dlpack(dtype = "float64")]
            struct T { #[dlpack(array)] a: ndarray::Array1<u8> }
        });
        assert!(
            e.contains("`dtype = \"float64\"` cannot name the dtype of a `#[dlpack(array)]` field"),
            "{e}"
        );
        assert!(e.contains("its dtype must be its element type's"), "{e}");
        let e = err(parse_quote! {
            struct T { #[dlpack(array)] a: ndarray::Array1<u8>, #[dlpack(dtype)] d: DLDataType }
        });
        assert!(
            e.contains("a `#[dlpack(dtype)]` field (`d`) cannot name the dtype"),
            "{e}"
        );
    }

    #[test]
    fn unchecked_extent_is_a_struct_item_for_non_array_data() {
        let m = model(parse_quote! {
            #[dlpack(unchecked_extent)]
            struct T { #[dlpack(data)] a: Vec<f32>, #[dlpack(shape)] s: Vec<i64> }
        })
        .unwrap();
        assert!(m.unchecked_extent);
        let e = err(parse_quote! {
            struct T { #[dlpack(data)] a: Vec<f32>, #[dlpack(shape)] s: Vec<i64>, #[dlpack(unchecked_extent)] x: u8 }
        });
        assert!(e.contains("`unchecked_extent` goes on the struct"), "{e}");
        let e = err(parse_quote! {
            #[dlpack(unchecked_extent, unchecked_extent)]
            struct T { #[dlpack(data)] a: Vec<f32>, #[dlpack(shape)] s: Vec<i64> }
        });
        assert!(
            e.contains("duplicate struct-level `unchecked_extent`"),
            "{e}"
        );
        let e = err(parse_quote! {
            #[dlpack(unchecked_extent)]
            struct T { #[dlpack(array)] a: ndarray::ArrayD<f32> }
        });
        assert!(
            e.contains("nothing to skip on a `#[dlpack(array)]` type"),
            "{e}"
        );
    }

    #[test]
    fn unknown_dtype_name() {
        let e = err(parse_quote! {
            #[dlpack(dtype = "bfloat17")]
            struct T { #[dlpack(data)] a: Vec<u16>, #[dlpack(shape)] s: Vec<usize> }
        });
        assert!(
            e.contains("unknown dtype `bfloat17`; known: bool, int8"),
            "{e}"
        );
    }

    #[test]
    fn source_needs_dtype() {
        let e = err(parse_quote! {
            struct T { #[dlpack(data)] a: Buffer, #[dlpack(shape)] s: Vec<usize> }
        });
        assert!(e.contains("has no static element type"), "{e}");
    }

    #[test]
    fn conflicting_dtype_and_readonly() {
        let e = err(parse_quote! {
            #[dlpack(dtype = "float32", readonly)]
            struct T { #[dlpack(data)] a: Buffer, #[dlpack(shape)] s: Vec<usize>,
                       #[dlpack(dtype)] d: DLDataType, #[dlpack(readonly)] r: bool }
        });
        assert!(e.contains("dtype given twice"), "{e}");
        assert!(e.contains("readonly given twice"), "{e}");
    }

    #[test]
    fn misplaced_keys() {
        let e = err(parse_quote! {
            #[dlpack(shape)]
            struct T { #[dlpack(data)] a: Vec<u8>, #[dlpack(shape)] s: Vec<usize> }
        });
        assert!(e.contains("goes on a field"), "{e}");
        let e = err(parse_quote! {
            struct T { #[dlpack(data)] a: Vec<u8>, #[dlpack(shape)] s: Vec<usize>, #[dlpack(dtype = "float32")] d: u8 }
        });
        assert!(e.contains("goes on the struct"), "{e}");
    }

    #[test]
    fn not_a_struct_and_generics() {
        let e = err(parse_quote! { enum E { A } });
        assert!(e.contains("only be derived for structs"), "{e}");
        let e = err(parse_quote! {
            struct T<U> { #[dlpack(data)] a: Vec<U>, #[dlpack(shape)] s: Vec<usize> }
        });
        assert!(e.contains("does not support generic structs"), "{e}");
    }
}
