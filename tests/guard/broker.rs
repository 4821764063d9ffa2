//! With the guard, the broker (its ServiceAccount, impersonated by the sandbox's admin as the
//! emulator impersonates KubeVirt's) keeps its leader-election Lease, recovers held claims and
//! writes the claim label and annotations, while its own annotations stay its own; and the
//! policy installed with the broker (broker/members-policy.yaml) leaves a claim's label and
//! annotation to the broker. This binary's sandbox runs no broker: the tests act as it.

use std::time::Duration;

use corral_tests::{eventually, namespace, pool_vms};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use vdi_core::names::{
    ASSIGNED_BY_ANNOTATION, ASSIGNED_TO_LABEL, BROKER_NAME, BROKER_NAMESPACE,
    BROKER_REASON_ANNOTATION, BROKER_USER, CLAIMED_AT_ANNOTATION, GRANTED_TO_ANNOTATION,
    POOL_LABEL, lease_name,
};
use vdi_core::resources::VirtualMachine;

use crate::{
    client, denied, install_and_wait, label_patch, lease_for, serial, uninstall, vm_version,
    wait_enforced,
};

/// Start of the members policy's refusal.
pub(crate) const BROKER_DENIAL: &str = "corral-vdi guard: this cluster has a broker: a claim is the Lease \
                             alone; the broker labels the member (";

/// A client acting as the broker's ServiceAccount, with RBAC everywhere (`system:masters`, as
/// the sandbox gives KubeVirt's identities) but not a Corral VDI administrator.
async fn as_broker() -> Client {
    client("admin").await;
    sandbox::kubeconfig::client_impersonating(
        &corral_tests::sandbox().kubeconfig,
        "admin",
        BROKER_USER,
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:corral-vdi-system",
            "system:masters",
        ],
    )
    .await
    .unwrap()
}

/// A micro-time `seconds_ago` before now, as the API server stores one.
fn micro_ago(seconds_ago: i64) -> MicroTime {
    MicroTime(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds_ago))
}

/// alice's claim on `member` in `ns`, expired an hour ago (60 s, renewed an hour ago).
async fn stale_claim(alice: &Client, ns: &str, member: &str) -> Lease {
    let mut stale = lease_for(member, "alice");
    let spec = stale.spec.as_mut().unwrap();
    spec.lease_duration_seconds = Some(60);
    spec.acquire_time = Some(micro_ago(7200));
    spec.renew_time = Some(micro_ago(3600));
    Api::<Lease>::namespaced(alice.clone(), ns)
        .create(&PostParams::default(), &stale)
        .await
        .unwrap_or_else(|e| panic!("alice claims {member}: {e}"))
}

fn lease_version(lease: Option<Lease>) -> Option<String> {
    lease.and_then(|l| l.metadata.resource_version)
}

/// A merge patch of a member's `annotations` (a `null` value removes one).
fn annotations_patch(annotations: Value) -> Patch<Value> {
    Patch::Merge(json!({ "metadata": { "annotations": annotations } }))
}

/// A merge patch of a member's assigned-to label (`None` removes it) and `annotations`.
fn claim_patch(label: Option<&str>, annotations: Value) -> Patch<Value> {
    Patch::Merge(json!({ "metadata": {
        "labels": { ASSIGNED_TO_LABEL: label }, "annotations": annotations } }))
}

/// Patches VM `member` in `ns` as `client`.
async fn patch_vm(
    client: &Client,
    ns: &str,
    member: &str,
    patch: Patch<Value>,
) -> kube::Result<VirtualMachine> {
    Api::<VirtualMachine>::namespaced(client.clone(), ns)
        .patch(member, &PatchParams::default(), &patch)
        .await
}

