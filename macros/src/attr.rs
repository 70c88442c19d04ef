//! Parsing of `#[dlpack(...)]` helper attributes into plain items (no validation of roles yet).

use proc_macro2::Span;
use syn::{Attribute, LitStr, spanned::Spanned};

/// The keys `#[dlpack(...)]` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Data,
    Shape,
    Strides,
    Dtype,
    Device,
    Readonly,
    Stream,
    Array,
    CustomTraverse,
    UncheckedExtent,
    MergePymethods,
}

impl Key {
    pub const ALL: &'static [Key] = &[
        Key::Data,
        Key::Shape,
        Key::Strides,
        Key::Dtype,
        Key::Device,
        Key::Readonly,
        Key::Stream,
        Key::Array,
        Key::CustomTraverse,
        Key::UncheckedExtent,
        Key::MergePymethods,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Key::Data => "data",
            Key::Shape => "shape",
            Key::Strides => "strides",
            Key::Dtype => "dtype",
            Key::Device => "device",
            Key::Readonly => "readonly",
            Key::Stream => "stream",
            Key::Array => "array",
            Key::CustomTraverse => "custom_traverse",
            Key::UncheckedExtent => "unchecked_extent",
            Key::MergePymethods => "merge_pymethods",
        }
    }

    pub fn from_name(name: &str) -> Option<Key> {
        Key::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// The keys an "unknown key" error lists: every one but the deprecated `merge_pymethods`.
    fn expected() -> String {
        Key::ALL
            .iter()
            .filter(|k| **k != Key::MergePymethods)
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One key inside `#[dlpack(...)]`, e.g. `data` or `dtype = "bfloat16"`.
#[derive(Debug, Clone)]
pub struct Item {
    pub key: Key,
    /// Span of the key (for "duplicate"/"misplaced" errors).
    pub span: Span,
    pub value: Option<LitStr>,
}

/// All `#[dlpack(...)]` items among `attrs`, in order. Other attributes are ignored.
/// Unknown keys and malformed syntax are errors (all of them, combined).
pub fn parse_items(attrs: &[Attribute]) -> syn::Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("dlpack")) {
        if let syn::Meta::Path(p) = &attr.meta {
            push_err(
                &mut errors,
                syn::Error::new(
                    p.span(),
                    format!(
                        "expected `#[dlpack(<key>)]` with a key: one of {}",
                        Key::expected()
                    ),
                ),
            );
            continue;
        }
        let res = attr.parse_nested_meta(|meta| {
            let ident = meta
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default();
            let Some(key) = Key::from_name(&ident) else {
                return Err(meta.error(format!(
                    "unknown dlpack attribute `{}`; expected one of: {}",
                    path_text(&meta.path),
                    Key::expected()
                )));
            };
            let value = if meta.input.peek(syn::Token![=]) {
                Some(meta.value()?.parse::<LitStr>()?)
            } else {
                None
            };
            items.push(Item {
                key,
                span: meta.path.span(),
                value,
            });
            Ok(())
        });
        if let Err(e) = res {
            push_err(&mut errors, e);
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(items),
    }
}

fn path_text(p: &syn::Path) -> String {
    p.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

pub(crate) fn push_err(acc: &mut Option<syn::Error>, e: syn::Error) {
    match acc {
        Some(a) => a.combine(e),
        None => *acc = Some(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    #[test]
    fn parses_keys_and_values() {
        let attrs: Vec<Attribute> = vec![
            parse_quote!(#[dlpack(data)]),
            parse_quote!(#[doc = "x"]),
            parse_quote!(#[dlpack(dtype = "bfloat16", readonly)]),
        ];
        let items = parse_items(&attrs).unwrap();
        let keys: Vec<_> = items.iter().map(|i| i.key).collect();
        assert_eq!(keys, [Key::Data, Key::Dtype, Key::Readonly]);
        assert_eq!(items[1].value.as_ref().unwrap().value(), "bfloat16");
        assert!(items[0].value.is_none());
    }

    #[test]
    fn unknown_key_is_an_error() {
        let attrs: Vec<Attribute> = vec![parse_quote!(#[dlpack(bogus)])];
        let err = parse_items(&attrs).unwrap_err().to_string();
        assert!(err.contains("unknown dlpack attribute `bogus`"), "{err}");
        assert!(err.contains("data, shape, strides"), "{err}");
    }

    #[test]
    fn bare_dlpack_is_an_error() {
        let attrs: Vec<Attribute> = vec![parse_quote!(#[dlpack])];
        assert!(parse_items(&attrs).is_err());
    }

    #[test]
    fn non_string_value_is_an_error() {
        let attrs: Vec<Attribute> = vec![parse_quote!(#[dlpack(dtype = 3)])];
        assert!(parse_items(&attrs).is_err());
    }
}
