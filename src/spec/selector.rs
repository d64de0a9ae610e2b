//! Label selectors over cluster labels (`metadata.labels`), as `kubectl -l`
//! writes them: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated (all must hold).

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Eq(String, String),
    Ne(String, String),
    Has(String),
    Lacks(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(Vec<Term>);

impl Selector {
    pub fn parse(s: &str) -> Result<Selector, String> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let term = if let Some((k, v)) = part.split_once("!=") {
                Term::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Term::Eq(k.trim().into(), v.trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                Term::Lacks(k.trim().into())
            } else {
                Term::Has(part.into())
            };
            let key = match &term {
                Term::Eq(k, _) | Term::Ne(k, _) | Term::Has(k) | Term::Lacks(k) => k,
            };
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(format!("`{part}` is not a label selector term (k=v, k!=v, k or !k)"));
            }
            terms.push(term);
        }
        Ok(Selector(terms))
    }

    /// The label keys the selector reads.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|t| match t {
            Term::Eq(k, _) | Term::Ne(k, _) | Term::Has(k) | Term::Lacks(k) => k.as_str(),
        })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|t| match t {
            Term::Eq(k, v) => labels.get(k) == Some(v),
            Term::Ne(k, v) => labels.get(k) != Some(v),
            Term::Has(k) => labels.contains_key(k),
            Term::Lacks(k) => !labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_as_kubectl_writes_them() {
        let l: BTreeMap<String, String> = [("env".into(), "staging".into()), ("region".into(), "use1".into())].into();
        assert!(Selector::parse("env=staging").unwrap().matches(&l));
        assert!(Selector::parse("env==staging,region").unwrap().matches(&l));
        assert!(!Selector::parse("env!=staging").unwrap().matches(&l));
        assert!(Selector::parse("!tier").unwrap().matches(&l));
        assert!(Selector::parse("").unwrap().matches(&l));
        assert!(Selector::parse("a b=c").is_err());
    }
}
