//! Asking Prometheus (effects): one instant query over its HTTP API,
//! answered as one value, no data, or an error in words. A query that
//! gives more than one series is an error: an analysis judges one number
//! (sum or aggregate it in the query).
//!
//! ```text
//! analysis (rendered query) ─▶ GET /api/v1/query ─▶ Answer
//! ```

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::analysis::Answer;

/// A Prometheus a delivery names, read through the one bounded outbound
/// client ([`crate::outbound`]): its answer's size and time capped, its
/// redirects on its own host only, its places shared per team.
#[derive(Clone)]
pub struct Prometheus {
    base: String,
    /// Whose places its fetches take (the team; its host until named).
    team: String,
}

impl Prometheus {
    pub fn new(base: &str) -> anyhow::Result<Prometheus> {
        let base = base.trim_end_matches('/').to_string();
        let parsed = url::Url::parse(&base).map_err(|e| anyhow::anyhow!("{base}: not a URL: {e}"))?;
        let team = format!("host:{}", parsed.host_str().unwrap_or_default());
        Ok(Prometheus { base, team })
    }

    /// Its fetches take `team`'s places.
    pub fn for_team(mut self, team: &str) -> Prometheus {
        self.team = format!("team:{team}");
        self
    }

    /// The query's value at `at` (now when None).
    pub async fn query(&self, promql: &str, at: Option<DateTime<Utc>>) -> Answer {
        let mut params = vec![("query", promql.to_string())];
        if let Some(t) = at {
            params.push(("time", format!("{:.3}", t.timestamp_millis() as f64 / 1000.0)));
        }
        let url = match url::Url::parse_with_params(&format!("{}/api/v1/query", self.base), &params) {
            Ok(u) => u,
            Err(e) => return Answer::Error(format!("{}: not a URL: {e}", self.base)),
        };
        match crate::outbound::Outbound::shared().get(&self.team, url, &crate::outbound::PROMETHEUS).await {
            Ok((status, body)) => read_answer(status, &body),
            Err(e) => Answer::Error(format!("asking Prometheus at {}: {e}", self.base)),
        }
    }
}

/// The kinds of error Prometheus' HTTP API names (its `errorType`); any
/// other word is not repeated.
const ERROR_TYPES: &[&str] = &["timeout", "canceled", "execution", "bad_data", "internal", "unavailable", "not_found"];

