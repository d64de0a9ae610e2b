//! `pkg/apis/core/validation` for Services: the type, the ports (names,
//! numbers, protocols, target ports) and the selector's labels.

use std::collections::BTreeSet;

use serde_json::Value;

use super::format::{dns1123_label, port_name};
use super::meta::labels;
use super::{err, invalid, items, not_supported, required, s, ErrorType, FieldError};

/// `ValidateService`, the parts users meet.
pub(super) fn service(spec: &Value, e: &mut Vec<FieldError>) {
    const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    let ty = s(spec, "/type").unwrap_or("ClusterIP");
    if !TYPES.contains(&ty) {
        e.push(not_supported("spec.type", ty, &TYPES));
    }
    let ports = items(spec.get("ports"));
    let headless = s(spec, "/clusterIP") == Some("None");
    if ports.is_empty() && ty != "ExternalName" && !headless {
        e.push(required("spec.ports", ""));
    }
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = format!("spec.ports[{i}]");
        let name = s(port, "/name").unwrap_or_default();
        if ports.len() > 1 && name.is_empty() {
            e.push(required(format!("{p}.name"), ""));
        } else if !name.is_empty() {
            for msg in dns1123_label(name) {
                e.push(invalid(format!("{p}.name"), name, msg));
            }
            if !names.insert(name.to_string()) {
                e.push(err(ErrorType::Duplicate, format!("{p}.name"), name, ""));
            }
        }
        match port.get("port").and_then(Value::as_i64) {
            None | Some(0) => e.push(required(format!("{p}.port"), "")),
            Some(n) if !(1..=65535).contains(&n) => {
                e.push(invalid(format!("{p}.port"), n, "must be between 1 and 65535, inclusive"))
            }
            _ => {}
        }
        let proto = s(port, "/protocol").unwrap_or("TCP");
        if !["SCTP", "TCP", "UDP"].contains(&proto) {
            e.push(not_supported(format!("{p}.protocol"), proto, &["SCTP", "TCP", "UDP"]));
        }
        match port.get("targetPort") {
            Some(Value::Number(n)) => {
                let n = n.as_i64().unwrap_or(0);
                if !(1..=65535).contains(&n) {
                    e.push(invalid(format!("{p}.targetPort"), n, "must be between 1 and 65535, inclusive"));
                }
            }
            Some(Value::String(t)) => {
                for msg in port_name(t) {
                    e.push(invalid(format!("{p}.targetPort"), t.as_str(), msg));
                }
            }
            _ => {}
        }
    }
    labels(spec.get("selector"), "spec.selector", e);
}
