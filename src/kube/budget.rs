//! A client's request budget: how many requests it may have in flight and
//! how many it may start per second (QPS with a burst, as client-go's
//! rate limiter), wrapped around any [`kube::Client`]. The gateway and the
//! workload controller wrap their clients in one, so a thousand callers at
//! once queue here instead of opening a thousand connections to the API
//! server (each a TLS handshake that times out on a busy machine) or
//! tripping its in-flight limit. Watches are long-lived and are not counted
//! against the in-flight limit; they still take a token to start.
//!
//! Answers of 429 are retried by kube-rs's own policy (with `Retry-After`)
//! in clients made with [`super::Retry::Default`], inside the budget.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt as _;
use kube::client::Body;
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;

/// What a client may ask of the API server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Requests in flight at once (watches excepted).
    pub in_flight: usize,
    /// Requests started per second, on average; `None`: no rate limit.
    pub qps: Option<f64>,
    /// Requests that may start at once after a quiet spell.
    pub burst: u32,
}

impl Budget {
    /// The gateway's default: enough in flight to keep a real API server
    /// busy, few enough connections that none waits for its handshake.
    pub const GATEWAY: Budget = Budget { in_flight: 48, qps: None, burst: 0 };
}

/// The rate limiter: a token bucket.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

#[derive(Debug)]
struct Shared {
    budget: Budget,
    slots: Arc<Semaphore>,
    bucket: Mutex<Bucket>,
}

