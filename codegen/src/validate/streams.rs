//! Lowering `streams`: the per-device stream rules, checked against the device enum.

use std::collections::{HashMap, HashSet};

use crate::ir::{self, Item};
use crate::spec;

use super::Lower;

/// The declared stream actions: whether each carries the stream value.
type Actions = HashMap<String, bool>;

impl Lower {
    /// Step 6: the per-device stream rules, checked against the device enum.
    pub(super) fn lower_streams(
        &mut self,
        s: &spec::Streams,
        items: &[Item],
    ) -> Option<ir::Streams> {
        let dev = items.iter().find_map(|i| match i {
            Item::Enum(e) if e.name == s.device_enum => Some(e),
            _ => None,
        });
        if dev.is_none() {
            self.err(
                "streams.device_enum",
                format!("unknown enum `{}`", s.device_enum),
            );
        }
        let (actions, carrier) = self.stream_actions(s);
        self.check_action(
            &actions,
            "streams.stream_less.none".into(),
            &s.stream_less.none,
            false,
        );
        let mut rules = Vec::new();
        let mut devices = HashSet::new();
        for (i, r) in s.rules.iter().enumerate() {
            let rp = format!("streams.rules[{i}]");
            let Some(device_value) = dev.and_then(|d| d.value(&r.device)).map(|v| v.value) else {
                self.err(
                    format!("{rp}.device"),
                    format!(
                        "stream rule for unknown device `{}` (not a value of {})",
                        r.device, s.device_enum
                    ),
                );
                continue;
            };
            if !devices.insert(r.device.clone()) {
                self.err(
                    format!("{rp}.device"),
                    format!("duplicate stream rule for `{}`", r.device),
                );
            }
            self.check_stream_rule(&rp, r, s.below_min.min, &actions, carrier.is_some());
            rules.push(ir::StreamRule {
                device: r.device.clone(),
                device_value,
                none: r.none.clone(),
                consumer_default: r.consumer_default,
                values: r
                    .values
                    .iter()
                    .map(|v| ir::StreamValue {
                        value: v.value,
                        action: v.action.clone(),
                        reason: v.reason.clone(),
                    })
                    .collect(),
                pointers_above: r.pointers_above,
                doc: r.doc.clone(),
            });
        }
        Some(ir::Streams {
            device_enum: s.device_enum.clone(),
            actions: s
                .actions
                .iter()
                .map(|a| ir::StreamActionDef {
                    name: a.name.clone(),
                    carries_value: a.carries_value,
                    doc: a.doc.clone(),
                })
                .collect(),
            min: s.below_min.min,
            below_min_reason: s.below_min.reason.clone(),
            stream_less_none: s.stream_less.none.clone(),
            stream_less_reason: s.stream_less.reason.clone(),
            unlisted_reason: s.unlisted_reason.clone(),
            rules,
        })
    }

    /// The stream actions, each named once, and the one that carries the stream value (at
    /// most one may).
    fn stream_actions(&mut self, s: &spec::Streams) -> (Actions, Option<String>) {
        let mut actions = HashMap::new();
        let mut carrier = None;
        for (i, a) in s.actions.iter().enumerate() {
            if actions.insert(a.name.clone(), a.carries_value).is_some() {
                self.err(
                    format!("streams.actions[{i}].name"),
                    format!("duplicate stream action `{}`", a.name),
                );
            }
            if a.carries_value {
                if carrier.is_some() {
                    self.err(
                        format!("streams.actions[{i}].carries_value"),
                        "only one stream action can carry a value",
                    );
                }
                carrier = Some(a.name.clone());
            }
        }
        (actions, carrier)
    }

    /// `name` is a declared action (one that carries a value only where `allow_carrier`).
    fn check_action(&mut self, actions: &Actions, path: String, name: &str, allow_carrier: bool) {
        match actions.get(name) {
            None => self.err(path, format!("unknown stream action `{name}`")),
            Some(true) if !allow_carrier => self.err(
                path,
                format!("stream action `{name}` carries a value; use `pointers_above`"),
            ),
            _ => {}
        }
    }

    /// One device's rule: its `None` action, its listed values (unique, not below `min`, not
    /// overlapping `pointers_above`, each an action or a reason), `pointers_above` only with a
    /// value-carrying action, and a consumer default that is itself accepted.
    fn check_stream_rule(
        &mut self,
        rp: &str,
        r: &spec::StreamRule,
        min: i64,
        actions: &Actions,
        has_carrier: bool,
    ) {
        self.check_action(actions, format!("{rp}.none"), &r.none, false);
        let mut seen = HashSet::new();
        for (j, v) in r.values.iter().enumerate() {
            let vp = format!("{rp}.values[{j}]");
            if !seen.insert(v.value) {
                self.err(
                    format!("{vp}.value"),
                    format!("duplicate stream value {}", v.value),
                );
            }
            if v.value < min {
                self.err(
                    format!("{vp}.value"),
                    format!("stream value {} is below the minimum {min}", v.value),
                );
            }
            if let Some(p) = r.pointers_above
                && v.value > p
            {
                self.err(
                    format!("{vp}.value"),
                    format!("stream value {} overlaps `pointers_above: {p}`", v.value),
                );
            }
            match (&v.action, &v.reason) {
                (Some(a), None) => self.check_action(actions, format!("{vp}.action"), a, false),
                (None, Some(_)) => {}
                _ => self.err(
                    vp.clone(),
                    "a stream value needs exactly one of `action` or `reason`",
                ),
            }
        }
        if r.pointers_above.is_some() && !has_carrier {
            self.err(
                format!("{rp}.pointers_above"),
                "`pointers_above` needs a stream action with `carries_value: true`",
            );
        }
        if let Some(c) = r.consumer_default
            && (c < min || r.values.iter().any(|v| v.value == c && v.reason.is_some()))
        {
            self.err(
                format!("{rp}.consumer_default"),
                format!("consumer default {c} is itself rejected"),
            );
        }
    }
}
