//! Pool delete removes only what it can prove this product made for the pool (issue 23, item
//! 2), against a real API server (the sandbox) with emulated KubeVirt clones.
//!
//! The attack: anyone allowed to create clone objects (what pool create needs) plants a
//! `VirtualMachineClone` labelled with a pool whose target is an existing VM, and a Lease
//! labelled with the pool; an administrator's `pool delete` must delete neither. The case that
//! must keep working: an interrupted create of ours (its clone object made a VM, which never
//! got the pool label) is still cleaned up, because that VM carries the creation mark our clone
//! step writes (`spec.patches`, applied by the clone controller as KubeVirt applies them).

use std::collections::BTreeMap;
use std::time::Duration;

use corral_tests::{client_as, eventually, golden_vm, grant_role, namespace};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use vdi_core::clock::ServerClock;
use vdi_core::names::{MEMBER_LABEL, POOL_LABEL, lease_name};
use vdi_core::pool::{
    CREATION_MARK_ANNOTATION, CreateOptions, CreatePool, DeletePool, PoolDeleted, RUN_LABEL,
    clone_name, create_pool, creation_mark, creation_mark_patch, delete_pool,
};
use vdi_core::resources::VirtualMachine;

/// A v1beta1 clone object `name` of `source` into `target`, with `labels` and `patches`.
fn clone_object(
    ns: &str,
    name: &str,
    source: &str,
    target: &str,
    labels: Value,
    patches: Vec<String>,
) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": { "name": name, "namespace": ns, "labels": labels },
        "spec": {
            "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": source },
            "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": target },
            "patches": patches,
        }
    }))
    .unwrap()
}

/// A Lease `name` labelled with `pool`, held by `holder` for an hour from now.
async fn lease(admin: &Client, ns: &str, name: &str, pool: Option<&str>, holder: &str) {
    let now = jiff::Timestamp::now();
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: pool.map(|p| BTreeMap::from([(POOL_LABEL.to_owned(), p.to_owned())])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            acquire_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                now,
            )),
            renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                now,
            )),
            lease_duration_seconds: Some(3600),
            ..Default::default()
        }),
    };
    Api::<Lease>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
}

async fn delete(admin: &Client, ns: &str, pool: &str) -> PoolDeleted {
    let clock = ServerClock::measure(admin).await.unwrap();
    let request = DeletePool {
        namespace: ns.into(),
        name: pool.into(),
        force: false,
    };
    delete_pool(admin, &request, &clock)
        .await
        .unwrap_or_else(|e| panic!("delete pool {pool}: {e}"))
}

/// Waits until clone object `name` reached `phase`.
async fn clone_phase(api: &Api<DynamicObject>, name: &str, phase: &str) {
    eventually(
        &format!("clone object {name} in phase {phase}"),
        Duration::from_secs(20),
        || async {
            let c = api.get(name).await.ok()?;
            (c.data.pointer("/status/phase") == Some(&json!(phase))).then_some(())
        },
    )
    .await;
}

/// Pool create's request for a pool `pool` of one member in `ns`, cloned from
/// `golden-desktop`.
fn one_member(ns: &str, pool: &str) -> CreatePool {
    CreatePool {
        namespace: ns.to_owned(),
        name: pool.into(),
        golden: "golden-desktop".into(),
        size: 1,
        options: CreateOptions::default(),
    }
}