#[tokio::test]
async fn with_the_guard_the_brokers_leader_lease_is_no_claim_but_its_name_elsewhere_is() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let broker = as_broker().await;
    let ns = namespace("guard-leader").await;
    pool_vms(&admin, &ns, "e", 1).await.unwrap();
    install_and_wait(&admin, &ns, "e-1").await;
    let system: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": BROKER_NAMESPACE } })).unwrap();
    match Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &system)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create namespace {BROKER_NAMESPACE}: {e}"),
    }

    // As leader election writes it: the holder is a replica's identity, not the broker's user
    // name, and the replicas hand it on; each writes its heartbeat beside it. A claim Lease
    // written so would be refused thrice over.
    let leader_lease = |holder: &str, transitions: i32| -> Lease {
        serde_json::from_value(json!({
            "metadata": { "name": BROKER_NAME },
            "spec": { "holderIdentity": holder, "leaseDurationSeconds": 15,
                      "acquireTime": micro_ago(0), "renewTime": micro_ago(0),
                      "leaseTransitions": transitions }
        }))
        .unwrap()
    };
    let leader = Api::<Lease>::namespaced(broker.clone(), BROKER_NAMESPACE);
    let created = leader
        .create(&PostParams::default(), &leader_lease("broker-a", 0))
        .await
        .expect("the broker creates its leader Lease naming a replica");
    let mut taken = leader_lease("broker-b", 1);
    taken.metadata.resource_version = created.metadata.resource_version;
    leader
        .replace(BROKER_NAME, &PostParams::default(), &taken)
        .await
        .expect("the other replica takes the lead");
    leader
        .patch(
            BROKER_NAME,
            &PatchParams::apply("corral-vdi-broker/broker-a"),
            &Patch::Apply(json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": { "name": BROKER_NAME, "annotations": {
                    "replica.corral.dev/broker-a": "2026-12-03T19:00:00Z" } }
            })),
        )
        .await
        .expect("a replica writes its heartbeat");

    // The same name in a member's namespace is a claim Lease like any other.
    let elsewhere = Api::<Lease>::namespaced(broker.clone(), &ns);
    denied(
        "the broker creates a Lease corral-vdi-broker in a pool's namespace naming a replica",
        elsewhere
            .create(&PostParams::default(), &leader_lease("broker-a", 0))
            .await,
        &format!("{BROKER_USER} may not create claim Lease {BROKER_NAME} naming broker-a"),
    );
    denied(
        "bob creates a Lease corral-vdi-broker in a pool's namespace naming alice",
        Api::<Lease>::namespaced(client("bob").await, &ns)
            .create(&PostParams::default(), &lease_for("broker", "alice"))
            .await,
        "bob may not create claim Lease corral-vdi-broker naming alice",
    );
    assert!(
        Api::<Lease>::namespaced(admin.clone(), &ns)
            .get_opt(BROKER_NAME)
            .await
            .unwrap()
            .is_none(),
        "no Lease corral-vdi-broker was created in {ns}"
    );

    Api::<Lease>::namespaced(admin.clone(), BROKER_NAMESPACE)
        .delete(BROKER_NAME, &DeleteParams::default())
        .await
        .unwrap();
    uninstall(&admin).await;
}

