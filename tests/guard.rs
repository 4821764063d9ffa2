//! The server-side guard against the sandbox's real API server: absent until installed, then
//! the API server itself refuses every raw request that would take a desktop from its holder or
//! change it behind the claim flow's back, with the policy's message, and lets the holder,
//! administrators and KubeVirt (the emulated virt-api acts as KubeVirt's service account) through.
//! This binary's sandbox starts without the guard, so that "not installed" can be seen; each
//! test installs it and leaves it uninstalled, one test at a time.

use std::time::Duration;

use corral_tests::{client_as, grant_role, namespace, pool_vms, sandbox_with};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};
use vdi_core::claim::{ClaimOptions, UnassignOptions, assign, unassign};
use vdi_core::error::ErrorKind;
use vdi_core::guard::{self, GuardState};
use vdi_core::identity::Actor;
use vdi_core::labels::{ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, POOL_LABEL, lease_name};
use vdi_core::resources::VirtualMachine;

async fn client(user: &str) -> Client {
    sandbox_with(|o| o.guard = false);
    client_as(user).await
}

/// The guard is cluster-wide: the tests of this binary install and remove it one at a time.
async fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::const_new(());
    SERIAL.lock().await
}

/// Installs the guard as `admin` and waits until the API server enforces both policies (its
/// policy cache follows the objects within a moment): until a dry run of bob's that each policy
/// refuses is refused.
async fn install_and_wait(admin: &Client, ns: &str, member: &str) {
    let status = guard::install(admin).await.unwrap();
    assert_eq!(status.state, GuardState::Installed, "{status:?}");
    let bob = client("bob").await;
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lease = Api::<Lease>::namespaced(bob.clone(), ns)
            .create(&dry, &lease_for(member, "alice"))
            .await;
        let label = Api::<VirtualMachine>::namespaced(bob.clone(), ns)
            .patch(
                member,
                &PatchParams {
                    dry_run: true,
                    ..Default::default()
                },
                &label_patch(Some("alice")),
            )
            .await;
        if matches!(&lease, Err(e) if vdi_core::error::is_guard_denial(e))
            && matches!(&label, Err(e) if vdi_core::error::is_guard_denial(e))
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the guard is not enforced 10 s after install: {lease:?} {label:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn uninstall(admin: &Client) {
    guard::uninstall(admin).await.unwrap();
    assert_eq!(
        guard::status(admin).await.unwrap().state,
        GuardState::Absent
    );
}

/// Asserts the API server refused `result` with the guard's message containing `needle`.
fn denied<T: std::fmt::Debug>(what: &str, result: kube::Result<T>, needle: &str) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{what}: {status:?}");
            assert!(
                status.message.contains(vdi_core::labels::DENIAL_PREFIX)
                    && status.message.contains(needle),
                "{what}: {}",
                status.message
            );
        }
        other => panic!("{what}: expected the guard's denial, got {other:?}"),
    }
}

fn label_patch(value: Option<&str>) -> Patch<serde_json::Value> {
    Patch::Merge(json!({ "metadata": { "labels": { ASSIGNED_TO_LABEL: value } } }))
}

fn lease_for(member: &str, holder: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": { "name": lease_name(member), "labels": { POOL_LABEL: "g", "corral.dev/vdi-member": member } },
        "spec": { "holderIdentity": holder, "leaseDurationSeconds": 3600 }
    }))
    .unwrap()
}

