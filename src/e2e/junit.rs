//! JUnit XML for CI (pure): one testsuite per cluster, one testcase per
//! check (classname `<cluster>.<phase>`), failures with their reason and
//! the objects involved, skips as skipped.

use super::{Outcome, Report};

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

/// The reports as a JUnit XML document.
pub fn render(reports: &[Report]) -> String {
    let tests: usize = reports.iter().map(|r| r.checks.len()).sum();
    let failures: usize = reports.iter().map(|r| r.failures().len()).sum();
    let seconds: f64 = reports.iter().map(|r| r.seconds).fold(0.0, f64::max);
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    x.push_str(&format!(
        "<testsuites name=\"pinfleet e2e\" tests=\"{tests}\" failures=\"{failures}\" time=\"{seconds:.3}\">\n"
    ));
    for r in reports {
        let skipped = r.checks.iter().filter(|c| matches!(c.outcome, Outcome::Skip { .. })).count();
        x.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{skipped}\" time=\"{:.3}\">\n",
            escape(&r.cluster),
            r.checks.len(),
            r.failures().len(),
            r.seconds
        ));
        for c in &r.checks {
            let open = format!(
                "    <testcase classname=\"{}.{}\" name=\"{}\" time=\"{:.3}\"",
                escape(&r.cluster),
                c.phase.as_str(),
                escape(&c.name),
                c.seconds
            );
            match &c.outcome {
                Outcome::Pass => x.push_str(&format!("{open}/>\n")),
                Outcome::Warn { reason, objects } => x.push_str(&format!(
                    "{open}>\n      <system-out>warning: {}{}</system-out>\n    </testcase>\n",
                    escape(reason),
                    objects.iter().map(|o| format!("\n  {}", escape(o))).collect::<String>()
                )),
                Outcome::Skip { reason } => {
                    x.push_str(&format!("{open}>\n      <skipped message=\"{}\"/>\n    </testcase>\n", escape(reason)))
                }
                Outcome::Fail { reason, objects } => x.push_str(&format!(
                    "{open}>\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                    escape(reason),
                    objects.iter().map(|o| escape(o)).collect::<Vec<_>>().join("\n")
                )),
            }
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str("</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::super::{Check, Phase};
    use super::*;

    #[test]
    fn a_report_as_junit() {
        let r = Report {
            cluster: "dev-local".into(),
            seconds: 1.5,
            checks: vec![
                Check { phase: Phase::Preflight, name: "api-reachable".into(), seconds: 0.01, outcome: Outcome::Pass },
                Check {
                    phase: Phase::Cluster,
                    name: "group-sizes".into(),
                    seconds: 0.02,
                    outcome: Outcome::fail(
                        "groups short of Ready nodes",
                        vec!["general: 2 of 3 desired nodes Ready".into()],
                    ),
                },
                Check {
                    phase: Phase::Cluster,
                    name: "addons-match".into(),
                    seconds: 0.0,
                    outcome: Outcome::Skip { reason: "no <addons>".into() },
                },
            ],
        };
        insta::assert_snapshot!(render(std::slice::from_ref(&r)));
        let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        insta::assert_snapshot!("metrics", super::super::metrics(&r, at, None));

        // Drift: two addon objects differ, one child was edited by hand.
        let mut d = r.clone();
        d.checks.retain(|c| c.name != "addons-match");
        d.checks.push(Check {
            phase: Phase::Cluster,
            name: "addons-match".into(),
            seconds: 0.0,
            outcome: Outcome::fail("2 addon object(s) differ", vec!["a".into(), "b".into()]),
        });
        d.checks.push(Check {
            phase: Phase::Cluster,
            name: "children-unedited".into(),
            seconds: 0.0,
            outcome: Outcome::Warn { reason: "1 edited".into(), objects: vec!["Deployment t/web".into()] },
        });
        let earlier = chrono::DateTime::from_timestamp(1_799_900_000, 0).unwrap();
        assert_eq!(super::super::drift_since(&d, Some(earlier), at), Some(earlier), "drift carries over");
        assert_eq!(super::super::drift_since(&d, None, at), Some(at), "new drift starts now");
        assert_eq!(super::super::drift_since(&r, Some(earlier), at), None, "in sync: no drift");
        insta::assert_snapshot!("metrics_drift", super::super::metrics(&d, at, Some(earlier)));
    }
}
