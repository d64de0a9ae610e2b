//! Kubernetes protobuf bodies, decoded into the JSON the rest of the sim
//! works on. kubectl's typed commands (`kubectl create namespace x`,
//! `create deployment`, …) send `application/vnd.kubernetes.protobuf` and
//! do not fall back to JSON, so a sim that refuses protobuf fails the first
//! command a person types.
//!
//! The body is the API server's envelope: the magic `k8s\0`, then a
//! `runtime.Unknown` message whose `typeMeta` names the kind and whose `raw`
//! holds the object. The object is decoded by the field tables in
//! `fields.rs`; JSON is what the API server would have read from the same
//! object: empty strings, zero numbers and unset times are left out (as the
//! Go types' `omitempty` does), empty messages kept (`emptyDir: {}` means
//! something).

mod fields;

use base64::Engine as _;
use serde_json::{Map, Value};

/// The magic that opens every Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, Clone, Copy)]
pub(crate) enum Type {
    Str,
    Int,
    Bool,
    Bytes,
    Time,
    IntOrString,
    Quantity,
    Msg(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Label {
    One,
    Many,
    Map,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Field(pub u32, pub &'static str, pub Type, pub Label);

/// Why a body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("not a Kubernetes protobuf body (no k8s\\0 magic)")]
    NoMagic,
    #[error(
        "the sim does not decode protobuf for {0}; send JSON (kubectl apply -f, or -o json | kubectl create -f -)"
    )]
    UnknownKind(String),
    #[error("malformed protobuf: {0}")]
    Malformed(&'static str),
}

/// Decodes an enveloped protobuf object into its JSON form.
pub fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let rest = body.strip_prefix(MAGIC).ok_or(DecodeError::NoMagic)?;
    let mut type_meta = Map::new();
    let mut raw: &[u8] = &[];
    for field in Reader(rest) {
        match field? {
            (1, Wire::Bytes(b)) => {
                for f in Reader(b) {
                    match f? {
                        // runtime.TypeMeta: apiVersion first (meta/v1's has kind first).
                        (1, Wire::Bytes(v)) => type_meta.insert("apiVersion".into(), text(v)?.into()),
                        (2, Wire::Bytes(k)) => type_meta.insert("kind".into(), text(k)?.into()),
                        _ => None,
                    };
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let kind = type_meta.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    let api_version = type_meta.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    let message = message_name(&api_version, &kind);
    if fields::fields(&message).is_none() {
        return Err(DecodeError::UnknownKind(format!("{kind} ({api_version})")));
    }
    let mut obj = object(raw, &message)?;
    if let Value::Object(o) = &mut obj {
        o.insert("apiVersion".into(), api_version.into());
        o.insert("kind".into(), kind.into());
    }
    Ok(obj)
}

/// `apps/v1` + `Deployment` → `apps.v1.Deployment`; the core group is `core`,
/// and a dotted group is named by its first label (`rbac.authorization.k8s.io` → `rbac`).
fn message_name(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("core", api_version));
    let package = group.split('.').next().unwrap_or(group);
    format!("{package}.{version}.{kind}")
}

fn text(b: &[u8]) -> Result<&str, DecodeError> {
    std::str::from_utf8(b).map_err(|_| DecodeError::Malformed("a string that is not UTF-8"))
}

fn object(bytes: &[u8], message: &str) -> Result<Value, DecodeError> {
    let table = fields::fields(message).ok_or(DecodeError::Malformed("a message the tables do not know"))?;
    let mut out = Map::new();
    for field in Reader(bytes) {
        let (number, wire) = field?;
        let Some(Field(_, name, ty, label)) = table.iter().find(|f| f.0 == number).copied() else { continue };
        match label {
            Label::One => {
                let v = value(wire, ty)?;
                // Embedded Go structs whose fields are inline in JSON (a
                // Volume's source, a key selector's object reference).
                if matches!(name, "ephemeralContainerCommon" | "volumeSource" | "localObjectReference") {
                    if let Value::Object(inner) = v {
                        out.extend(inner);
                    }
                    continue;
                }
                if !is_zero(&v) {
                    out.insert(name.into(), v);
                }
            }
            Label::Many => {
                let v = value(wire, ty)?;
                out.entry(name).or_insert_with(|| Value::Array(Vec::new())).as_array_mut().expect("array").push(v);
            }
            Label::Map => {
                let Wire::Bytes(entry) = wire else {
                    return Err(DecodeError::Malformed("a map entry that is not a message"));
                };
                let (mut key, mut val) = (String::new(), Value::Null);
                for f in Reader(entry) {
                    match f? {
                        (1, Wire::Bytes(k)) => key = text(k)?.to_string(),
                        (2, w) => val = value(w, ty)?,
                        _ => {}
                    }
                }
                if val.is_null() {
                    val = match ty {
                        Type::Msg(_) => Value::Object(Map::new()),
                        _ => Value::String(String::new()),
                    };
                }
                out.entry(name)
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
                    .expect("map")
                    .insert(key, val);
            }
        }
    }
    Ok(Value::Object(out))
}

/// The JSON form leaves these out (`omitempty`).
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0),
        _ => false,
    }
}

fn value(wire: Wire, ty: Type) -> Result<Value, DecodeError> {
    Ok(match (ty, wire) {
        (Type::Str, Wire::Bytes(b)) => text(b)?.into(),
        (Type::Bytes, Wire::Bytes(b)) => base64::engine::general_purpose::STANDARD.encode(b).into(),
        (Type::Int, Wire::Varint(n)) => (n as i64).into(),
        (Type::Bool, Wire::Varint(n)) => (n != 0).into(),
        (Type::Msg(m), Wire::Bytes(b)) => object(b, m)?,
        (Type::Quantity, Wire::Bytes(b)) => {
            let mut s = Value::String(String::new());
            for f in Reader(b) {
                if let (1, Wire::Bytes(q)) = f? {
                    s = text(q)?.into();
                }
            }
            s
        }
        (Type::IntOrString, Wire::Bytes(b)) => {
            let (mut kind, mut int, mut string) = (0, 0i64, String::new());
            for f in Reader(b) {
                match f? {
                    (1, Wire::Varint(k)) => kind = k,
                    (2, Wire::Varint(i)) => int = i as i32 as i64,
                    (3, Wire::Bytes(s)) => string = text(s)?.to_string(),
                    _ => {}
                }
            }
            if kind == 1 {
                string.into()
            } else {
                int.into()
            }
        }
        (Type::Time, Wire::Bytes(b)) => {
            let (mut secs, mut nanos) = (0i64, 0u32);
            for f in Reader(b) {
                match f? {
                    (1, Wire::Varint(s)) => secs = s as i64,
                    (2, Wire::Varint(n)) => nanos = n as u32,
                    _ => {}
                }
            }
            if secs == 0 && nanos == 0 {
                Value::Null
            } else {
                chrono::DateTime::from_timestamp(secs, nanos)
                    .map(|t| Value::String(t.format("%Y-%m-%dT%H:%M:%SZ").to_string()))
                    .unwrap_or(Value::Null)
            }
        }
        _ => return Err(DecodeError::Malformed("a field of the wrong wire type")),
    })
}

/// One field's payload, by wire type.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// 32- and 64-bit fields: no message the tables know uses them.
    Fixed,
}

