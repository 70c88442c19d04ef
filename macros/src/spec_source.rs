//! Lowers `dlbind_codegen::ir::Ir::try_embedded()` (the spec compiled into dlbind-codegen) into
//! the [`SpecView`] the derive reads. The only module that knows the IR's shape.

use dlbind_codegen::ir::Ir;

use crate::spec::{DtypeEntry, ProtocolNames, SpecView};

pub fn load() -> Result<SpecView, String> {
    let ir = Ir::try_embedded().map_err(|e| e.to_string())?;
    lower(ir)
}

pub fn lower(ir: &Ir) -> Result<SpecView, String> {
    let dtypes = ir
        .dtypes
        .iter()
        .map(|d| DtypeEntry {
            name: d.name.clone(),
            code: d.code,
            bits: d.bits,
            lanes: d.lanes,
            rust_type: d.rust.clone(),
        })
        .collect();
    let dl = &ir.protocol.dlpack;
    // The runtime's `dlpack_method` takes the keywords by role; the IR names each role by the
    // Rust constant that holds the keyword (KW_STREAM, …), so match on that, not on position.
    let kw = |konst: &str| -> Result<String, String> {
        dl.kwargs
            .iter()
            .find(|k| k.const_name == konst)
            .map(|k| k.name.clone())
            .ok_or_else(|| format!("`{}` has no keyword with const `{konst}`", dl.name))
    };
    if dl.kwargs.len() != 4 {
        return Err(format!(
            "`{}` has {} keywords; the runtime's dlpack_method takes 4 (stream, max_version, \
             dl_device, copy)",
            dl.name,
            dl.kwargs.len()
        ));
    }
    Ok(SpecView {
        dtypes,
        protocol: ProtocolNames {
            dlpack_method: dl.name.clone(),
            dlpack_device_method: ir.protocol.dlpack_device.name.clone(),
            kw_stream: kw("KW_STREAM")?,
            kw_max_version: kw("KW_MAX_VERSION")?,
            kw_dl_device: kw("KW_DL_DEVICE")?,
            kw_copy: kw("KW_COPY")?,
        },
        exchange_attr: ir.exchange_attribute.as_ref().map(|a| a.value.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_spec_lowers() {
        let spec = load().expect("embedded spec");
        let f32_ = spec.dtype_by_name("float32").expect("float32");
        assert_eq!((f32_.code, f32_.bits, f32_.lanes), (2, 32, 1));
        assert!(spec.dtype_by_name("bfloat16").is_some());
        assert_eq!(
            spec.protocol.dlpack_kwargs(),
            ["stream", "max_version", "dl_device", "copy"]
        );
        assert_eq!(spec.protocol.dlpack_method, "__dlpack__");
        assert_eq!(spec.protocol.dlpack_device_method, "__dlpack_device__");
        assert_eq!(
            spec.exchange_attr.as_deref(),
            Some("__dlpack_c_exchange_api__")
        );
        let ty: syn::Type = syn::parse_quote!(half::bf16);
        assert_eq!(spec.dtype_for_rust_type(&ty).unwrap().name, "bfloat16");
        let ty: syn::Type = syn::parse_quote!(Complex<f64>);
        assert_eq!(spec.dtype_for_rust_type(&ty).unwrap().name, "complex128");
    }
}