#[tokio::test]
async fn with_the_guard_the_broker_reclaims_and_labels_and_its_annotations_are_its_own() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let alice = client("alice").await;
    let bob = client("bob").await;
    let broker = as_broker().await;
    let ns = namespace("guard-broker").await;
    pool_vms(&admin, &ns, "b", 3).await.unwrap();
    install_and_wait(&admin, &ns, "b-3").await;
    let vms_as = |c: &Client| Api::<VirtualMachine>::namespaced(c.clone(), &ns);
    let leases_as = |c: &Client| Api::<Lease>::namespaced(c.clone(), &ns);

    // alice's claim on b-1, expired an hour ago; the broker labelled b-1 for her and bound her
    // access, and says why it cannot finish b-2.
    let stale = stale_claim(&alice, &ns, "b-1").await;
    let granted = json!({ CLAIMED_AT_ANNOTATION: "2026-12-03T18:00:00Z",
                          GRANTED_TO_ANNOTATION: "alice" });
    patch_vm(&broker, &ns, "b-1", claim_patch(Some("alice"), granted))
        .await
        .expect("the broker labels alice's member and says it granted her");
    patch_vm(
        &broker,
        &ns,
        "b-2",
        annotations_patch(json!({ BROKER_REASON_ANNOTATION: "no node has a free GPU for b-2" })),
    )
    .await
    .expect("the broker says why it cannot finish b-2");

    // alice may not write the broker's annotations: not on her own member, not on another,
    // not beside her own label, not their removal.
    let before: Vec<Option<String>> =
        futures::future::join_all(["b-1", "b-2", "b-3"].map(|m| vm_version(&ns, m))).await;
    for (what, member, patch, needle) in [
        (
            "hands her grant to bob",
            "b-1",
            annotations_patch(json!({ GRANTED_TO_ANNOTATION: "bob" })),
            format!("alice may not write {GRANTED_TO_ANNOTATION} on pool member b-1"),
        ),
        (
            "removes her grant",
            "b-1",
            annotations_patch(json!({ GRANTED_TO_ANNOTATION: null })),
            format!("alice may not write {GRANTED_TO_ANNOTATION} on pool member b-1"),
        ),
        (
            "removes the broker's reason",
            "b-2",
            annotations_patch(json!({ BROKER_REASON_ANNOTATION: null })),
            format!("alice may not write {BROKER_REASON_ANNOTATION} on pool member b-2"),
        ),
        (
            "labels a free member for herself, granted, with a reason",
            "b-3",
            claim_patch(
                Some("alice"),
                json!({ GRANTED_TO_ANNOTATION: "alice", BROKER_REASON_ANNOTATION: "none" }),
            ),
            format!(
                "alice may not write {GRANTED_TO_ANNOTATION}, {BROKER_REASON_ANNOTATION} on pool \
                 member b-3: the broker ({BROKER_USER}) writes it"
            ),
        ),
    ] {
        denied(
            &format!("alice {what}"),
            patch_vm(&alice, &ns, member, patch).await,
            &needle,
        );
    }
    let after: Vec<Option<String>> =
        futures::future::join_all(["b-1", "b-2", "b-3"].map(|m| vm_version(&ns, m))).await;
    assert_eq!(after, before, "no member moved");
    patch_vm(
        &admin,
        &ns,
        "b-2",
        annotations_patch(json!({ BROKER_REASON_ANNOTATION: null })),
    )
    .await
    .expect("an administrator clears the broker's reason");

    // The broker recovers a held claim by deleting it, and nothing else of it: it hands no
    // held claim on, and creates one for someone else only as the record of its own writing
    // (an administrator's label it adopts); bob neither.
    let lease_before = stale.metadata.resource_version.clone();
    let mut handed = stale.clone();
    handed.spec.as_mut().unwrap().holder_identity = Some("bob".into());
    denied(
        "the broker hands alice's Lease to bob",
        leases_as(&broker)
            .replace(&lease_name("b-1"), &PostParams::default(), &handed)
            .await,
        "claim Lease corral-vdi-b-1 is held by alice; only its holder or a member of \
         corral-vdi:admins",
    );
    denied(
        "the broker creates a claim naming alice without saying it wrote it",
        leases_as(&broker)
            .create(&PostParams::default(), &lease_for("b-3", "alice"))
            .await,
        &format!("{BROKER_USER} may not create claim Lease corral-vdi-b-3 naming alice"),
    );
    let mut by_admin = lease_for("b-3", "alice");
    by_admin.metadata.annotations =
        Some([(ASSIGNED_BY_ANNOTATION.to_owned(), "admin".to_owned())].into());
    denied(
        "the broker creates a claim naming alice as assigned by admin",
        leases_as(&broker)
            .create(&PostParams::default(), &by_admin)
            .await,
        &format!("{BROKER_USER} may not create claim Lease corral-vdi-b-3 naming alice"),
    );
    denied(
        "bob deletes alice's expired Lease",
        leases_as(&bob)
            .delete(&lease_name("b-1"), &DeleteParams::default())
            .await,
        "reclaimed by the broker where one runs",
    );
    assert_eq!(
        lease_version(leases_as(&admin).get_opt(&lease_name("b-1")).await.unwrap()),
        lease_before,
        "alice's Lease did not move"
    );
    assert!(
        leases_as(&admin)
            .get_opt(&lease_name("b-3"))
            .await
            .unwrap()
            .is_none()
    );
    // An administrator's label-only assignment the broker adopts: a claim it records as its own
    // writing, created or written over a Lease without a holder, never over a held one.
    let mut adopted = lease_for("b-3", "alice");
    adopted.metadata.annotations =
        Some([(ASSIGNED_BY_ANNOTATION.to_owned(), BROKER_USER.to_owned())].into());
    leases_as(&broker)
        .create(&PostParams::default(), &adopted)
        .await
        .expect("the broker adopts a label-only assignment of b-3 to alice");
    let mut over_held = stale.clone();
    over_held.spec.as_mut().unwrap().holder_identity = Some("bob".into());
    over_held.metadata.annotations =
        Some([(ASSIGNED_BY_ANNOTATION.to_owned(), BROKER_USER.to_owned())].into());
    denied(
        "the broker writes its own adoption for bob over alice's held Lease",
        leases_as(&broker)
            .replace(&lease_name("b-1"), &PostParams::default(), &over_held)
            .await,
        "claim Lease corral-vdi-b-1 is held by alice",
    );
    leases_as(&admin)
        .delete(&lease_name("b-3"), &DeleteParams::default())
        .await
        .unwrap();
    leases_as(&broker)
        .delete(
            &lease_name("b-1"),
            &DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: lease_before,
                    uid: None,
                }),
                ..Default::default()
            },
        )
        .await
        .expect("the broker reclaims alice's expired claim");

    // The label follows the Lease (an administrator handed it to bob), then the broker clears
    // the claim's label and annotations.
    patch_vm(
        &broker,
        &ns,
        "b-1",
        claim_patch(Some("bob"), json!({ GRANTED_TO_ANNOTATION: "bob" })),
    )
    .await
    .expect("the broker relabels b-1 for bob");
    patch_vm(
        &broker,
        &ns,
        "b-1",
        claim_patch(
            None,
            json!({ CLAIMED_AT_ANNOTATION: null, GRANTED_TO_ANNOTATION: null }),
        ),
    )
    .await
    .expect("the broker clears the claim");

    // What the broker may not do: pools and specs are an administrator's; it starts and stops
    // through KubeVirt (virt-api changes the run strategy under its own account).
    let before = vm_version(&ns, "b-1").await;
    for (what, patch, needle) in [
        (
            "moves b-1 out of its pool",
            json!({ "metadata": { "labels": { POOL_LABEL: null } } }),
            "only a member of corral-vdi:admins may move it out of its pool",
        ),
        (
            "labels b-1 otherwise",
            json!({ "metadata": { "labels": { "broker.example/tag": "x" } } }),
            "may not change the labels or annotations of pool member b-1",
        ),
        (
            "sets b-1's run strategy itself",
            json!({ "spec": { "runStrategy": "Always" } }),
            "may not change the spec of pool member b-1",
        ),
    ] {
        denied(
            &format!("the broker {what}"),
            patch_vm(&broker, &ns, "b-1", Patch::Merge(patch)).await,
            needle,
        );
    }
    denied(
        "the broker deletes b-1",
        vms_as(&broker)
            .delete("b-1", &DeleteParams::default())
            .await,
        "may not delete pool member b-1",
    );
    assert_eq!(vm_version(&ns, "b-1").await, before, "b-1 did not move");
    let mut created = VirtualMachine::new("b-9", Default::default());
    created.metadata.labels = Some([(POOL_LABEL.to_owned(), "b".to_owned())].into());
    denied(
        "the broker creates a member",
        vms_as(&broker)
            .create(&PostParams::default(), &created)
            .await,
        "only a member of corral-vdi:admins may add b-9 to pool b",
    );
    for (action, strategy, power) in [
        ("start", "Always", "Running"),
        ("stop", "Halted", "Stopped"),
    ] {
        let request = http::Request::put(vdi_core::stream::vm_action_path(&ns, "b-1", action))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(b"{}".to_vec())
            .unwrap();
        broker
            .request_text(request)
            .await
            .unwrap_or_else(|e| panic!("the broker's {action} of b-1: {e}"));
        assert_eq!(
            vms_as(&admin)
                .get("b-1")
                .await
                .unwrap()
                .spec
                .run_strategy
                .as_deref(),
            Some(strategy),
            "{action}"
        );
        corral_tests::wait_power(&ns, "b-1", power).await;
    }
    uninstall(&admin).await;
}

