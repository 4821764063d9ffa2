//! With the guard, ordinary users change a pool member only through the claim flow, and a
//! golden image not at all.

use std::time::Duration;

use corral_tests::{eventually, grant_role, namespace, pool_vms};
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use vdi_core::claim::{ClaimOptions, UnassignOptions, assign, unassign};
use vdi_core::identity::Actor;
use vdi_core::names::{ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, GOLDEN_IMAGE_LABEL, POOL_LABEL};
use vdi_core::pool::{CreateOptions, CreatePool, create_pool};
use vdi_core::resources::VirtualMachine;

use crate::{client, denied, install_and_wait, serial, uninstall, vm_version};

#[tokio::test]
async fn with_the_guard_ordinary_users_change_a_pool_member_only_through_the_claim_flow() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let alice = client("alice").await;
    let bob = client("bob").await;
    let ns = namespace("guard-members").await;
    pool_vms(&admin, &ns, "m", 3).await.unwrap();
    // bob may create, replace and delete VMs here (RBAC): what stops him is the guard alone.
    grant_role(
        &ns,
        "bob",
        json!([{ "apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"],
                 "verbs": ["create", "update", "delete"] }]),
    )
    .await;
    let vms_as = |c: &Client| Api::<VirtualMachine>::namespaced(c.clone(), &ns);
    let mut other = VirtualMachine::new("not-a-member", Default::default());
    other.spec.run_strategy = Some("Halted".into());
    vms_as(&admin)
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    install_and_wait(&admin, &ns, "m-3").await;

    // alice's claim, as the product makes it: Lease, label and annotation, started through
    // KubeVirt's start subresource (virt-api changes the run strategy as its service account).
    let alice_actor = Actor::connect(alice.clone()).await.unwrap();
    let claimed = assign(&alice_actor, &ns, "m", "alice", &ClaimOptions::default())
        .await
        .expect("alice claims with the guard on");
    let hers = claimed.member.clone();
    let vm = vms_as(&admin).get(&hers).await.unwrap();
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"), "started");
    assert!(vm.annotations().contains_key(CLAIMED_AT_ANNOTATION));
    let free = ["m-1", "m-2", "m-3"]
        .into_iter()
        .find(|m| *m != hers)
        .unwrap();

    // bob, raw API calls on alice's member: every field class refused, nothing moved (once it
    // runs, the emulated controller leaves it alone).
    corral_tests::wait_power(&ns, &hers, "Running").await;
    let before = vm_version(&ns, &hers).await;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "runStrategy",
            json!({ "spec": { "runStrategy": "Halted" } }),
            "may not change the spec of pool member",
        ),
        (
            "the template (cloud-init)",
            json!({ "spec": { "template": { "spec": { "volumes": [{ "name": "cloudinit",
                "cloudInitNoCloud": { "userData": "#cloud-config\nusers: [bob]" } }] } } } }),
            "may not change the spec of pool member",
        ),
        (
            "a new spec field",
            json!({ "spec": { "dataVolumeTemplates": [{ "metadata": { "name": "bob-disk" } }] } }),
            "may not change the spec of pool member",
        ),
        (
            "an annotation",
            json!({ "metadata": { "annotations": { "bob.example/note": "mine" } } }),
            "may not change the labels or annotations of pool member",
        ),
        (
            "the claimed-at annotation",
            json!({ "metadata": { "annotations": { CLAIMED_AT_ANNOTATION: "2020-01-01T00:00:00Z" } } }),
            "may not set the claimed-at annotation",
        ),
        (
            "the claimed-at annotation's removal",
            json!({ "metadata": { "annotations": { CLAIMED_AT_ANNOTATION: null } } }),
            "may not remove the claimed-at annotation",
        ),
        (
            "another label",
            json!({ "metadata": { "labels": { "bob.example/tag": "x" } } }),
            "may not change the labels or annotations of pool member",
        ),
        (
            "a finalizer",
            json!({ "metadata": { "finalizers": ["bob.example/keep"] } }),
            "may not change the finalizers or owner references",
        ),
        (
            "an owner reference",
            json!({ "metadata": { "ownerReferences": [{ "apiVersion": "v1", "kind": "ConfigMap",
                "name": "bobs", "uid": "6a1c3a4e-0000-4000-8000-000000000001" }] } }),
            "may not change the finalizers or owner references",
        ),
    ];
    for (what, patch, needle) in &cases {
        denied(
            &format!("bob changes {what} of alice's member"),
            vms_as(&bob)
                .patch(&hers, &PatchParams::default(), &Patch::Merge(patch))
                .await,
            needle,
        );
    }
    let mut whole = vms_as(&admin).get(&hers).await.unwrap();
    whole.spec.template = Some(json!({ "spec": { "domain": { "devices": {} } } }));
    denied(
        "bob replaces alice's member's spec",
        vms_as(&bob)
            .replace(&hers, &PostParams::default(), &whole)
            .await,
        "may not change the spec of pool member",
    );
    denied(
        "bob deletes alice's member",
        vms_as(&bob).delete(&hers, &DeleteParams::default()).await,
        &format!("may not delete pool member {hers}, assigned to alice"),
    );
    assert_eq!(
        vm_version(&ns, &hers).await,
        before,
        "alice's member did not move"
    );
    // The holder herself changes only what a claim writes.
    denied(
        "alice changes her own member's spec",
        vms_as(&alice)
            .patch(&hers, &PatchParams::default(), &Patch::Merge(&cases[0].1))
            .await,
        "may not change the spec of pool member",
    );
    assert_eq!(
        vm_version(&ns, &hers).await,
        before,
        "alice's member did not move"
    );

    // Members are an administrator's: bob neither deletes a free one nor makes a VM one, and
    // the product says so before he tries (RBAC alone would let him delete the pool).
    let bobs =
        vdi_core::identity::permissions(&Actor::connect(bob.clone()).await.unwrap(), &ns, true)
            .await
            .delete_pool;
    assert!(
        !bobs.allowed
            && bobs
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("only members of corral-vdi:admins may delete pools")),
        "{bobs:?}"
    );
    let rbac_only =
        vdi_core::identity::permissions(&Actor::connect(bob.clone()).await.unwrap(), &ns, false)
            .await;
    assert!(rbac_only.delete_pool.allowed, "{rbac_only:?}");
    let free_before = vm_version(&ns, free).await;
    denied(
        "bob deletes a free member",
        vms_as(&bob).delete(free, &DeleteParams::default()).await,
        "only a member of corral-vdi:admins deletes members",
    );
    denied(
        "bob sets claimed-at on a free member without his label",
        vms_as(&bob)
            .patch(
                free,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "annotations": {
                    CLAIMED_AT_ANNOTATION: "2026-01-01T00:00:00Z" } } })),
            )
            .await,
        "may not set the claimed-at annotation",
    );
    assert_eq!(
        vm_version(&ns, free).await,
        free_before,
        "the free member did not move"
    );
    let other_before = vm_version(&ns, "not-a-member").await;
    denied(
        "bob adds another VM to the pool",
        vms_as(&bob)
            .patch(
                "not-a-member",
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "labels": { POOL_LABEL: "m" } } })),
            )
            .await,
        "only a member of corral-vdi:admins may add not-a-member to pool m",
    );
    // An empty value is a pool label too (before the guard read it as "no pool" and let it be).
    denied(
        "bob adds another VM to the pool with no name",
        vms_as(&bob)
            .patch(
                "not-a-member",
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "labels": { POOL_LABEL: "" } } })),
            )
            .await,
        "only a member of corral-vdi:admins may add not-a-member to pool ",
    );
    assert_eq!(vm_version(&ns, "not-a-member").await, other_before);
    let mut made = VirtualMachine::new("m-9", Default::default());
    made.metadata.labels = Some([(POOL_LABEL.to_owned(), "m".to_owned())].into());
    denied(
        "bob creates a member",
        vms_as(&bob).create(&PostParams::default(), &made).await,
        "only a member of corral-vdi:admins may add m-9 to pool m",
    );
    // What is not a member stays RBAC's: bob may change and delete it.
    vms_as(&bob)
        .patch(
            "not-a-member",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "runStrategy": "Always" } })),
        )
        .await
        .expect("the guard leaves other VMs alone");
    vms_as(&bob)
        .delete("not-a-member", &DeleteParams::default())
        .await
        .expect("bob deletes a VM of his own");

    // The claim flow's own writes pass for anyone on their own desktop: bob labels a free
    // member for himself with its claimed-at, and removes both again.
    let presentation = |label: Option<&str>, at: Option<&str>| {
        Patch::Merge(json!({ "metadata": {
            "labels": { ASSIGNED_TO_LABEL: label }, "annotations": { CLAIMED_AT_ANNOTATION: at } } }))
    };
    vms_as(&bob)
        .patch(
            free,
            &PatchParams::default(),
            &presentation(Some("bob"), Some("2026-01-01T00:00:00Z")),
        )
        .await
        .expect("bob's own label and claimed-at");
    // Even on his own desktop, what he writes there is a time and nothing else: not a screen
    // of escape codes, not a value longer than any cell can show.
    let own_before = vm_version(&ns, free).await;
    let huge = "2".repeat(70_000);
    for (what, value) in [
        ("escape codes", "\u{1b}]0;owned\u{7}\u{1b}[2J"),
        ("70,000 characters", huge.as_str()),
        ("a date without a time", "2026-01-01"),
    ] {
        denied(
            &format!("bob writes {what} as his claimed-at"),
            vms_as(&bob)
                .patch(
                    free,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "metadata": { "annotations": {
                        CLAIMED_AT_ANNOTATION: value } } })),
                )
                .await,
            "must be an RFC 3339 UTC time",
        );
    }
    assert_eq!(vm_version(&ns, free).await, own_before);
    vms_as(&bob)
        .patch(free, &PatchParams::default(), &presentation(None, None))
        .await
        .expect("removed by bob");

    // alice releases (stopped through KubeVirt's stop subresource); an administrator assigns
    // to carol, changes the spec and deletes a member.
    let alice_actor = Actor::connect(alice.clone()).await.unwrap();
    let released = unassign(&alice_actor, &ns, &hers, &UnassignOptions::default())
        .await
        .expect("alice releases with the guard on");
    assert!(
        released.lease_released && released.label_removed,
        "{released:?}"
    );
    assert_eq!(
        vms_as(&admin)
            .get(&hers)
            .await
            .unwrap()
            .spec
            .run_strategy
            .as_deref(),
        Some("Halted"),
        "stopped"
    );
    let admin_actor = Actor::connect(admin.clone()).await.unwrap();
    let carols = assign(&admin_actor, &ns, "m", "carol", &ClaimOptions::default())
        .await
        .expect("an administrator assigns to carol");
    vms_as(&admin)
        .patch(
            &carols.member,
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "spec": { "template": { "metadata": { "labels": { "tier": "gold" } } } } }),
            ),
        )
        .await
        .expect("an administrator changes a member's spec");
    unassign(
        &admin_actor,
        &ns,
        &carols.member,
        &UnassignOptions { force: true },
    )
    .await
    .expect("and releases it");
    vms_as(&admin)
        .delete(free, &DeleteParams::default())
        .await
        .expect("and deletes a member");
    uninstall(&admin).await;
}

