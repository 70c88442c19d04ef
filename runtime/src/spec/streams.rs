//! The spec's per-device stream rules (generated from `streams:`): `resolve_stream`, `consumer_default_stream`,
//! `has_stream_rules` and `stream_value_for` (the rules read backwards, for consumers).
include!("../generated/streams.rs");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::types::DLDeviceType;

    /// `stream_value_for` inverts `resolve_stream`: every value a device accepts maps to an
    /// action whose value resolves to the same action; devices without rules have none.
    #[test]
    fn stream_value_for_inverts_the_rules() {
        let mut checked = 0;
        for code in 0..40 {
            let dev = DLDeviceType(code);
            for v in [-1i64, 0, 1, 2, 3, 4096, i64::MAX] {
                let Ok(action) = resolve_stream(dev, Some(v)) else {
                    continue;
                };
                if !has_stream_rules(dev) {
                    panic!("{dev:?} accepted stream {v} without rules");
                }
                let back = stream_value_for(dev, action)
                    .unwrap_or_else(|| panic!("{dev:?}: no value for {action:?}"));
                assert_eq!(resolve_stream(dev, Some(back)), Ok(action), "{dev:?} {v}");
                checked += 1;
            }
            if !has_stream_rules(dev) {
                assert_eq!(consumer_default_stream(dev), None);
                assert_eq!(stream_value_for(dev, StreamAction::NoSync), None);
            }
        }
        assert!(
            checked >= 8,
            "the spec's CUDA and ROCm rules were exercised ({checked})"
        );
        assert_eq!(
            stream_value_for(DLDeviceType::kDLCUDA, StreamAction::Pointer(2)),
            None,
            "2 is not a pointer on CUDA"
        );
    }
}
