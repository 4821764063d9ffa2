//! `broker install | status | uninstall` (vdi-core `broker`) against the sandbox's real API
//! server. This binary's sandbox runs no broker: install then status says what a cluster whose
//! broker has not started says, and a leader Lease written by hand (as the replicas write it)
//! shows a running one. An ordinary user may not install it (refused, nothing written), and may
//! read its status once it is installed.

use std::process::{Command, Stdio};
use std::time::Duration;

use corral_tests::{cli_binary, eventually, namespace, sandbox};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use vdi_core::broker::{self, BrokerState, STATUS_ROLE};
use vdi_core::error::ErrorKind;
use vdi_core::manifests::{Verdict, resource_of};
use vdi_core::names::{BROKER_NAME, BROKER_NAMESPACE, MANAGED_BY_LABEL};

use crate::{client, serial};

/// Each object of the broker's manifests as `admin` finds it: (kind, name, resourceVersion).
async fn snapshot(admin: &Client) -> Vec<(String, String, Option<String>)> {
    let mut found = Vec::new();
    for obj in broker::objects().unwrap() {
        let resource = resource_of(&obj).unwrap();
        let api: Api<DynamicObject> = match obj.namespace() {
            Some(ns) => Api::namespaced_with(admin.clone(), &ns, &resource),
            None => Api::all_with(admin.clone(), &resource),
        };
        let live = api.get_opt(&obj.name_any()).await.unwrap();
        found.push((
            resource.kind,
            obj.name_any(),
            live.and_then(|l| l.resource_version()),
        ));
    }
    found
}

/// The broker's leader Lease as a replica writes it: `holder` renewed `renewed_ago` seconds ago
/// (15 s Lease), with heartbeats of `broker-a` and `broker-b` and a last reconcile.
fn leader_lease(holder: &str, renewed_ago: i64) -> Lease {
    let ago = |s: i64| jiff::Timestamp::now() - jiff::SignedDuration::from_secs(s);
    serde_json::from_value(json!({
        "metadata": {
            "name": BROKER_NAME,
            "annotations": {
                "replica.corral.dev/broker-a": ago(renewed_ago).to_string(),
                "replica.corral.dev/broker-b": ago(renewed_ago + 3).to_string(),
                "corral.dev/broker-last-reconcile": ago(renewed_ago + 1).to_string(),
            }
        },
        "spec": { "holderIdentity": holder, "leaseDurationSeconds": 15,
                  "acquireTime": MicroTime(ago(renewed_ago)),
                  "renewTime": MicroTime(ago(renewed_ago)) }
    }))
    .unwrap()
}

