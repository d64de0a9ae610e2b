//! A federated workload as terminal text (pure): each member's health and
//! share, and a placement plan with each cluster's reason.

/// `federation status`: desired and ready per member, and its health.
pub fn federation_status(rows: &[crate::federation::health::MemberRow]) -> String {
    let mut out = format!("{:<16} {:>8} {:>6}  HEALTH\n", "CLUSTER", "DESIRED", "READY");
    for r in rows {
        out += &format!("{:<16} {:>8} {:>6}  {}\n", r.cluster, r.current, r.ready, r.health);
    }
    out
}

/// `federation plan|apply`: each member's change (green up, red down), why, and its health.
pub fn federation_plan(
    fs: &crate::federation::fanout::FederatedService,
    rows: &[crate::federation::health::MemberRow],
) -> String {
    use owo_colors::OwoColorize;
    let mut out = format!(
        "{} {} ({} replicas over federation {})\n",
        "app".bold(),
        fs.metadata.name,
        fs.spec.total_replicas,
        fs.spec.federation
    );
    for r in rows {
        let change = match r.desired.cmp(&r.current) {
            std::cmp::Ordering::Greater => format!("{} → {}", r.current, r.desired).green().to_string(),
            std::cmp::Ordering::Less => format!("{} → {}", r.current, r.desired).red().to_string(),
            std::cmp::Ordering::Equal => format!("{}", r.desired),
        };
        out += &format!("  {:<16} {:<10} {}; {}\n", r.cluster, change, r.reason, r.health);
    }
    out
}
