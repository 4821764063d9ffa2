//! The sandbox runs the broker as a cluster would (crates/sandbox/src/broker.rs): two replicas,
//! each under a token of the ServiceAccount `corral-vdi-broker` of its own (never in its log),
//! one leading; and alice, bob and carol hold only the shipped claimant role, no stream or power
//! right of their own.

use corral_tests::{brokers, client_as};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, PostParams};
use sandbox::bootstrap::DESKTOP_USER;
use serde_json::json;
use vdi_core::broker::BrokerState;
use vdi_core::names::BROKER_USER;

use crate::replicas_steady;

/// Whether `user` may `verb` `resource` (`group`, optional subresource) in `corral-vms`.
async fn may(user: &str, verb: &str, group: &str, resource: &str, sub: &str) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({ "spec": { "user": user,
        "groups": ["system:authenticated"],
        "resourceAttributes": { "namespace": "corral-vms", "verb": verb, "group": group,
            "resource": resource, "subresource": sub } } }))
    .unwrap();
    let answer = Api::<SubjectAccessReview>::all(client_as("admin").await)
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    answer.status.is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn two_replicas_run_under_their_own_tokens_one_leads_and_users_hold_the_claimant_role() {
    let _steady = replicas_steady().await;
    let shared = corral_tests::sandbox();
    let dir = shared.kubeconfig.parent().unwrap().to_path_buf();

    // Two processes, named after the sandbox (`<name>-broker-<i>`), both running.
    let replicas = brokers().replicas();
    let identities: Vec<String> = replicas.iter().map(|r| r.identity.clone()).collect();
    let prefix = identities[0]
        .strip_suffix("-broker-0")
        .unwrap_or_else(|| panic!("{identities:?}"));
    assert_eq!(
        identities,
        [format!("{prefix}-broker-0"), format!("{prefix}-broker-1")]
    );
    for replica in &replicas {
        let pid = replica
            .pid
            .unwrap_or_else(|| panic!("{replica:?} does not run"));
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{replica:?}"
        );
    }

    // One leads, both report in.
    let status = vdi_core::broker::status(&client_as("admin").await)
        .await
        .unwrap();
    assert_eq!(status.state, BrokerState::Running, "{}", status.summary);
    let leader = status.leader.clone().unwrap();
    assert!(
        identities.contains(&leader),
        "{leader} leads: {identities:?}"
    );
    for identity in &identities {
        assert!(
            status.replicas.iter().any(|r| &r.identity == identity),
            "{identity} missing from {:?}",
            status.replicas
        );
    }

    // Each replica's kubeconfig is private and acts as the broker's ServiceAccount through a
    // token of its own, which its log never shows.
    let mut tokens = Vec::new();
    for i in 0..2 {
        let path = dir.join("broker").join(format!("replica-{i}.kubeconfig"));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{}", path.display());
        let config: serde_json::Value =
            serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let user = &config["users"][0]["user"];
        assert!(
            user.get("client-key-data").is_none(),
            "a token, not a certificate"
        );
        let token = user["token"].as_str().unwrap().to_owned();
        assert!(!token.is_empty());
        let context = config["current-context"].as_str().unwrap();
        let client = sandbox::kubeconfig::client(&path, context).await.unwrap();
        let review = Api::<SelfSubjectReview>::all(client)
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .unwrap();
        let who = review.status.unwrap().user_info.unwrap().username.unwrap();
        assert_eq!(who, BROKER_USER, "replica {i} acts as");
        let log = std::fs::read_to_string(dir.join("logs").join(format!("broker-{i}.log")))
            .unwrap_or_default();
        assert!(!log.contains(&token), "replica {i}'s log shows its token");
        tokens.push(token);
    }
    assert_ne!(tokens[0], tokens[1], "each replica has a token of its own");

    // alice, bob and carol: the claimant Role only, bound in corral-vms (a Role: no
    // ClusterRole of ours with Lease writes exists to be bound cluster-wide).
    let bindings = Api::<RoleBinding>::namespaced(client_as("admin").await, "corral-vms");
    let binding = bindings.get(DESKTOP_USER).await.unwrap();
    assert_eq!(
        (
            binding.role_ref.kind.as_str(),
            binding.role_ref.name.as_str()
        ),
        ("Role", DESKTOP_USER)
    );
    let bound: Vec<&str> = binding
        .subjects
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(bound, ["alice", "bob", "carol"]);
    for user in ["alice", "bob", "carol"] {
        assert!(
            bindings
                .get_opt(&format!("corral-vdi-{user}"))
                .await
                .unwrap()
                .is_none(),
            "{user} has no other binding"
        );
    }
    let kubevirt = "subresources.kubevirt.io";
    assert!(may("alice", "create", "coordination.k8s.io", "leases", "").await);
    assert!(!may("alice", "patch", "kubevirt.io", "virtualmachines", "").await);
    for (verb, resource, sub) in [
        ("get", "virtualmachineinstances", "vnc"),
        ("get", "virtualmachineinstances", "portforward"),
        ("get", "virtualmachineinstances", "usbredir"),
        ("update", "virtualmachines", "start"),
        ("update", "virtualmachineinstances", "softreboot"),
    ] {
        for user in ["alice", "bob", "carol"] {
            assert!(
                !may(user, verb, kubevirt, resource, sub).await,
                "{user} may {verb} {resource}/{sub} namespace-wide"
            );
        }
    }
}