#[tokio::test]
async fn the_guard_is_absent_until_installed_then_the_api_server_enforces_the_claim_rules() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let alice = client("alice").await;
    let bob = client("bob").await;

    let status = guard::status(&bob).await.unwrap();
    assert_eq!(
        status.state,
        GuardState::Unknown,
        "without the guard, bob may not even read whether it is there: {status:?}"
    );
    let status = guard::status(&admin).await.unwrap();
    assert_eq!(status.state, GuardState::Absent, "{status:?}");
    assert!(
        status.summary.contains("corral-vdi guard install"),
        "{}",
        status.summary
    );
    // Only a cluster administrator may install it.
    let err = guard::install(&alice).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(
        err.to_string()
            .contains("you may not install the Corral VDI guard"),
        "{err}"
    );
    let status = guard::install(&admin).await.unwrap();
    assert_eq!(status.state, GuardState::Installed, "{status:?}");
    assert!(status.objects.iter().all(|o| o.present && o.current));
    assert_eq!(
        guard::status(&bob).await.unwrap().state,
        GuardState::Installed,
        "with it, everyone may read it"
    );

    // alice's claim, made as the product makes it.
    let ns = corral_tests::namespace("guard").await;
    corral_tests::pool_vms(&admin, &ns, "g", 3).await.unwrap();
    let alice_actor = Actor::connect(alice.clone()).await.unwrap();
    let claimed = assign(&alice_actor, &ns, "g", "alice", &ClaimOptions::default())
        .await
        .unwrap();
    let hers = claimed.member.clone();
    let free: Vec<String> = (1..=3)
        .map(|i| format!("g-{i}"))
        .filter(|m| *m != hers)
        .collect();

    let vms_as = |c: &Client| Api::<VirtualMachine>::namespaced(c.clone(), &ns);
    let leases_as = |c: &Client| Api::<Lease>::namespaced(c.clone(), &ns);
    let admin_leases = leases_as(&admin);
    let lease_before = admin_leases.get(&lease_name(&hers)).await.unwrap();
    let vm_before = vms_as(&admin).get(&hers).await.unwrap();

    // bob, raw API calls, the way kubectl makes them: every one refused by the API server.
    denied(
        "bob deletes alice's Lease",
        leases_as(&bob)
            .delete(&lease_name(&hers), &DeleteParams::default())
            .await,
        "is held by alice; only its holder or a member of corral-vdi:admins",
    );
    let mut takeover = lease_before.clone();
    takeover.spec.as_mut().unwrap().holder_identity = Some("bob".into());
    denied(
        "bob updates alice's Lease to name himself",
        leases_as(&bob)
            .replace(&lease_name(&hers), &PostParams::default(), &takeover)
            .await,
        "is held by alice",
    );
    denied(
        "bob sets the label on alice's VM to himself",
        vms_as(&bob)
            .patch(&hers, &PatchParams::default(), &label_patch(Some("bob")))
            .await,
        "is assigned to alice; only they or a member of corral-vdi:admins",
    );
    denied(
        "bob removes the label from alice's VM",
        vms_as(&bob)
            .patch(&hers, &PatchParams::default(), &label_patch(None))
            .await,
        "is assigned to alice",
    );
    denied(
        "bob labels a free member for alice",
        vms_as(&bob)
            .patch(
                &free[0],
                &PatchParams::default(),
                &label_patch(Some("alice")),
            )
            .await,
        "may set the assigned-to label of",
    );
    denied(
        "bob creates a Lease naming alice",
        leases_as(&bob)
            .create(&PostParams::default(), &lease_for(&free[0], "alice"))
            .await,
        "bob may not create claim Lease",
    );
    denied(
        "bob moves alice's VM out of its pool",
        vms_as(&bob)
            .patch(
                &hers,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "labels": { POOL_LABEL: null } } })),
            )
            .await,
        "only a member of corral-vdi:admins may move it out of its pool",
    );
    assert_eq!(
        admin_leases
            .get(&lease_name(&hers))
            .await
            .unwrap()
            .metadata
            .resource_version,
        lease_before.metadata.resource_version,
        "alice's Lease did not move"
    );
    assert_eq!(
        vms_as(&admin).get(&hers).await.unwrap().metadata.labels,
        vm_before.metadata.labels,
        "alice's labels did not move"
    );

    // alice on her own claim: renew, relabel, release.
    let mut renewed = admin_leases.get(&lease_name(&hers)).await.unwrap();
    renewed.spec.as_mut().unwrap().lease_duration_seconds = Some(7200);
    leases_as(&alice)
        .replace(&lease_name(&hers), &PostParams::default(), &renewed)
        .await
        .expect("the holder renews her Lease");
    vms_as(&alice)
        .patch(&hers, &PatchParams::default(), &label_patch(None))
        .await
        .expect("the holder removes her label");
    vms_as(&alice)
        .patch(&hers, &PatchParams::default(), &label_patch(Some("alice")))
        .await
        .expect("and sets it to herself");
    // An administrator may do what bob may not.
    admin_leases
        .create(&PostParams::default(), &lease_for(&free[0], "carol"))
        .await
        .expect("an administrator assigns to someone else");
    vms_as(&admin)
        .patch(
            &free[0],
            &PatchParams::default(),
            &label_patch(Some("carol")),
        )
        .await
        .expect("and labels for them");
    admin_leases
        .delete(&lease_name(&hers), &DeleteParams::default())
        .await
        .expect("an administrator releases anyone's Lease");
    // A Lease without a holder is nobody's.
    leases_as(&bob)
        .create(&PostParams::default(), &lease_for(&free[1], "bob"))
        .await
        .expect("bob claims for himself");
    leases_as(&bob)
        .delete(&lease_name(&free[1]), &DeleteParams::default())
        .await
        .expect("and releases his own");

    // Uninstall: back to absent, and bob's raw delete goes through again (RBAC alone).
    let removed = guard::uninstall(&admin).await.unwrap();
    assert!(removed.len() >= 4, "{removed:?}");
    assert_eq!(
        guard::status(&admin).await.unwrap().state,
        GuardState::Absent
    );
    assert!(guard::uninstall(&admin).await.unwrap().is_empty());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        // The API server drops a deleted policy from its cache within a moment.
        match leases_as(&bob)
            .delete(&lease_name(&free[0]), &DeleteParams::default())
            .await
        {
            Ok(_) => break,
            Err(e)
                if vdi_core::error::is_guard_denial(&e)
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("without the guard RBAC alone decides: {e}"),
        }
    }
}