/// Prometheus' JSON answer as one value (pure).
pub fn read_answer(status: u16, body: &[u8]) -> Answer {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Answer::Error(format!("Prometheus answered HTTP {status} with something that is not JSON"));
    };
    if v["status"] != "success" {
        // Its words are not repeated: a server a team names could put
        // anything there (another service's answer, a token).
        let kind = v["errorType"].as_str().filter(|k| ERROR_TYPES.contains(k)).unwrap_or("an error");
        return Answer::Error(format!(
            "Prometheus answered HTTP {status} with {kind} (its message is not repeated; Prometheus' own log has it)"
        ));
    }
    let number = |x: &Value| -> Answer {
        match x.get(1).and_then(Value::as_str).map(str::parse::<f64>) {
            Some(Ok(f)) if f.is_nan() => Answer::NoData,
            Some(Ok(f)) => Answer::Value(f),
            _ => Answer::Error("Prometheus gave a sample that is not a number".into()),
        }
    };
    match v["data"]["resultType"].as_str() {
        Some("scalar") => number(&v["data"]["result"]),
        Some("vector") => match v["data"]["result"].as_array().map(Vec::as_slice) {
            Some([]) => Answer::NoData,
            Some([one]) => number(&one["value"]),
            Some(many) => Answer::Error(format!(
                "the query gives {} series; it must give one value (aggregate it, e.g. sum(...))",
                many.len()
            )),
            None => Answer::Error("Prometheus gave a vector without results".into()),
        },
        other => Answer::Error(format!("the query gives a {}, not one value", other.unwrap_or("nothing"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_of_every_shape() {
        let ok = |r: &str| format!(r#"{{"status":"success","data":{}}}"#, r);
        assert_eq!(
            read_answer(200, ok(r#"{"resultType":"vector","result":[{"metric":{},"value":[1,"0.25"]}]}"#).as_bytes()),
            Answer::Value(0.25)
        );
        assert_eq!(read_answer(200, ok(r#"{"resultType":"vector","result":[]}"#).as_bytes()), Answer::NoData);
        assert_eq!(read_answer(200, ok(r#"{"resultType":"scalar","result":[1,"NaN"]}"#).as_bytes()), Answer::NoData);
        assert!(
            matches!(read_answer(200, ok(r#"{"resultType":"vector","result":[{"value":[1,"1"]},{"value":[1,"2"]}]}"#).as_bytes()), Answer::Error(e) if e.contains("2 series"))
        );
        assert!(
            matches!(read_answer(400, br#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#), Answer::Error(e) if e.contains("HTTP 400 with bad_data") && !e.contains("parse error"))
        );
        assert!(matches!(read_answer(502, b"<html>bad gateway</html>"), Answer::Error(e) if e.contains("HTTP 502")));
        assert!(
            matches!(read_answer(200, ok(r#"{"resultType":"matrix","result":[]}"#).as_bytes()), Answer::Error(e) if e.contains("matrix"))
        );
    }

    /// A server on loopback answering every path with `app`; its address.
    async fn serve(app: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    /// A Prometheus a team names is hostile at will: huge, slow,
    /// redirecting to an internal host, echoing another service's words.
    /// Each is answered in pinfleet's words, within the bounds, and the
    /// internal host is never asked.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_hostile_prometheus_is_read_within_bounds_and_never_echoed() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let huge = serve(axum::Router::new().fallback(|| async { vec![b'{'; 64 << 20] })).await;
        let answer = Prometheus::new(&huge).unwrap().for_team("red").query("up", None).await;
        assert!(matches!(&answer, Answer::Error(e) if e.contains("larger than 1048576 bytes")), "{answer:?}");
        // A body without a length, cut off as it arrives.
        let streamed = serve(axum::Router::new().fallback(|| async {
            let chunks = futures::stream::iter(
                (0..1024).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 64 << 10]))),
            );
            axum::body::Body::from_stream(chunks)
        }))
        .await;
        let answer = Prometheus::new(&streamed).unwrap().query("up", None).await;
        assert!(matches!(&answer, Answer::Error(e) if e.contains("larger than")), "{answer:?}");
        // An internal host (127.0.0.2) a redirect points at is never asked.
        let asked = std::sync::Arc::new(AtomicUsize::new(0));
        let internal = {
            let asked = asked.clone();
            let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let app = axum::Router::new().fallback(move || {
                asked.fetch_add(1, Ordering::SeqCst);
                async { r#"{"status":"error","errorType":"internal","error":"token=s3cr3t"}"# }
            });
            tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
            format!("http://{addr}")
        };
        let to = format!("{internal}/api/v1/query");
        let redirecting =
            serve(axum::Router::new().fallback(move || async move { axum::response::Redirect::temporary(&to) })).await;
        let answer = Prometheus::new(&redirecting).unwrap().query("up", None).await;
        assert!(matches!(&answer, Answer::Error(e) if e.contains("another host")), "{answer:?}");
        assert_eq!(asked.load(Ordering::SeqCst), 0, "the internal host was asked");
        // Its words are not repeated, even asked directly.
        let answer = Prometheus::new(&internal).unwrap().query("up", None).await;
        assert!(matches!(&answer, Answer::Error(e) if !e.contains("s3cr3t") && e.contains("internal")), "{answer:?}");
        // A slow one: at most the time bound.
        let slow = serve(axum::Router::new().fallback(|| async {
            tokio::time::sleep(std::time::Duration::from_secs(120)).await;
            "late"
        }))
        .await;
        let t = std::time::Instant::now();
        let answer = Prometheus::new(&slow).unwrap().for_team("red").query("up", None).await;
        assert!(matches!(&answer, Answer::Error(e) if e.contains("within 10s")), "{answer:?}");
        println!("the slow Prometheus was given up after {:?}", t.elapsed());
    }

    /// One team's slow Prometheus holds only that team's places: red's
    /// eight queries wait on its own server while blue's is answered at once.
    #[tokio::test(flavor = "multi_thread")]
    async fn one_teams_slow_prometheus_never_holds_anothers_fetches() {
        let slow = serve(axum::Router::new().fallback(|| async {
            tokio::time::sleep(std::time::Duration::from_secs(8)).await;
            "late"
        }))
        .await;
        let fast = serve(
            axum::Router::new()
                .fallback(|| async { r#"{"status":"success","data":{"resultType":"scalar","result":[1,"0.5"]}}"# }),
        )
        .await;
        let red: Vec<_> = (0..8)
            .map(|_| {
                let p = Prometheus::new(&slow).unwrap().for_team("red-fair");
                tokio::spawn(async move { p.query("up", None).await })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let t = std::time::Instant::now();
        let answer = Prometheus::new(&fast).unwrap().for_team("blue-fair").query("up", None).await;
        assert_eq!(answer, Answer::Value(0.5));
        println!("blue answered in {:?} while red's 8 slow queries wait", t.elapsed());
        assert!(red.iter().all(|r| !r.is_finished()), "blue was answered only after red's slow queries ended");
        for r in red {
            r.abort();
        }
    }
}
