//! Reads of the store: one object, a type's objects (by reference or
//! shared), and lists with label and field selectors, paged by continue
//! tokens as the API server pages them.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{ApiError, Inner, R};
use crate::sim::objects::ObjKey;
use crate::sim::registry::ResourceType;
use crate::sim::selector::{FieldSelector, LabelSelector};

pub struct ListResult {
    pub items: Vec<Value>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

impl Inner {
    pub(super) fn key(t: &ResourceType, ns: &str, name: &str) -> ObjKey {
        (t.group.clone(), t.plural.clone(), if t.namespaced { ns.to_string() } else { String::new() }, name.to_string())
    }

    /// The object as served for `t` (apiVersion of the requested version).
    fn present(t: &ResourceType, obj: &Value) -> Value {
        let mut o = obj.clone();
        o["apiVersion"] = json!(t.api_version());
        o["kind"] = json!(t.kind);
        o
    }

    /// The stored objects of a type, in one namespace or all, by reference.
    pub fn iter<'a>(&'a self, t: &ResourceType, ns: Option<&'a str>) -> impl Iterator<Item = &'a Value> + 'a {
        self.iter_shared(t, ns).map(|o| &**o)
    }

    /// The stored objects of a type, shared: a controller keeps them past
    /// its own writes without copying one.
    pub fn iter_shared<'a>(
        &'a self,
        t: &ResourceType,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        let (group, plural) = (t.group.clone(), t.plural.clone());
        let start = (group.clone(), plural.clone(), ns.unwrap_or_default().to_string(), String::new());
        self.objects
            .range(start..)
            .take_while(move |((g, p, n, _), _)| *g == group && *p == plural && ns.is_none_or(|ns| ns == n))
            .map(|(_, o)| o)
    }

    /// Whether the object is stored (no copy of it made).
    pub fn contains(&self, t: &ResourceType, ns: &str, name: &str) -> bool {
        self.objects.contains_key(&Self::key(t, ns, name))
    }

    pub fn get(&self, t: &ResourceType, ns: &str, name: &str) -> R<Value> {
        self.objects
            .get(&Self::key(t, ns, name))
            .map(|o| Self::present(t, o))
            .ok_or_else(|| ApiError::not_found(t, name))
    }

    pub fn list(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        labels: &LabelSelector,
        fieldsel: &FieldSelector,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> R<ListResult> {
        let (start_after, rv) = match cont {
            Some(c) => {
                let (rv, key) =
                    decode_continue(c).ok_or_else(|| ApiError::new(400, "BadRequest", "invalid continue token"))?;
                (Some(key), rv)
            }
            None => (None, self.rv),
        };
        let prefix = (t.group.clone(), t.plural.clone());
        // A namespaced list reads its namespace's range only.
        let from = match (ns, &start_after) {
            (_, Some((n, name))) => (prefix.0.clone(), prefix.1.clone(), n.clone(), name.clone()),
            (Some(ns), None) => (prefix.0.clone(), prefix.1.clone(), ns.to_string(), String::new()),
            (None, None) => (prefix.0.clone(), prefix.1.clone(), String::new(), String::new()),
        };
        let mut matching = self
            .objects
            .range(from..)
            .take_while(|((g, p, n, _), _)| *g == prefix.0 && *p == prefix.1 && ns.is_none_or(|ns| ns == n))
            .filter(|((_, _, n, name), _)| {
                start_after.as_ref().is_none_or(|s| (n.as_str(), name.as_str()) > (s.0.as_str(), s.1.as_str()))
            })
            .filter(|(_, o)| labels.matches(o) && fieldsel.matches(o));
        let mut items = Vec::new();
        let mut last = None;
        let limit = limit.filter(|l| *l > 0);
        for ((_, _, n, name), o) in matching.by_ref() {
            items.push(Self::present(t, o));
            last = Some((n.clone(), name.clone()));
            if limit.is_some_and(|l| items.len() >= l) {
                break;
            }
        }
        let remaining = matching.count();
        let continue_token = (remaining > 0).then(|| encode_continue(rv, last.as_ref().expect("an item")));
        Ok(ListResult { items, resource_version: rv, continue_token, remaining: (remaining > 0).then_some(remaining) })
    }

    /// One stored object by group, plural, namespace and name (no copy).
    pub fn peek(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<&Value> {
        self.peek_shared(group, plural, ns, name).map(|o| &**o)
    }

    /// [`Inner::peek`], shared: kept past the caller's writes without a copy.
    pub fn peek_shared(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects.get(&(group.to_string(), plural.to_string(), ns.to_string(), name.to_string()))
    }

    /// The objects of a type whose controller has uid `owner` (shared).
    pub fn owned_by(&self, owner: &str, group: &str, plural: &str) -> Vec<Arc<Value>> {
        self.objects.owned_by(owner, group, plural)
    }

    /// Pods not bound to a node: (namespace, name).
    pub fn objects_unbound(&self) -> &std::collections::BTreeSet<(String, String)> {
        self.objects.unbound()
    }

    /// What the pods bound to `node` and not finished ask for.
    pub fn node_usage(&self, node: &str) -> crate::sim::objects::Usage {
        self.objects.usage(node)
    }

    /// The pods of `ns` labelled `k` = `v`.
    pub fn pods_labelled<'a>(&'a self, ns: &'a str, k: &str, v: &str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.pods_labelled(ns, k, v).filter_map(move |name| self.peek("", "pods", ns, name))
    }

    /// The stored objects of a resource, in one namespace or all (no copies).
    pub fn scan(&self, group: &str, plural: &str, ns: Option<&str>) -> Vec<&Value> {
        match ns {
            Some(ns) => self.in_namespace(group, plural, ns).map(|(_, v)| v).collect(),
            None => {
                let (g, p) = (group.to_string(), plural.to_string());
                self.objects
                    .range((g.clone(), p.clone(), String::new(), String::new())..)
                    .take_while(|((kg, kp, _, _), _)| *kg == g && *kp == p)
                    .map(|(_, v)| &**v)
                    .collect()
            }
        }
    }

    pub(super) fn in_namespace<'a>(
        &'a self,
        group: &str,
        plural: &str,
        ns: &str,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Value)> + 'a {
        let (g, p, n) = (group.to_string(), plural.to_string(), ns.to_string());
        self.objects
            .range((g.clone(), p.clone(), n.clone(), String::new())..)
            .take_while(move |((kg, kp, kn, _), _)| *kg == g && *kp == p && *kn == n)
            .map(|(k, v)| (k, &**v))
    }
}

fn encode_continue(rv: u64, last: &(String, String)) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!({"rv": rv, "ns": last.0, "name": last.1}).to_string())
}

fn decode_continue(token: &str) -> Option<(u64, (String, String))> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).ok()?;
    let v: Value = serde_json::from_slice(&raw).ok()?;
    Some((v["rv"].as_u64()?, (v["ns"].as_str()?.to_string(), v["name"].as_str()?.to_string())))
}