#[tokio::test]
async fn a_planted_clone_object_and_a_foreign_lease_survive_pool_delete() {
    let ns = namespace("planted").await;
    let admin = client_as("admin").await;
    let golden = golden_vm(&ns, "golden-desktop", "Halted", |_| {}).await;
    create_pool(&admin, &one_member(&ns, "tpool"), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    // Our clone step wrote the creation mark on the member, through the clone's patches.
    let member = vms.get("tpool-1").await.unwrap();
    let mark = member.annotations().get(CREATION_MARK_ANNOTATION).cloned();
    assert!(
        mark.as_deref()
            .is_some_and(|m| m.starts_with(&format!("{}/", clone_name("tpool-1")))),
        "{:?}",
        member.annotations()
    );

    // carol may create clone objects (what pool create needs) and nothing else on VMs.
    grant_role(
        &ns,
        "carol",
        json!([{ "apiGroups": ["clone.kubevirt.io"], "resources": ["virtualmachineclones"],
                 "verbs": ["get", "list", "watch", "create", "delete"] }]),
    )
    .await;
    let carol = client_as("carol").await;
    // The plant copies all of ours, even a forged mark for itself: the label, a run id, the
    // patch. It names an existing VM, so no clone controller ever creates (or patches) it.
    let run = "0123456789abcdef";
    let planted = clone_object(
        &ns,
        "planted",
        "tpool-1",
        "golden-desktop",
        json!({ POOL_LABEL: "tpool", MEMBER_LABEL: "tpool-2", RUN_LABEL: run }),
        vec![creation_mark_patch("planted", run)],
    );
    corral_tests::clones(&carol, &ns)
        .create(&PostParams::default(), &planted)
        .await
        .unwrap();
    // A Lease labelled with the pool under a name that is no member's claim, and the "claim
    // Lease" of the golden VM, labelled with the pool too.
    lease(&admin, &ns, "not-a-claim", Some("tpool"), "mallory").await;
    lease(
        &admin,
        &ns,
        &lease_name("golden-desktop"),
        Some("tpool"),
        "mallory",
    )
    .await;

    let deleted = delete(&admin, &ns, "tpool").await;
    assert_eq!(deleted.members, ["tpool-1"]);
    assert_eq!(deleted.clones, ["planted"], "the plant itself may go");
    assert!(deleted.unlabelled.is_empty(), "{deleted:?}");
    assert!(deleted.leases.is_empty(), "{deleted:?}");
    assert_eq!(deleted.left_alone.len(), 3, "{:?}", deleted.left_alone);
    assert!(
        deleted.left_alone[0].starts_with(
            "VirtualMachine golden-desktop (named by clone object \"planted\", but without the \
             corral.dev/vdi-cloned-by mark our clones write"
        ) || deleted.left_alone[0].starts_with(
            "VirtualMachine golden-desktop (named by clone object \"planted\", but created at"
        ),
        "{:?}",
        deleted.left_alone
    );
    assert!(
        deleted.left_alone.contains(&format!(
            "Lease {} (labelled with the pool, but not the claim Lease corral-vdi-<member> of a \
             VM deleted here)",
            lease_name("golden-desktop")
        )),
        "{:?}",
        deleted.left_alone
    );
    assert!(
        deleted.left_alone.contains(
            &"Lease not-a-claim (labelled with the pool, but not the claim Lease \
              corral-vdi-<member> of a VM deleted here)"
                .to_owned()
        ),
        "{:?}",
        deleted.left_alone
    );

    // golden-desktop is untouched (same object, nothing written), and so are the Leases.
    let after = vms.get("golden-desktop").await.unwrap();
    assert_eq!(after.uid(), golden.uid());
    assert!(after.metadata.deletion_timestamp.is_none());
    assert!(!after.annotations().contains_key(CREATION_MARK_ANNOTATION));
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    for name in ["not-a-claim".to_owned(), lease_name("golden-desktop")] {
        let lease = leases.get(&name).await.unwrap();
        assert!(lease.metadata.deletion_timestamp.is_none(), "{name}");
    }
    // A second delete finds nothing of the pool, and still names what it leaves alone.
    let again = delete(&admin, &ns, "tpool").await;
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(again.left_alone.len(), 2, "{:?}", again.left_alone);
}

#[tokio::test]
async fn an_interrupted_create_of_ours_is_cleaned_up_and_an_unmarked_vm_is_not() {
    let ns = namespace("interrupted").await;
    let admin = client_as("admin").await;
    golden_vm(&ns, "golden-desktop", "Halted", |_| {}).await;
    let api = corral_tests::clones(&admin, &ns);
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    let run = "fedcba9876543210";
    let labels = |member: &str| json!({ POOL_LABEL: "half", MEMBER_LABEL: member, RUN_LABEL: run });
    // half-1: what our create leaves when it is stopped between the clone and the label.
    let ours = clone_name("half-1");
    api.create(
        &PostParams::default(),
        &clone_object(
            &ns,
            &ours,
            "golden-desktop",
            "half-1",
            labels("half-1"),
            vec![creation_mark_patch(&ours, run)],
        ),
    )
    .await
    .unwrap();
    // half-2: a clone object that looks like ours but wrote no mark on the VM it made.
    let unmarked = clone_name("half-2");
    api.create(
        &PostParams::default(),
        &clone_object(
            &ns,
            &unmarked,
            "golden-desktop",
            "half-2",
            labels("half-2"),
            Vec::new(),
        ),
    )
    .await
    .unwrap();
    clone_phase(&api, &ours, "Succeeded").await;
    clone_phase(&api, &unmarked, "Succeeded").await;
    let half1 = vms.get("half-1").await.unwrap();
    assert_eq!(
        half1.annotations().get(CREATION_MARK_ANNOTATION),
        Some(&creation_mark(&ours, run)),
        "the clone controller applied the patch"
    );
    assert!(!half1.labels().contains_key(POOL_LABEL));
    // A claim Lease of the unlabelled VM (no label needed: the name says whose it is).
    lease(&admin, &ns, &lease_name("half-1"), None, "alice").await;

    let deleted = delete(&admin, &ns, "half").await;
    assert!(deleted.members.is_empty());
    assert_eq!(deleted.unlabelled, ["half-1"]);
    assert_eq!(deleted.leases, [lease_name("half-1")]);
    let mut clones_deleted = deleted.clones.clone();
    clones_deleted.sort();
    assert_eq!(clones_deleted, [ours.clone(), unmarked.clone()]);
    assert_eq!(
        deleted.left_alone,
        [format!(
            "VirtualMachine half-2 (named by clone object \"{unmarked}\", but without the \
             corral.dev/vdi-cloned-by mark our clones write)"
        )]
    );
    eventually("half-1 gone", Duration::from_secs(20), || async {
        vms.get_opt("half-1").await.unwrap().is_none().then_some(())
    })
    .await;
    let half2 = vms.get("half-2").await.unwrap();
    assert!(half2.metadata.deletion_timestamp.is_none());
}

/// Issue 36: pool create and pool delete read one rule of what belongs to a pool
/// (`vdi_core::policy::plan::claim_of_pool`): a claim Lease left over from a member whose VM
/// was deleted by hand is one pool create refuses, naming `pool delete`, and `pool delete`
/// removes it, so that the hint works; a Lease named for a VM of another pool stays.
#[tokio::test]
async fn a_leftover_claim_lease_that_pool_create_refuses_is_one_pool_delete_removes() {
    let ns = namespace("leftover").await;
    let admin = client_as("admin").await;
    golden_vm(&ns, "golden-desktop", "Halted", |_| {}).await;
    let request = one_member(&ns, "op");
    create_pool(&admin, &request, |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Its member was claimed, then its VM deleted by hand: the Lease stays.
    lease(&admin, &ns, &lease_name("op-1"), Some("op"), "alice").await;
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    vms.delete("op-1", &Default::default()).await.unwrap();
    eventually("op-1 gone", Duration::from_secs(20), || async {
        vms.get_opt("op-1").await.unwrap().is_none().then_some(())
    })
    .await;
    // A VM of another pool named like a member of "op", with its own claim: not op's.
    let mut other = VirtualMachine::new("op-2", Default::default());
    other.metadata.labels = Some(BTreeMap::from([(POOL_LABEL.to_owned(), "x".to_owned())]));
    other.spec.run_strategy = Some("Halted".into());
    vms.create(&PostParams::default(), &other).await.unwrap();
    lease(&admin, &ns, &lease_name("op-2"), Some("x"), "bob").await;

    let refused = create_pool(&admin, &request, |_| {}).await.unwrap_err();
    let said = refused.to_string();
    assert!(
        said.contains("claim Lease \"corral-vdi-op-1\" already exists"),
        "{said}"
    );
    assert!(
        refused
            .suggestion()
            .is_some_and(|s| s.contains("corral-vdi pool delete op")),
        "{refused:?}"
    );

    let deleted = delete(&admin, &ns, "op").await;
    assert_eq!(deleted.leases, [lease_name("op-1")], "{deleted:?}");
    let leases = Api::<Lease>::namespaced(admin.clone(), &ns);
    assert!(leases.get_opt(&lease_name("op-1")).await.unwrap().is_none());
    assert!(
        leases.get_opt(&lease_name("op-2")).await.unwrap().is_some(),
        "the other pool's claim stays"
    );
    assert!(vms.get_opt("op-2").await.unwrap().is_some());
}