/// The resourceVersion of VM `name` in `ns`, read as admin.
async fn vm_version(ns: &str, name: &str) -> Option<String> {
    Api::<VirtualMachine>::namespaced(client("admin").await, ns)
        .get(name)
        .await
        .unwrap()
        .metadata
        .resource_version
}

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
async fn with_the_guard_a_claim_lease_has_a_bounded_duration_and_times_jiff_can_read() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let bob = client("bob").await;
    let ns = namespace("guard-leases").await;
    pool_vms(&admin, &ns, "l", 3).await.unwrap();
    install_and_wait(&admin, &ns, "l-3").await;
    let leases_as = |c: &Client| Api::<Lease>::namespaced(c.clone(), &ns);
    let create = |member: &str, spec: Value| {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": { "name": lease_name(member), "labels": { POOL_LABEL: "l", "corral.dev/vdi-member": member } },
            "spec": spec,
        }))
        .unwrap();
        let bob = bob.clone();
        let ns = ns.clone();
        async move {
            Api::<Lease>::namespaced(bob, &ns)
                .create(&PostParams::default(), &lease)
                .await
        }
    };
    denied(
        "bob creates a Lease for 10^9 s",
        create(
            "l-1",
            json!({ "holderIdentity": "bob", "leaseDurationSeconds": 1_000_000_000 }),
        )
        .await,
        "needs a leaseDurationSeconds of 1 to 604800 (7 days), not 1000000000",
    );
    denied(
        "bob creates a Lease without a duration",
        create("l-1", json!({ "holderIdentity": "bob" })).await,
        "not none",
    );
    denied(
        "bob creates a Lease renewed at the end of the calendar",
        create(
            "l-1",
            json!({ "holderIdentity": "bob", "leaseDurationSeconds": 3600,
                    "renewTime": "9999-12-30T22:00:00.000000Z" }),
        )
        .await,
        "renewTime 9999-12-30T22:00:00.000000Z is not a micro-time",
    );
    assert!(
        leases_as(&admin)
            .get_opt(&lease_name("l-1"))
            .await
            .unwrap()
            .is_none(),
        "no Lease was created"
    );

    let now = jiff::Timestamp::now();
    // As the product writes them (k8s-openapi's MicroTime: six fractional digits, UTC).
    let micro = |t: jiff::Timestamp| serde_json::to_value(MicroTime(t)).unwrap();
    create(
        "l-1",
        json!({ "holderIdentity": "bob", "leaseDurationSeconds": 3600,
                "acquireTime": micro(now), "renewTime": micro(now) }),
    )
    .await
    .expect("bob claims for an hour");
    let before = leases_as(&admin)
        .get(&lease_name("l-1"))
        .await
        .unwrap()
        .metadata
        .resource_version;
    // An update of bob's Lease as `who` makes it, with `changes` merged into its spec (RBAC
    // gives desktop users update on Leases, not patch).
    let replace_as = |who: &Client, changes: Value| {
        let leases = leases_as(who);
        let admin = leases_as(&admin);
        async move {
            let mut lease =
                serde_json::to_value(admin.get(&lease_name("l-1")).await.unwrap()).unwrap();
            for (field, value) in changes.as_object().unwrap() {
                lease["spec"][field] = value.clone();
            }
            let lease: Lease = serde_json::from_value(lease).unwrap();
            leases
                .replace(&lease_name("l-1"), &PostParams::default(), &lease)
                .await
        }
    };
    for (what, spec, needle) in [
        (
            "renews to the end of the calendar",
            json!({ "renewTime": "9999-12-30T22:00:00.000000Z" }),
            "renewTime 9999-12-30T22:00:00.000000Z is not a micro-time YYYY-MM-DDTHH:MM:SS.ffffffZ before the year 9000",
        ),
        (
            "moves the acquire time past the year 9000",
            json!({ "acquireTime": "9000-01-01T00:00:00.000000Z" }),
            "acquireTime 9000-01-01T00:00:00.000000Z is not a micro-time",
        ),
        (
            "holds for 10^9 s",
            json!({ "leaseDurationSeconds": 1_000_000_000 }),
            "not 1000000000",
        ),
        (
            "holds for a second more than 7 days",
            json!({ "leaseDurationSeconds": 604_801 }),
            "not 604801",
        ),
        (
            "drops the duration",
            json!({ "leaseDurationSeconds": null }),
            "not none",
        ),
    ] {
        denied(&format!("bob {what}"), replace_as(&bob, spec).await, needle);
    }
    assert_eq!(
        leases_as(&admin)
            .get(&lease_name("l-1"))
            .await
            .unwrap()
            .metadata
            .resource_version,
        before,
        "bob's Lease did not move"
    );
    // The holder's normal renewal, up to the product's maximum, passes; an administrator is
    // not bound (and recovers what such a Lease holds).
    replace_as(
        &bob,
        json!({ "renewTime": micro(jiff::Timestamp::now()), "leaseDurationSeconds": 604_800 }),
    )
    .await
    .expect("bob renews his Lease");
    leases_as(&admin)
        .patch(
            &lease_name("l-1"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "leaseDurationSeconds": 1_000_000_000 } })),
        )
        .await
        .expect("an administrator is not bound");
    leases_as(&admin)
        .delete(&lease_name("l-1"), &DeleteParams::default())
        .await
        .unwrap();
    uninstall(&admin).await;
}