#[tokio::test]
async fn with_a_broker_a_claims_label_and_annotation_are_the_brokers_and_administrators() {
    // The broker's manifests as `corral-vdi broker install` writes them (no replica runs here),
    // their admission policy among them, which would refuse the client-side claims of this
    // binary's other tests: it runs in their series and uninstalls before it ends.
    let _serial = serial().await;
    let admin = client("admin").await;
    let alice = client("alice").await;
    let broker = as_broker().await;
    let ns = namespace("broker-members").await;
    pool_vms(&admin, &ns, "p", 2).await.unwrap();
    vdi_core::broker::install(&admin, None).await.unwrap();
    // The broker's policy stands alone: the guard its install brought is taken away here, and
    // waited for until the API server no longer enforces it (a label only the guard refuses).
    uninstall(&admin).await;
    wait_enforced(&alice, &ns, "p-2", true).await;
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let other_label = json!({ "metadata": { "labels": { "alice.example/note": "x" } } });
    eventually(
        "the guard no longer enforced",
        Duration::from_secs(10),
        || async {
            Api::<VirtualMachine>::namespaced(alice.clone(), &ns)
                .patch("p-2", &dry, &Patch::Merge(&other_label))
                .await
                .ok()
        },
    )
    .await;

    // alice's claim is her Lease alone: she may write it, not the member's label or claimed-at.
    Api::<Lease>::namespaced(alice.clone(), &ns)
        .create(&PostParams::default(), &lease_for("p-1", "alice"))
        .await
        .expect("alice claims p-1 with a Lease");
    let before = vm_version(&ns, "p-1").await;
    denied(
        "alice labels p-1 for herself",
        patch_vm(&alice, &ns, "p-1", label_patch(Some("alice"))).await,
        &format!(
            "{BROKER_DENIAL}alice may not change {ASSIGNED_TO_LABEL} of p-1: claim or release it \
             with its Lease corral-vdi-p-1"
        ),
    );
    denied(
        "alice labels p-1 for herself with its claimed-at",
        patch_vm(
            &alice,
            &ns,
            "p-1",
            claim_patch(
                Some("alice"),
                json!({ CLAIMED_AT_ANNOTATION: "2026-12-03T18:00:00Z" }),
            ),
        )
        .await,
        &format!("alice may not change {ASSIGNED_TO_LABEL} or {CLAIMED_AT_ANNOTATION} of p-1"),
    );
    assert_eq!(vm_version(&ns, "p-1").await, before, "p-1 did not move");

    // The broker labels it for her; she may not release it by hand either.
    patch_vm(
        &broker,
        &ns,
        "p-1",
        claim_patch(
            Some("alice"),
            json!({ CLAIMED_AT_ANNOTATION: "2026-12-03T18:00:00Z" }),
        ),
    )
    .await
    .expect("the broker labels p-1 for alice");
    let before = vm_version(&ns, "p-1").await;
    denied(
        "alice removes her claimed-at",
        patch_vm(
            &alice,
            &ns,
            "p-1",
            annotations_patch(json!({ CLAIMED_AT_ANNOTATION: null })),
        )
        .await,
        &format!("{BROKER_DENIAL}alice may not change {CLAIMED_AT_ANNOTATION} of p-1"),
    );
    assert_eq!(vm_version(&ns, "p-1").await, before, "p-1 did not move");
    // The policy is about the claim alone: other labels stay RBAC's (and the guard's).
    patch_vm(
        &alice,
        &ns,
        "p-2",
        Patch::Merge(json!({ "metadata": { "labels": { "alice.example/note": "x" } } })),
    )
    .await
    .expect("alice labels p-2 otherwise (no guard here)");
    patch_vm(&admin, &ns, "p-1", label_patch(None))
        .await
        .expect("an administrator removes the label");

    vdi_core::broker::uninstall(&admin).await.unwrap();
    wait_enforced(&alice, &ns, "p-2", false).await;
}

