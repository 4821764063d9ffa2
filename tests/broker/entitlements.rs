//! Entitlements (issue 38, SPEC "Entitlements"): who may claim from which pool is the RBAC verb
//! `claim` on `desktoppools` with the pool's name, checked where the claim is made with the
//! claimant's own groups (the sandbox's users have real ones: alice and bob in `engineering`,
//! carol in `contractors`), and by the broker for an administrator's assignment to someone else.

use corral_tests::{client_as, eventually, leases, namespace, stopped_pool, vms};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use vdi_core::entitlement::{self, Who};
use vdi_core::names::{BROKER_REASON_ANNOTATION, FORCED_BY_ANNOTATION, lease_name};

use crate::{CONVERGE, claim, cli_as, replicas_steady, wait_granted};

/// A namespace of the test's own where no pool is open to anyone until entitled: the sandbox's
/// every-pool grant taken away, and `pool` (label-only, `size` stopped members) entitled to
/// nobody.
pub(crate) async fn closed_pool(prefix: &str, pool: &str, size: usize) -> String {
    let admin = client_as("admin").await;
    let ns = namespace(prefix).await;
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), &ns)
        .delete(sandbox::bootstrap::EVERY_POOL, &DeleteParams::default())
        .await
        .unwrap();
    stopped_pool(&admin, &ns, pool, size).await.unwrap();
    entitlement::unentitle(&admin, &ns, pool, &[Who::Everyone])
        .await
        .unwrap();
    ns
}

/// The resourceVersions of the pool's VMs and the namespace's Lease names: what "nothing moved"
/// compares.
async fn snapshot(ns: &str) -> (Vec<String>, Vec<String>) {
    let admin = client_as("admin").await;
    let vms = vms(&admin, ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|vm| {
            format!(
                "{}@{}",
                vm.name_any(),
                vm.resource_version().unwrap_or_default()
            )
        })
        .collect();
    let leases = leases(&admin, ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    (vms, leases)
}

#[tokio::test]
async fn a_pool_entitled_to_a_group_is_closed_to_everyone_else() {
    let _steady = replicas_steady().await;
    let ns = closed_pool("entitle", "eng", 3).await;
    // A pool beside it open to everyone: RBAC only adds rights, so "open to all" is a grant of
    // that pool's name and leaves "eng" closed.
    let admin = client_as("admin").await;
    stopped_pool(&admin, &ns, "open", 1).await.unwrap();

    let (ok, stdout, stderr) = cli_as(
        "admin",
        &[
            "pool",
            "entitle",
            "eng",
            "--group",
            "engineering",
            "-n",
            &ns,
        ],
    );
    assert!(ok, "entitle: {stderr}");
    assert!(
        stdout.contains("group engineering may claim from pool \"eng\""),
        "{stdout}"
    );
    let (ok, stdout, stderr) = cli_as("admin", &["pool", "entitlements", "eng", "-n", &ns]);
    assert!(ok, "entitlements: {stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("group engineering"))
        .unwrap_or_else(|| panic!("no line for the group: {stdout}"));
    assert!(
        line.contains("this pool") && line.ends_with("admin"),
        "{line}"
    );
    assert!(
        !stdout.contains("user carol") && !stdout.contains("contractors"),
        "{stdout}"
    );

    // carol (contractors): the CLI's assign and a raw Lease are refused, naming the right and
    // the pool; nothing moved.
    let before = snapshot(&ns).await;
    let (ok, _, stderr) = cli_as("carol", &["assign", "eng", "carol", "-n", &ns]);
    assert!(!ok, "carol got a desktop of eng");
    assert!(
        stderr.contains("carol may not claim from pool \"eng\"")
            && stderr.contains("no claim on desktoppools.corral.dev \"eng\"")
            && stderr.contains("corral-vdi pool entitle eng --user carol"),
        "{stderr}"
    );
    let raw: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": lease_name("eng-1"),
                      "labels": { "corral.dev/vdi-pool": "eng", "corral.dev/vdi-member": "eng-1" } },
        "spec": { "holderIdentity": "carol", "leaseDurationSeconds": 3600,
                  "acquireTime": "2026-12-06T10:00:00.000000Z",
                  "renewTime": "2026-12-06T10:00:00.000000Z" }
    }))
    .unwrap();
    let refused = leases(&client_as("carol").await, &ns)
        .create(&PostParams::default(), &raw)
        .await
        .expect_err("carol's raw Lease for eng-1 was admitted");
    assert!(
        refused.to_string().contains("may not claim from pool eng"),
        "{refused}"
    );
    assert_eq!(
        snapshot(&ns).await,
        before,
        "a refused claim moved something"
    );

    // The open pool beside it is carol's to claim.
    let claimed = claim("carol", &ns, "open").await;
    assert_eq!(claimed.member, "open-1");

    // alice (engineering, by group only): her claim works.
    let mine = claim("alice", &ns, "eng").await;
    wait_granted(&ns, &mine.member, "alice", CONVERGE).await;

    // The group's grant taken back: alice's claim runs on (she renews it, the grant stays),
    // bob's next claim is refused.
    let (ok, _, stderr) = cli_as(
        "admin",
        &[
            "pool",
            "entitle",
            "eng",
            "--group",
            "engineering",
            "--remove",
            "-n",
            &ns,
        ],
    );
    assert!(ok, "remove: {stderr}");
    let before = snapshot(&ns).await;
    let (ok, _, stderr) = cli_as("bob", &["assign", "eng", "bob", "-n", &ns]);
    assert!(
        !ok && stderr.contains("bob may not claim from pool \"eng\""),
        "{stderr}"
    );
    assert_eq!(
        snapshot(&ns).await,
        before,
        "bob's refused claim moved something"
    );
    let alices =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client_as("alice").await, &ns);
    let mut lease = alices.get(&lease_name(&mine.member)).await.unwrap();
    if let Some(spec) = lease.spec.as_mut() {
        spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            jiff::Timestamp::now(),
        ));
    }
    alices
        .replace(&lease_name(&mine.member), &PostParams::default(), &lease)
        .await
        .expect("alice renews her claim after losing the right");
    wait_granted(&ns, &mine.member, "alice", CONVERGE).await;
}

