//! What a roll of a taken-over cluster writes for kubeadm's joins
//! (`kube-public/cluster-info` signed for the roll's token, kubeadm's and
//! the kubelet's configuration, the roles and bindings `kubeadm init`
//! makes), against the API server the harness gives: the sim, or a real
//! one (PINFLEET_TEST_KUBECONFIG), whose admission and RBAC must accept
//! each object as written. The tokens are minted as the roll mints them
//! (bootstrap token Secrets). What exists is kept; a second roll's token
//! is signed beside the first. On a real cluster whose
//! kube-controller-manager runs the bootstrap signer (as kubeadm's does),
//! the signer's own signature is compared with ours; what the test
//! created is deleted at its end.

#[path = "support/kube.rs"]
mod kube_support;
mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use pinfleet::kube::kubeadm_join::{ensure, signature, BOOTSTRAP_GROUP};
use pinfleet::spec::LoadOptions;

#[tokio::test(flavor = "multi_thread")]
async fn what_kubeadm_s_joins_read_is_accepted_by_the_api_server_and_a_second_token_is_signed_beside_the_first() {
    let env = kube_support::KubeEnv::start();
    let client = env.client().await;
    let w = support::World::new("joins", 1);
    let aws = w.aws().await;
    aws.s3.create_bucket().bucket(w.bucket()).send().await.unwrap();
    let store =
        pinfleet::state::Store::open(&format!("s3://{}/pinfleet", w.bucket()), "joins", Some(&aws)).await.unwrap();
    let mut cluster = pinfleet::spec::load_cluster(&w.cluster_file(), &LoadOptions::default()).unwrap().cluster;
    cluster.spec.api.dns_name = Some("api.joins.example.com".into());
    let ca =
        std::fs::read_to_string(format!("{}/tests/fixtures/kubeadm/pki/ca.crt", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let cms = kube::Api::<ConfigMap>::namespaced(client.clone(), "kube-public");
    let secrets = kube::Api::<Secret>::namespaced(client.clone(), "kube-system");
    let before = cms.get_opt("cluster-info").await.unwrap();

    let first = pinfleet::state::join::mint(&client, &store, chrono::Utc::now()).await.unwrap().token;
    let id = |t: &str| t.split_once('.').unwrap().0.to_string();
    let did = ensure(&client, &cluster, &ca, &first, false).await.unwrap();
    let data = cms.get("cluster-info").await.unwrap().data.unwrap();
    let kubeconfig = data["kubeconfig"].clone();
    let jws_key = |t: &str| format!("jws-kubeconfig-{}", id(t));
    assert_eq!(data[&jws_key(&first)], signature(&kubeconfig, &first).unwrap(), "{data:?}");
    match &before {
        // None there (kubeadm never ran here, or the sim): ours, for the API's name.
        None => {
            assert!(did.contains(&"kube-public/cluster-info created".to_string()), "{did:?}");
            let (ours, _, _) =
                pinfleet::kube::kubeadm_join::cluster_info(&ca, "https://api.joins.example.com:6443", &first).unwrap();
            assert_eq!(kubeconfig, ours);
        }
        // One there (kubeadm's): its kubeconfig kept.
        Some(had) => {
            assert_eq!(kubeconfig, had.data.as_ref().unwrap()["kubeconfig"], "cluster-info's kubeconfig changed")
        }
    }
    for (name, key) in [("kubeadm-config", "ClusterConfiguration"), ("kubelet-config", "kubelet")] {
        let cm = kube::Api::<ConfigMap>::namespaced(client.clone(), "kube-system").get(name).await.unwrap();
        assert!(cm.data.as_ref().is_some_and(|d| d.contains_key(key)), "kube-system/{name} has no {key}: {cm:?}");
    }
    let binding = kube::Api::<ClusterRoleBinding>::all(client.clone()).get("kubeadm:kubelet-bootstrap").await.unwrap();
    assert_eq!(binding.role_ref.name, "system:node-bootstrapper");
    let subjects: Vec<String> = binding.subjects.unwrap_or_default().into_iter().map(|s| s.name).collect();
    assert!(subjects.contains(&BOOTSTRAP_GROUP.to_string()), "{subjects:?}");

    // A second roll, another token: nothing is created again, and its
    // signature is written beside the first (a join in flight with the
    // first still verifies).
    let second = pinfleet::state::join::mint(&client, &store, chrono::Utc::now()).await.unwrap().token;
    let again = ensure(&client, &cluster, &ca, &second, false).await.unwrap();
    assert_eq!(again, [format!("kube-public/cluster-info signed for token {}", id(&second))], "only the signature");
    let data = cms.get("cluster-info").await.unwrap().data.unwrap();
    assert!(data.contains_key(&jws_key(&first)) && data.contains_key(&jws_key(&second)), "{data:?}");

    // A control plane taken over from kops: kubeadm-config, made before
    // without etcd, is given etcd-manager's external etcd (once).
    let third = pinfleet::state::join::mint(&client, &store, chrono::Utc::now()).await.unwrap().token;
    let kops = ensure(&client, &cluster, &ca, &third, true).await.unwrap();
    assert!(kops.iter().any(|l| l.starts_with("kube-system/kubeadm-config: etcd is etcd-manager's")), "{kops:?}");
    let sys = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "kube-system");
    let config = sys.get("kubeadm-config").await.unwrap().data.unwrap()["ClusterConfiguration"].clone();
    assert!(
        config.contains("    - https://127.0.0.1:4001\n") && config.contains("/events#https://127.0.0.1:4002"),
        "{config}"
    );
    let again = ensure(&client, &cluster, &ca, &third, true).await.unwrap();
    assert!(!again.iter().any(|l| l.contains("kubeadm-config")), "{again:?}");

    // A real bootstrap signer re-signs a token's entry when it is taken
    // away: what it writes must be what the roll wrote.
    if env.real {
        let patch = serde_json::json!({"data": {jws_key(&second): null}});
        cms.patch("cluster-info", &Default::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        let mut theirs = None;
        for _ in 0..300 {
            let data = cms.get("cluster-info").await.unwrap().data.unwrap();
            if let Some(s) = data.get(&jws_key(&second)) {
                theirs = Some(s.clone());
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        match theirs {
            Some(s) => assert_eq!(s, signature(&kubeconfig, &second).unwrap(), "the bootstrap signer signs otherwise"),
            None => env.skip_part(
                "the bootstrap signer's own signature",
                "cluster-info was not re-signed within 30 s: the cluster's kube-controller-manager runs no bootstrap signer (kubeadm's does: --controllers=*,bootstrapsigner)",
            ),
        }
    }

    // What the test made goes (a real cluster is shared).
    for t in [&first, &second, &third] {
        secrets.delete(&format!("bootstrap-token-{}", id(t)), &Default::default()).await.unwrap();
    }
    // kubeadm's roles live in kube-system, but cluster-info's readers' in kube-public.
    let ns_of = |n: &str| if n == "kubeadm:bootstrap-signer-clusterinfo" { "kube-public" } else { "kube-system" };
    let made: Vec<&String> = did.iter().filter(|l| l.ends_with(" created")).collect();
    for line in made {
        let what = line.trim_end_matches(" created");
        let dp = Default::default();
        match what.split_once(' ') {
            Some(("ClusterRole", n)) => {
                drop(kube::Api::<ClusterRole>::all(client.clone()).delete(n, &dp).await.unwrap())
            }
            Some(("ClusterRoleBinding", n)) => {
                drop(kube::Api::<ClusterRoleBinding>::all(client.clone()).delete(n, &dp).await.unwrap())
            }
            Some(("Role", n)) => {
                drop(kube::Api::<Role>::namespaced(client.clone(), ns_of(n)).delete(n, &dp).await.unwrap())
            }
            Some(("RoleBinding", n)) => {
                drop(kube::Api::<RoleBinding>::namespaced(client.clone(), ns_of(n)).delete(n, &dp).await.unwrap())
            }
            _ => {
                let (ns, n) = what.split_once('/').unwrap();
                drop(kube::Api::<ConfigMap>::namespaced(client.clone(), ns).delete(n, &dp).await.unwrap())
            }
        }
    }
}