/// The guard's policies or bindings (`kind`) as `admin` sees them, untyped.
fn guard_objects(admin: &Client, kind: &str) -> Api<DynamicObject> {
    let plural = format!("{}s", kind.to_lowercase()).replace("policys", "policies");
    Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            &plural,
        ),
    )
}

#[tokio::test]
async fn guard_status_names_what_was_changed_on_the_cluster_and_install_restores_it() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let bob = client("bob").await;
    assert_eq!(
        guard::install(&admin).await.unwrap().state,
        GuardState::Installed
    );
    let bindings = guard_objects(&admin, "ValidatingAdmissionPolicyBinding");
    let policies = guard_objects(&admin, "ValidatingAdmissionPolicy");

    // A binding set to warn only: not installed as shipped, for everyone who reads it.
    bindings
        .patch(
            guard::LEASE_POLICY,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "validationActions": ["Warn"] } })),
        )
        .await
        .unwrap();
    for who in [&admin, &bob] {
        let status = guard::status(who).await.unwrap();
        assert_eq!(status.state, GuardState::Outdated, "{status:?}");
        assert!(
            status.summary.contains(
                "binding corral-vdi-claim-leases: validationActions is [Warn], this version ships [Deny]"
            ) && status.summary.contains("was changed on the cluster"),
            "{}",
            status.summary
        );
        let binding = status
            .objects
            .iter()
            .find(|o| o.kind == "ValidatingAdmissionPolicyBinding" && o.name == guard::LEASE_POLICY)
            .unwrap();
        assert!(binding.present && !binding.current, "{binding:?}");
    }
    // The CLI says so in its exit status too, for scripts that watch the guard.
    let cli = std::process::Command::new(corral_tests::cli_binary())
        .env("KUBECONFIG", &corral_tests::sandbox().kubeconfig)
        .args(["--context", "admin", "guard", "status"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&cli.stdout);
    assert_eq!(cli.status.code(), Some(1), "{said}");
    assert!(said.contains("validationActions is [Warn]"), "{said}");

    // A policy's expression edited by hand, and the other binding narrowed to some namespaces.
    let mut policy = policies.get(guard::MEMBER_POLICY).await.unwrap();
    policy.data["spec"]["validations"][2]["expression"] = json!("true");
    policies
        .replace(guard::MEMBER_POLICY, &PostParams::default(), &policy)
        .await
        .unwrap();
    bindings
        .patch(
            guard::MEMBER_POLICY,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "matchResources": {
                "namespaceSelector": { "matchLabels": { "guarded": "yes" } } } } })),
        )
        .await
        .unwrap();
    let status = guard::status(&admin).await.unwrap();
    assert_eq!(status.state, GuardState::Outdated, "{status:?}");
    for difference in [
        "binding corral-vdi-claim-leases: validationActions is [Warn], this version ships [Deny]",
        "policy corral-vdi-pool-members: validations[2].expression differs from this version's",
        "binding corral-vdi-pool-members: matchResources is set, this version ships none",
    ] {
        assert!(
            status.summary.contains(difference),
            "{difference}: {}",
            status.summary
        );
    }
    assert_eq!(
        status.objects.iter().filter(|o| !o.current).count(),
        3,
        "{status:?}"
    );

    // Install restores every one of them, the hand-added selector included.
    let status = guard::install(&admin).await.unwrap();
    assert_eq!(status.state, GuardState::Installed, "{status:?}");
    assert!(
        status.objects.iter().all(|o| o.present && o.current),
        "{status:?}"
    );
    let binding = bindings.get(guard::MEMBER_POLICY).await.unwrap();
    assert!(
        binding.data["spec"].get("matchResources").is_none_or(|m| {
            m.get("namespaceSelector")
                .is_none_or(|s| s.as_object().is_some_and(|s| s.is_empty()))
        }),
        "{:?}",
        binding.data
    );
    uninstall(&admin).await;
}