#[tokio::test]
async fn an_administrator_assigns_outside_the_entitlement_only_by_force() {
    let _steady = replicas_steady().await;
    let ns = closed_pool("entforce", "priv", 2).await;

    // Not for carol: refused before anything is written, naming both ways out.
    let before = snapshot(&ns).await;
    let (ok, _, stderr) = cli_as("admin", &["assign", "priv", "carol", "-n", &ns]);
    assert!(!ok, "an administrator handed carol a pool not for her");
    assert!(
        stderr.contains("pool \"priv\"")
            && stderr.contains("is not for carol")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        snapshot(&ns).await,
        before,
        "the refused assign moved something"
    );

    // Forced: recorded on the claim, and the broker grants it.
    let (ok, stdout, stderr) = cli_as("admin", &["assign", "priv", "carol", "--force", "-n", &ns]);
    assert!(ok, "forced assign: {stderr}");
    let member = stdout
        .lines()
        .find_map(|l| l.strip_prefix("assigned ")?.strip_suffix(" → carol"))
        .unwrap_or_else(|| panic!("no member assigned to carol: {stdout}"))
        .to_owned();
    let lease = leases(&client_as("admin").await, &ns)
        .get(&lease_name(&member))
        .await
        .unwrap();
    assert_eq!(
        lease
            .annotations()
            .get(FORCED_BY_ANNOTATION)
            .map(String::as_str),
        Some("admin")
    );
    wait_granted(&ns, &member, "carol", CONVERGE).await;

    // An ordinary user may not write the record, nor name someone else in it.
    let carols =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client_as("carol").await, &ns);
    let mut lease = carols.get(&lease_name(&member)).await.unwrap();
    lease
        .annotations_mut()
        .insert(FORCED_BY_ANNOTATION.to_owned(), "carol".to_owned());
    let refused = carols
        .replace(&lease_name(&member), &PostParams::default(), &lease)
        .await
        .expect_err("carol wrote the forced-by record");
    assert!(
        refused.to_string().contains("corral.dev/vdi-forced-by"),
        "{refused}"
    );

    // An administrator's unforced claim for carol, written by hand: the broker asks and
    // refuses; carol may not drop the record to be asked no more.
    let other = if member == "priv-1" {
        "priv-2"
    } else {
        "priv-1"
    };
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let raw: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": lease_name(other),
                      "labels": { "corral.dev/vdi-pool": "priv", "corral.dev/vdi-member": other },
                      "annotations": { vdi_core::names::ASSIGNED_BY_ANNOTATION: "admin" } },
        "spec": { "holderIdentity": "carol", "leaseDurationSeconds": 3600,
                  "acquireTime": now, "renewTime": now }
    }))
    .unwrap();
    leases(&client_as("admin").await, &ns)
        .create(&PostParams::default(), &raw)
        .await
        .unwrap();
    let api = vms(&client_as("admin").await, &ns);
    let reason = eventually("the broker's reason", CONVERGE, || async {
        let vm = api.get(other).await.ok()?;
        vm.annotations().get(BROKER_REASON_ANNOTATION).cloned()
    })
    .await;
    assert!(reason.contains("is not for"), "{reason}");
    let mut unrecorded = carols.get(&lease_name(other)).await.unwrap();
    unrecorded
        .annotations_mut()
        .remove(vdi_core::names::ASSIGNED_BY_ANNOTATION);
    let refused = carols
        .replace(&lease_name(other), &PostParams::default(), &unrecorded)
        .await
        .expect_err("carol dropped the record of who assigned her claim");
    assert!(
        refused
            .to_string()
            .contains("stay as written while the holder does"),
        "{refused}"
    );
    let (role, binding) = crate::grant(&ns, other).await;
    assert!(
        role.is_none() && binding.is_none(),
        "{other} granted to carol"
    );
}