#[tokio::test]
async fn with_the_guard_a_golden_image_is_an_administrators_and_pool_create_marks_it() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let bob = client("bob").await;
    let ns = namespace("guard-golden").await;
    pool_vms(&admin, &ns, "m", 1).await.unwrap();
    // bob may write VMs here (RBAC): what stops him is the guard alone.
    grant_role(
        &ns,
        "bob",
        json!([{ "apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"],
                 "verbs": ["create", "update", "patch", "delete"] }]),
    )
    .await;
    corral_tests::golden_vm(&ns, "gold", "Halted", |_| {}).await;
    install_and_wait(&admin, &ns, "m-1").await;

    // Pool create marks the golden VM it cloned; its member does not copy the mark.
    let request = CreatePool {
        namespace: ns.clone(),
        name: "gp".into(),
        golden: "gold".into(),
        size: 1,
        options: CreateOptions::default(),
    };
    let created = create_pool(&admin, &request, |_| {}).await.unwrap();
    assert_eq!(created.warnings, Vec::<String>::new());
    let vms_as = |c: &Client| Api::<VirtualMachine>::namespaced(c.clone(), &ns);
    let gold = vms_as(&admin).get("gold").await.unwrap();
    assert_eq!(
        gold.labels().get(GOLDEN_IMAGE_LABEL).map(String::as_str),
        Some("true")
    );
    let member = vms_as(&admin).get("gp-1").await.unwrap();
    assert!(!member.labels().contains_key(GOLDEN_IMAGE_LABEL));

    // install_and_wait proves the claim policies enforced, not the golden-image one (the API
    // server's policy cache follows each binding a moment later): until bob's dry run is refused.
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let note = json!({ "metadata": { "annotations": { "note": "bob" } } });
    let as_bob = vms_as(&bob);
    let what = "the golden-image policy enforced";
    eventually(what, Duration::from_secs(10), || async {
        match as_bob.patch("gold", &dry, &Patch::Merge(&note)).await {
            Err(kube::Error::Api(status)) if status.message.contains("is a golden image") => {
                Some(())
            }
            _ => None,
        }
    })
    .await;

    // bob may not change what every future member copies, nor delete it, nor unmark it.
    let before = vm_version(&ns, "gold").await;
    let cases = [
        (
            "change its cloud-init",
            json!({ "spec": { "template": { "spec": { "volumes": [] } } } }),
        ),
        (
            "start it for good",
            json!({ "spec": { "runStrategy": "Always" } }),
        ),
        (
            "add a label every clone would copy",
            json!({ "metadata": { "labels": { "team": "bob" } } }),
        ),
        (
            "add an annotation",
            json!({ "metadata": { "annotations": { "note": "bob" } } }),
        ),
        (
            "unmark it",
            json!({ "metadata": { "labels": { GOLDEN_IMAGE_LABEL: null } } }),
        ),
    ];
    for (what, patch) in cases {
        denied(
            what,
            vms_as(&bob)
                .patch("gold", &PatchParams::default(), &Patch::Merge(&patch))
                .await,
            "gold is a golden image",
        );
    }
    denied(
        "delete it",
        vms_as(&bob).delete("gold", &DeleteParams::default()).await,
        "may not delete it",
    );
    assert_eq!(vm_version(&ns, "gold").await, before, "nothing moved");

    // bob's own VM is his to change; marking one a golden image is his to do, and then it is
    // an administrator's too.
    let mut own = VirtualMachine::new("bobs", Default::default());
    own.spec.run_strategy = Some("Halted".into());
    vms_as(&bob)
        .create(&PostParams::default(), &own)
        .await
        .unwrap();
    let mark = json!({ "metadata": { "labels": { GOLDEN_IMAGE_LABEL: "true" } } });
    vms_as(&bob)
        .patch("bobs", &PatchParams::default(), &Patch::Merge(&mark))
        .await
        .expect("anyone may mark a VM as a golden image");
    denied(
        "change his VM once marked",
        vms_as(&bob)
            .patch(
                "bobs",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "runStrategy": "Always" } })),
            )
            .await,
        "bobs is a golden image",
    );

    // An administrator changes it.
    vms_as(&admin)
        .patch(
            "gold",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "tier": "gold" } } })),
        )
        .await
        .expect("an administrator changes a golden image");
    uninstall(&admin).await;
}