impl Shared {
    /// Waits for a token (when a rate is set).
    async fn token(&self) {
        let Some(qps) = self.budget.qps.filter(|q| *q > 0.0) else { return };
        let burst = f64::from(self.budget.burst.max(1));
        let wait = {
            let mut b = self.bucket.lock().await;
            let now = Instant::now();
            b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * qps).min(burst);
            b.at = now;
            b.tokens -= 1.0;
            // A negative balance is the time this request waits; the
            // tokens it borrowed are owed by the next ones.
            if b.tokens < 0.0 {
                Duration::from_secs_f64(-b.tokens / qps)
            } else {
                Duration::ZERO
            }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// `client` with `budget` in front of every request.
pub fn wrap(client: kube::Client, budget: Budget) -> kube::Client {
    let ns = client.default_namespace().to_string();
    let shared = Arc::new(Shared {
        budget,
        slots: Arc::new(Semaphore::new(budget.in_flight.max(1))),
        bucket: Mutex::new(Bucket { tokens: f64::from(budget.burst.max(1)), at: Instant::now() }),
    });
    kube::Client::new(Budgeted { inner: client, shared }, ns)
}

/// An answer's body, holding its request's slot until it is dropped.
type Held = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, tower::BoxError>;

#[derive(Clone)]
struct Budgeted {
    inner: kube::Client,
    shared: Arc<Shared>,
}

fn is_watch<B>(req: &Request<B>) -> bool {
    req.uri().query().is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

impl tower::Service<Request<Body>> for Budgeted {
    type Response = Response<Held>;
    type Error = kube::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<Held>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let shared = self.shared.clone();
        Box::pin(async move {
            let permit = if is_watch(&req) {
                None
            } else {
                Some(shared.slots.clone().acquire_owned().await.expect("the budget's semaphore is never closed"))
            };
            shared.token().await;
            let res = send(&inner, req).await?;
            // The slot is held until the answer's body is read or dropped:
            // the connection is busy until then.
            Ok(res.map(|body| {
                body.map_frame(move |f| {
                    let _held = &permit;
                    f
                })
                .map_err(Into::into)
                .boxed_unsync()
            }))
        })
    }
}

/// Whether the request cannot have reached the API server: its connection
/// was never made, or broke while the request was being written. Such a
/// request is sent again (a loaded server drops handshakes it cannot
/// serve in time); anything else is the caller's to judge.
fn unsent(e: &kube::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper_util::client::legacy::Error>() {
            if h.is_connect() {
                return true;
            }
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::BrokenPipe {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

/// Attempts at a request that did not reach the server.
const UNSENT_ATTEMPTS: u32 = 5;

async fn send(inner: &kube::Client, mut req: Request<Body>) -> Result<Response<Body>, kube::Error> {
    let mut attempt = 1;
    loop {
        // A copy for another attempt, when the body can be copied (every
        // request but a streamed one).
        let again = req_copy(&req);
        match inner.send(req).await {
            Err(e) if attempt < UNSENT_ATTEMPTS && unsent(&e) && again.is_some() => {
                tracing::debug!("API request not sent ({e}); attempt {} of {UNSENT_ATTEMPTS}", attempt + 1);
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                attempt += 1;
                req = again.expect("checked above");
            }
            other => return other,
        }
    }
}

fn req_copy(req: &Request<Body>) -> Option<Request<Body>> {
    let body = req.body().try_clone()?;
    let mut r = Request::builder().method(req.method().clone()).uri(req.uri().clone()).version(req.version());
    r.headers_mut()?.extend(req.headers().clone());
    r.body(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_bucket_lets_a_burst_through_then_paces_to_the_rate() {
        let s = Shared {
            budget: Budget { in_flight: 1, qps: Some(10.0), burst: 5 },
            slots: Arc::new(Semaphore::new(1)),
            bucket: Mutex::new(Bucket { tokens: 5.0, at: Instant::now() }),
        };
        let start = Instant::now();
        for _ in 0..5 {
            s.token().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst starts at once");
        for _ in 0..10 {
            s.token().await;
        }
        let paced = start.elapsed().as_secs_f64();
        assert!((0.99..=1.01).contains(&paced), "ten more at 10/s take a second: {paced}");
    }

    #[test]
    fn watches_are_told_from_requests() {
        let w = Request::get("/api/v1/pods?watch=true&resourceVersion=1").body(()).unwrap();
        let l = Request::get("/api/v1/pods?limit=500").body(()).unwrap();
        assert!(is_watch(&w));
        assert!(!is_watch(&l));
    }
}

#[cfg(test)]
mod served {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A loopback server that counts the requests it holds at once.
    async fn counting_server() -> (String, Arc<(AtomicUsize, AtomicUsize)>) {
        let seen = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let s = seen.clone();
        let app = axum::Router::new().fallback(move || {
            let s = s.clone();
            async move {
                let now = s.0.fetch_add(1, Ordering::SeqCst) + 1;
                s.1.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                s.0.fetch_sub(1, Ordering::SeqCst);
                axum::Json(serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, seen)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_429_is_backed_off_for_as_long_as_retry_after_says() {
        crate::kube::install_crypto_provider();
        let seen = Arc::new(std::sync::Mutex::new(Vec::<std::time::Instant>::new()));
        let s = seen.clone();
        let app = axum::Router::new().fallback(move || {
            let s = s.clone();
            async move {
                let n = {
                    let mut v = s.lock().unwrap();
                    v.push(std::time::Instant::now());
                    v.len()
                };
                if n <= 2 {
                    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "TooManyRequests", "code": 429, "message": "too many requests, please try again later"});
                    (http::StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], axum::Json(body))
                } else {
                    let ok = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
                    (http::StatusCode::OK, [("retry-after", "0")], axum::Json(ok))
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        // As the controller and the gateway make theirs: kube-rs's retries
        // (Retry::Default) inside the budget.
        let config = kube::Config::new(url.parse().unwrap());
        assert!(config.default_retry);
        let client =
            wrap(kube::Client::try_from(config).unwrap(), Budget { in_flight: 4, qps: Some(100.0), burst: 10 });
        let req = Request::get("/api/v1/namespaces/default").body(Vec::new()).unwrap();
        client.request_text(req).await.expect("answered once the server lets it through");
        let at = seen.lock().unwrap().clone();
        assert_eq!(at.len(), 3, "two 429s, then the answer");
        for w in at.windows(2) {
            let gap = w[1] - w[0];
            assert!(gap >= Duration::from_millis(900), "waited as Retry-After said (1 s), not {gap:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thousand_requests_at_once_never_exceed_the_budget_in_flight() {
        crate::kube::install_crypto_provider();
        let (url, seen) = counting_server().await;
        let config = kube::Config::new(url.parse().unwrap());
        let client = wrap(kube::Client::try_from(config).unwrap(), Budget { in_flight: 8, qps: None, burst: 0 });
        let mut tasks = Vec::new();
        for i in 0..1000 {
            let c = client.clone();
            tasks.push(tokio::spawn(async move {
                let req = Request::get(format!("/api/v1/namespaces/n{i}")).body(Vec::new()).unwrap();
                c.request_text(req).await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let most = seen.1.load(Ordering::SeqCst);
        assert!((1..=8).contains(&most), "at most 8 in flight at the server, saw {most}");
    }
}