#[tokio::test]
async fn a_claim_labelled_for_another_pool_is_never_granted() {
    let _steady = replicas_steady().await;
    let ns = closed_pool("entlabel", "shut", 1).await;
    let admin = client_as("admin").await;
    stopped_pool(&admin, &ns, "door", 1).await.unwrap();

    // carol may claim from "door" and writes a claim of shut-1 saying it is of "door": the guard
    // admits it (it sees the label only), the broker sees the member's own pool, never grants
    // it, and releases it at once so that her renewals keep shut-1 from nobody.
    let raw = |member: &str| -> kube::api::DynamicObject {
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string();
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "name": lease_name(member),
                          "labels": { "corral.dev/vdi-pool": "door", "corral.dev/vdi-member": member } },
            "spec": { "holderIdentity": "carol", "leaseDurationSeconds": 3600,
                      "acquireTime": now, "renewTime": now }
        }))
        .unwrap()
    };
    leases(&client_as("carol").await, &ns)
        .create(&PostParams::default(), &raw("shut-1"))
        .await
        .unwrap();
    let reclaimed = crate::wait_event(&ns, "shut-1", "Reclaimed", "carol", CONVERGE).await;
    let note = reclaimed.note.unwrap_or_default();
    assert!(
        note.contains("says pool \"door\"") && note.contains("pool \"shut\""),
        "{note}"
    );
    assert!(
        leases(&admin, &ns)
            .get_opt(&lease_name("shut-1"))
            .await
            .unwrap()
            .is_none(),
        "carol's claim of another pool stayed"
    );
    // Nor can she move a claim to another pool, or drop its pool, to be asked no more: the
    // guard keeps a held claim with the pool it was entitled for (her claim of door-1 here).
    leases(&client_as("carol").await, &ns)
        .create(&PostParams::default(), &raw("door-1"))
        .await
        .unwrap();
    let carols = kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        client_as("carol").await,
        &ns,
    );
    let held = carols.get(&lease_name("door-1")).await.unwrap();
    let mut moved = held.clone();
    moved
        .labels_mut()
        .insert("corral.dev/vdi-pool".into(), "shut".into());
    let refused = carols
        .replace(&lease_name("door-1"), &PostParams::default(), &moved)
        .await
        .expect_err("carol moved her claim to pool shut");
    assert!(
        refused.to_string().contains("may not move claim Lease"),
        "{refused}"
    );
    let mut dropped = held.clone();
    dropped.labels_mut().remove("corral.dev/vdi-pool");
    let refused = carols
        .replace(&lease_name("door-1"), &PostParams::default(), &dropped)
        .await
        .expect_err("carol dropped her claim's pool");
    assert!(refused.to_string().contains("but no pool"), "{refused}");
    let (role, binding) = crate::grant(&ns, "shut-1").await;
    assert!(
        role.is_none() && binding.is_none(),
        "shut-1 granted to carol"
    );
}