/// `corral-vdi --context <user> broker <args>` against the sandbox, stdin empty: its exit code
/// and standard output.
fn cli(user: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(cli_binary())
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .args(["--context", user, "broker"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn broker_install_status_and_uninstall_as_an_administrator_and_as_a_user() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let alice = client("alice").await;
    // Whatever another test of this binary left (the namespace, a leader Lease) goes first.
    broker::uninstall(&admin).await.unwrap();
    let status = broker::status(&admin).await.unwrap();
    assert_eq!(status.state, BrokerState::Absent, "{status:?}");

    // Before the install, an ordinary user may not read the Lease: the Role that lets her is
    // named (RBAC follows the uninstall of its binding a moment later).
    let what = "alice refused the broker's status";
    let status = eventually(what, Duration::from_secs(10), || async {
        let status = broker::status(&alice).await.unwrap();
        (status.state == BrokerState::Unknown).then_some(status)
    })
    .await;
    assert!(status.summary.contains(STATUS_ROLE), "{}", status.summary);

    // She may not install it either: refused with who may (the guard, which it installs first),
    // and nothing written.
    let before = snapshot(&admin).await;
    let refused = broker::install(&alice, None).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Forbidden, "{refused}");
    assert!(
        refused
            .to_string()
            .contains("you may not install the Corral VDI guard"),
        "{refused}"
    );
    assert_eq!(snapshot(&admin).await, before, "nothing moved");

    // An administrator installs it: the guard first (the broker grants nothing without its
    // claim rules), then every object is said, and is as this version ships it.
    let done = broker::install(&admin, None).await.unwrap();
    assert!(
        done[0].starts_with(
            "installed the Corral VDI guard, whose claim rules the broker's grants rest on"
        ),
        "{done:?}"
    );
    assert_eq!(
        vdi_core::guard::status(&admin).await.unwrap().state,
        vdi_core::guard::GuardState::Installed
    );
    for object in [
        "ClusterRole corral-vdi:broker",
        "Deployment corral-vdi-broker in namespace \"corral-vdi-system\"",
        "ValidatingAdmissionPolicy corral-vdi-broker-members",
    ] {
        assert!(
            done.iter().any(|d| d.ends_with(object)),
            "{object} in {done:?}"
        );
    }
    assert!(
        !done
            .iter()
            .any(|d| d.contains("ClusterRole corral-vdi:desktop-user")),
        "no claimant ClusterRole: {done:?}"
    );
    assert_eq!(done.len(), before.len() + 1, "{done:?}");
    let manifests = broker::manifest_status(&admin).await.unwrap();
    assert_eq!(
        manifests.verdict,
        Some(Verdict::Installed),
        "{}",
        manifests.summary
    );
    // Ordinary users may not read the objects: no verdict, no error.
    assert_eq!(broker::manifest_status(&alice).await.unwrap().verdict, None);

    // Installed, no replica has run (this sandbox runs none): no Lease, for everyone; that
    // alice is told so (404), not refused (403), is the status Role at work (RBAC follows its
    // new binding a moment later).
    let status = broker::status(&admin).await.unwrap();
    assert_eq!(status.state, BrokerState::Absent, "{status:?}");
    let what = "alice told the broker is absent";
    eventually(what, Duration::from_secs(10), || async {
        let status = broker::status(&alice).await.unwrap();
        (status.state == BrokerState::Absent).then_some(())
    })
    .await;
    let (code, said) = cli("alice", &["status"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("broker: absent"), "{said}");

    // A replica leads (the Lease written as the replicas write it): running, for alice too.
    let leases = Api::<Lease>::namespaced(admin.clone(), BROKER_NAMESPACE);
    let written = leases
        .create(&PostParams::default(), &leader_lease("broker-a", 1))
        .await
        .unwrap();
    let status = broker::status(&alice).await.unwrap();
    assert_eq!(status.state, BrokerState::Running, "{}", status.summary);
    assert_eq!(status.leader.as_deref(), Some("broker-a"));
    assert_eq!(status.replicas.len(), 2, "{status:?}");
    assert!(
        status.replicas[0].leader && !status.replicas[1].leader && status.last_reconcile.is_some(),
        "{status:?}"
    );
    let (code, said) = cli("alice", &["status"]);
    assert_eq!(code, Some(0), "{said}");
    for words in ["broker: running", "leader          broker-a", "broker-b"] {
        assert!(said.contains(words), "{words}: {said}");
    }
    // She reads that one Lease only: a list or watch names it in a field selector.
    let hers = Api::<Lease>::namespaced(alice.clone(), BROKER_NAMESPACE);
    let one = hers
        .list(&ListParams::default().fields(&format!("metadata.name={BROKER_NAME}")))
        .await
        .unwrap();
    assert_eq!(one.items.len(), 1);
    assert!(hers.list(&ListParams::default()).await.is_err());

    // Not renewed within its 15 s: no leader.
    let mut stale = leader_lease("broker-a", 60);
    stale.metadata.resource_version = written.resource_version();
    leases
        .replace(BROKER_NAME, &PostParams::default(), &stale)
        .await
        .unwrap();
    let status = broker::status(&alice).await.unwrap();
    assert_eq!(status.state, BrokerState::NoLeader, "{}", status.summary);
    assert!(status.replicas.is_empty(), "{status:?}");

    // The broker's grants in a member's namespace (as it makes them); a Role of someone else's
    // beside them stays.
    let ns = namespace("broker-uninstall").await;
    let role = |name: &str, managed: bool| -> Role {
        let labels = if managed {
            json!({ MANAGED_BY_LABEL: broker::MANAGED_BY })
        } else {
            json!({})
        };
        serde_json::from_value(json!({ "metadata": { "name": name, "labels": labels },
            "rules": [{ "apiGroups": ["subresources.kubevirt.io"],
                        "resources": ["virtualmachineinstances/vnc"], "verbs": ["get"],
                        "resourceNames": ["d-1"] }] }))
        .unwrap()
    };
    let roles = Api::<Role>::namespaced(admin.clone(), &ns);
    roles
        .create(&PostParams::default(), &role("corral-vdi-claim-d-1", true))
        .await
        .unwrap();
    roles
        .create(&PostParams::default(), &role("someone-elses", false))
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "corral-vdi-claim-d-1",
                      "labels": { MANAGED_BY_LABEL: broker::MANAGED_BY } },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "corral-vdi-claim-d-1" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice" }]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // The CLI asks first: with no answer, nothing is removed.
    let installed = snapshot(&admin).await;
    let (code, said) = cli("admin", &["uninstall"]);
    assert_ne!(code, Some(0), "{said}");
    assert!(said.contains("pass --yes"), "{said}");
    assert_eq!(snapshot(&admin).await, installed, "nothing moved");

    // Uninstall removes the objects, the grants and the Lease, and says so.
    let (code, said) = cli("admin", &["uninstall", "--yes"]);
    assert_eq!(code, Some(0), "{said}");
    for object in [
        "Deployment corral-vdi-broker in namespace \"corral-vdi-system\"",
        &format!("Role corral-vdi-claim-d-1 in namespace \"{ns}\""),
        &format!("RoleBinding corral-vdi-claim-d-1 in namespace \"{ns}\""),
        "Lease corral-vdi-broker in namespace \"corral-vdi-system\"",
    ] {
        assert!(said.contains(object), "{object}: {said}");
    }
    assert!(!said.contains("someone-elses"), "{said}");
    assert!(roles.get_opt("someone-elses").await.unwrap().is_some());
    assert!(
        roles
            .get_opt("corral-vdi-claim-d-1")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        broker::status(&admin).await.unwrap().state,
        BrokerState::Absent
    );
    assert_eq!(
        broker::manifest_status(&admin).await.unwrap().verdict,
        Some(Verdict::Absent)
    );
    // Removed again: nothing to remove.
    assert_eq!(
        broker::uninstall(&admin).await.unwrap(),
        Vec::<String>::new()
    );
    // The guard stays with the broker gone (its own uninstall removes it): this binary's other
    // tests start without it.
    crate::uninstall(&admin).await;
    crate::wait_none_enforced().await;
}