/// The fields of one message, in order.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.0.split_first().ok_or(DecodeError::Malformed("a truncated varint"))?;
            self.0 = rest;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(DecodeError::Malformed("a varint longer than ten bytes"))
    }
    fn take(&mut self, n: usize) -> Result<&'_ [u8], DecodeError> {
        if n > self.0.len() {
            return Err(DecodeError::Malformed("a length beyond the end of the message"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<(u32, Wire<'a>), DecodeError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let mut step = || -> Result<(u32, Wire<'a>), DecodeError> {
            let key = self.varint()?;
            let number = (key >> 3) as u32;
            let wire = match key & 7 {
                0 => Wire::Varint(self.varint()?),
                1 => {
                    self.take(8)?;
                    Wire::Fixed
                }
                2 => {
                    let n = self.varint()? as usize;
                    let all: &'a [u8] = self.0;
                    if n > all.len() {
                        return Err(DecodeError::Malformed("a length beyond the end of the message"));
                    }
                    let (head, rest) = all.split_at(n);
                    self.0 = rest;
                    Wire::Bytes(head)
                }
                5 => {
                    self.take(4)?;
                    Wire::Fixed
                }
                _ => return Err(DecodeError::Malformed("an unknown wire type")),
            };
            Ok((number, wire))
        };
        let r = step();
        if r.is_err() {
            self.0 = &[];
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((n << 3) | 2) as u8, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn a_namespace_decodes_to_its_json() {
        let meta = field(1, b"team-a");
        let obj = field(1, &meta);
        let type_meta = [field(1, b"v1"), field(2, b"Namespace")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &obj)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(v, serde_json::json!({"metadata": {"name": "team-a"}, "apiVersion": "v1", "kind": "Namespace"}));
    }

    #[test]
    fn an_unknown_kind_is_named() {
        let type_meta = [field(1, b"example.com/v1"), field(2, b"Widget")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta)].concat();
        assert_eq!(decode(&body).unwrap_err(), DecodeError::UnknownKind("Widget (example.com/v1)".into()));
    }

    #[test]
    fn truncated_bodies_are_errors_not_panics() {
        let body = [MAGIC.to_vec(), vec![0x0a, 0x50, 0x01]].concat();
        assert!(decode(&body).is_err());
    }
}
