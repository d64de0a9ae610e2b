//! The file:// state store and its lock (the S3 store is exercised against
//! moto by the engine tests): conditional writes, refusal naming the holder,
//! release, forced unlock, history and revisions.

use pinfleet::state::lock::{force_unlock, Lock, LockError};
use pinfleet::state::{Condition, HistoryRecord, PreconditionFailed, Store};

fn store(dir: &tempfile::TempDir) -> Store {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(Store::open(&format!("file://{}", dir.path().display()), "c1", None)).unwrap()
}

#[tokio::test]
async fn conditional_writes_behave_like_s3() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&format!("file://{}", dir.path().display()), "c1", None).await.unwrap();
    let etag = s.put("k", b"one".to_vec(), Condition::IfAbsent).await.unwrap();
    let again = s.put("k", b"two".to_vec(), Condition::IfAbsent).await.unwrap_err();
    assert!(again.is::<PreconditionFailed>());
    let stale = s.put("k", b"two".to_vec(), Condition::IfMatch("\"nope\"".into())).await.unwrap_err();
    assert!(stale.is::<PreconditionFailed>());
    s.put("k", b"two".to_vec(), Condition::IfMatch(etag)).await.unwrap();
    assert_eq!(s.get("k").await.unwrap().unwrap().0, b"two");
    s.delete("k").await.unwrap();
    assert!(s.get("k").await.unwrap().is_none());
}

#[tokio::test]
async fn the_lock_refuses_a_second_holder_by_name_and_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&format!("file://{}", dir.path().display()), "c1", None).await.unwrap();
    let first = Lock::acquire(&s, "pinfleet apply c1 --yes").await.unwrap();
    let err = match Lock::acquire(&s, "pinfleet apply c1 --yes").await {
        Err(e) => e,
        Ok(_) => panic!("a second lock was granted"),
    };
    let held = err.downcast_ref::<LockError>().expect("a LockError");
    let LockError::Held { info, .. } = held;
    assert_eq!(info.pid, std::process::id());
    assert!(
        err.to_string().contains("cluster c1 is locked by") && err.to_string().contains("`pinfleet apply c1 --yes`"),
        "{err}"
    );
    first.release().await.unwrap();
    let second = Lock::acquire(&s, "x").await.unwrap();
    // A lock whose holder died is broken only by hand.
    std::mem::forget(second);
    assert!(Lock::acquire(&s, "y").await.is_err());
    assert!(force_unlock(&s).await.unwrap().is_some());
    Lock::acquire(&s, "z").await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn work_under_the_lock_releases_it_on_error_too() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&format!("file://{}", dir.path().display()), "c1", None).await.unwrap();
    let r: anyhow::Result<()> = Lock::with(&s, "apply", async { anyhow::bail!("boom") }).await;
    assert_eq!(r.unwrap_err().to_string(), "boom");
    assert!(s.get(pinfleet::state::lock::LOCK_KEY).await.unwrap().is_none());
}

#[test]
fn history_counts_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        assert_eq!(s.next_revision().await.unwrap(), 1);
        let spec = pinfleet::spec::load_cluster(
            std::path::Path::new("tests/fixtures/valid/minimal.yaml"),
            &Default::default(),
        )
        .unwrap()
        .cluster;
        for revision in 1..=3 {
            let rec = HistoryRecord {
                revision,
                applied_at: "t".into(),
                by: "me".into(),
                host: "h".into(),
                identity: None,
                command: "apply".into(),
                created: 1,
                updated: 0,
                replaced: 0,
                deleted: 0,
                changes: vec!["vpc".into()],
            };
            s.record(&rec, &spec).await.unwrap();
        }
        assert_eq!(s.next_revision().await.unwrap(), 4);
        let h = s.history().await.unwrap();
        assert_eq!(h.iter().map(|r| r.revision).collect::<Vec<_>>(), [1, 2, 3]);
        let stored: pinfleet::spec::Cluster = s.get_json(pinfleet::state::SPEC_KEY).await.unwrap().unwrap();
        assert_eq!(stored, spec);
    });
}
