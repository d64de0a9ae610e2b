//! `pkg/apis/core/validation` for ConfigMaps and Secrets: their keys, and
//! the size of their data.

use std::collections::BTreeSet;

use serde_json::Value;

use super::format::config_key;
use super::{entries, err, invalid, ErrorType, FieldError};

/// ConfigMap and Secret data: 1 MiB (`MaxSecretSize`, `RuntimeObjectsMaxSize`).
const DATA_MAX_BYTES: usize = 1024 * 1024;

/// ConfigMap and Secret keys (`ValidateConfigMap`, `ValidateSecret`).
pub(super) fn data_keys(obj: &Value, fields: &[&str], e: &mut Vec<FieldError>) {
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for f in fields {
        for (k, v) in entries(obj.get(*f)) {
            for msg in config_key(k) {
                e.push(invalid(format!("{f}[{k}]"), k.as_str(), msg));
            }
            if !seen.insert(k.clone()) && *f == "binaryData" {
                e.push(invalid(format!("data[{k}]"), k.as_str(), "duplicate of key present in binaryData"));
            }
            total += v.as_str().map_or(0, str::len);
        }
    }
    if total > DATA_MAX_BYTES {
        e.push(err(ErrorType::TooLong, "data", "", format!("may not be more than {DATA_MAX_BYTES} bytes")));
    }
}