#[tokio::test]
async fn with_the_guard_the_broker_takes_a_claim_for_itself_marks_then_deletes_and_adds_clones() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let alice = client("alice").await;
    let broker = as_broker().await;
    let ns = namespace("guard-broker-pool").await;
    pool_vms(&admin, &ns, "p", 2).await.unwrap();
    install_and_wait(&admin, &ns, "p-2").await;
    let vms_as = |c: &Client| Api::<VirtualMachine>::namespaced(c.clone(), &ns);
    let leases_as = |c: &Client| Api::<Lease>::namespaced(c.clone(), &ns);

    // The broker takes alice's (stale) claim on p-1 for itself, as a shrink or a reset does;
    // alice may not take it back.
    let stale = stale_claim(&alice, &ns, "p-1").await;
    let mut taken = stale.clone();
    let spec = taken.spec.as_mut().unwrap();
    spec.holder_identity = Some(BROKER_USER.into());
    spec.renew_time = Some(micro_ago(0));
    let taken = leases_as(&broker)
        .replace(&lease_name("p-1"), &PostParams::default(), &taken)
        .await
        .expect("the broker takes p-1's claim for itself");
    let mut back = taken.clone();
    back.spec.as_mut().unwrap().holder_identity = Some("alice".into());
    denied(
        "alice takes p-1 back from the broker",
        leases_as(&alice)
            .replace(&lease_name("p-1"), &PostParams::default(), &back)
            .await,
        &format!("claim Lease corral-vdi-p-1 is held by {BROKER_USER}"),
    );

    // It deletes only a member it marked for removal.
    denied(
        "the broker deletes p-1 unmarked",
        vms_as(&broker)
            .delete("p-1", &DeleteParams::default())
            .await,
        "may not delete pool member p-1",
    );
    patch_vm(
        &broker,
        &ns,
        "p-1",
        annotations_patch(json!({ vdi_core::names::REMOVING_ANNOTATION: "shrink" })),
    )
    .await
    .expect("the broker marks p-1 for removal");
    denied(
        "alice marks p-2 for removal",
        patch_vm(
            &alice,
            &ns,
            "p-2",
            annotations_patch(json!({ vdi_core::names::REMOVING_ANNOTATION: "shrink" })),
        )
        .await,
        "may not change the labels or annotations of pool member p-2",
    );
    vms_as(&broker)
        .delete("p-1", &DeleteParams::default())
        .await
        .expect("the broker deletes the member it marked");

    // A new clone (made by KubeVirt, here by an administrator) joins its pool through the
    // broker only under the pool's member name.
    for name in ["p-3", "q-1"] {
        vms_as(&admin)
            .create(
                &PostParams::default(),
                &VirtualMachine::new(name, Default::default()),
            )
            .await
            .unwrap();
    }
    let join = |pool: &str| {
        json!({ "metadata": {
            "labels": { POOL_LABEL: pool },
            "annotations": { vdi_core::pool::GOLDEN_ANNOTATION: "golden" } } })
    };
    patch_vm(&broker, &ns, "p-3", Patch::Merge(join("p")))
        .await
        .expect("the broker adds clone p-3 to pool p");
    denied(
        "the broker adds q-1 to pool p",
        patch_vm(&broker, &ns, "q-1", Patch::Merge(join("p"))).await,
        "only a member of corral-vdi:admins may add q-1 to pool p",
    );
    denied(
        "alice adds q-1 to pool q",
        patch_vm(&alice, &ns, "q-1", Patch::Merge(join("q"))).await,
        "only a member of corral-vdi:admins may add q-1 to pool q",
    );
    // (Its resourceVersion moves meanwhile: the emulated virt-controller writes a new VM's
    // status.) It is in no pool and carries no golden mark.
    let q1 = vms_as(&admin).get("q-1").await.unwrap();
    assert!(!q1.labels().contains_key(POOL_LABEL), "{:?}", q1.metadata);
    assert!(
        !q1.annotations()
            .contains_key(vdi_core::pool::GOLDEN_ANNOTATION),
        "{:?}",
        q1.metadata
    );
}
