//! With the guard, a claim Lease has a bounded duration and times jiff can read; a held one
//! carries both times, ordinary users add no finalizers or owner references to one, and a Lease
//! labelled for a member or a pool is that member's claim by name.

use corral_tests::{namespace, pool_vms};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use vdi_core::names::{ASSIGNED_BY_ANNOTATION, MEMBER_LABEL, POOL_LABEL, lease_name};

use crate::{client, denied, install_and_wait, serial, uninstall};

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

#[tokio::test]
async fn with_the_guard_a_held_claim_has_both_times_no_users_finalizer_and_its_members_name() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let bob = client("bob").await;
    let ns = namespace("guard-keepers").await;
    pool_vms(&admin, &ns, "k", 3).await.unwrap();
    install_and_wait(&admin, &ns, "k-3").await;
    let leases_as = |c: &Client| Api::<Lease>::namespaced(c.clone(), &ns);
    let now = serde_json::to_value(MicroTime(jiff::Timestamp::now())).unwrap();
    // A Lease `name` labelled `labels`, with `spec` and `finalizers`, as bob writes it.
    let bobs = |name: &str, labels: Value, spec: Value, finalizers: Value| -> Lease {
        serde_json::from_value(json!({
            "metadata": { "name": name, "labels": labels, "finalizers": finalizers },
            "spec": spec,
        }))
        .unwrap()
    };
    let claim_labels = |member: &str| json!({ POOL_LABEL: "k", "corral.dev/vdi-member": member });
    let absent = async |name: &str| leases_as(&admin).get_opt(name).await.unwrap().is_none();

    // H2 of the hostile pass: a 1-second claim with no renewTime read as never expiring.
    for (what, spec, needle) in [
        (
            "without times",
            json!({ "holderIdentity": "bob", "leaseDurationSeconds": 1 }),
            "claim Lease corral-vdi-k-1 names holder bob but has no acquireTime and renewTime",
        ),
        (
            "without renewTime",
            json!({ "holderIdentity": "bob", "leaseDurationSeconds": 1, "acquireTime": now }),
            "names holder bob but has no renewTime: a held claim carries acquireTime and renewTime",
        ),
        (
            "without acquireTime",
            json!({ "holderIdentity": "bob", "leaseDurationSeconds": 1, "renewTime": now }),
            "names holder bob but has no acquireTime:",
        ),
        (
            // The API server stores the zero time as no time at all.
            "renewed at the zero time",
            json!({ "holderIdentity": "bob", "leaseDurationSeconds": 1, "acquireTime": now,
                    "renewTime": "0001-01-01T00:00:00.000000Z" }),
            "names holder bob but has no renewTime",
        ),
    ] {
        denied(
            &format!("bob creates a held claim {what}"),
            leases_as(&bob)
                .create(
                    &PostParams::default(),
                    &bobs(&lease_name("k-1"), claim_labels("k-1"), spec, json!([])),
                )
                .await,
            needle,
        );
    }
    assert!(absent(&lease_name("k-1")).await, "no Lease was created");
    let held = json!({ "holderIdentity": "bob", "leaseDurationSeconds": 3600,
                       "acquireTime": now, "renewTime": now });
    leases_as(&bob)
        .create(
            &PostParams::default(),
            &bobs(
                &lease_name("k-1"),
                claim_labels("k-1"),
                held.clone(),
                json!([]),
            ),
        )
        .await
        .expect("bob claims k-1 with both times");
    let current = async || leases_as(&admin).get(&lease_name("k-1")).await.unwrap();
    let version = async || current().await.metadata.resource_version;
    let before = version().await;
    let mut dropped = current().await;
    dropped.spec.as_mut().unwrap().renew_time = None;
    denied(
        "bob drops his claim's renewTime",
        leases_as(&bob)
            .replace(&lease_name("k-1"), &PostParams::default(), &dropped)
            .await,
        "names holder bob but has no renewTime",
    );

    // M3: a finalizer on his own claim kept it Terminating after the broker's reclaim.
    denied(
        "bob creates his claim with a finalizer",
        leases_as(&bob)
            .create(
                &PostParams::default(),
                &bobs(
                    &lease_name("k-2"),
                    claim_labels("k-2"),
                    held.clone(),
                    json!(["hostile.example/keep"]),
                ),
            )
            .await,
        "bob may not add finalizer hostile.example/keep to claim Lease corral-vdi-k-2: it would \
         keep the claim, and its member, from being released or reclaimed",
    );
    assert!(absent(&lease_name("k-2")).await, "no Lease was created");
    let mut kept = current().await;
    kept.metadata.finalizers = Some(vec!["hostile.example/keep".into()]);
    denied(
        "bob adds a finalizer to his claim",
        leases_as(&bob)
            .replace(&lease_name("k-1"), &PostParams::default(), &kept)
            .await,
        "bob may not add finalizer hostile.example/keep to claim Lease corral-vdi-k-1",
    );
    let mut owned = current().await;
    owned.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": "anchor",
        "uid": "00000000-0000-0000-0000-000000000001" }))
        .unwrap(),
    ]);
    denied(
        "bob adds an owner reference to his claim",
        leases_as(&bob)
            .replace(&lease_name("k-1"), &PostParams::default(), &owned)
            .await,
        "bob may not add owner reference to ConfigMap anchor to claim Lease corral-vdi-k-1",
    );
    assert_eq!(version().await, before, "bob's Lease did not move");

    // An administrator may; the holder's renewal keeps it (adds nothing) and passes.
    leases_as(&admin)
        .patch(
            &lease_name("k-1"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": ["corral.dev/kept-by-admin"] } })),
        )
        .await
        .expect("an administrator adds a finalizer");
    let mut renewed = current().await;
    renewed.spec.as_mut().unwrap().renew_time = Some(MicroTime(jiff::Timestamp::now()));
    leases_as(&bob)
        .replace(&lease_name("k-1"), &PostParams::default(), &renewed)
        .await
        .expect("bob renews his claim, the administrator's finalizer kept");

    // L10: Leases labelled for a pool's members under other names were strays in pool list.
    for (what, name, labels, needle) in [
        (
            "a stray labelled for k-1",
            "spam-1",
            claim_labels("k-1"),
            "Lease spam-1 is labelled for member k-1: a Lease labelled corral.dev/vdi-pool or \
             corral.dev/vdi-member is a claim, named corral-vdi-<member> after its \
             corral.dev/vdi-member label; name it corral-vdi-k-1",
        ),
        (
            "a stray labelled with the pool alone",
            "spam-2",
            json!({ POOL_LABEL: "k" }),
            "Lease spam-2 is labelled with a pool but for no member",
        ),
        (
            "k-3's claim labelled for k-2",
            &lease_name("k-3"),
            claim_labels("k-2"),
            "is labelled for member k-2",
        ),
        (
            "a stray with an empty member label",
            "spam-3",
            json!({ POOL_LABEL: "k", MEMBER_LABEL: "" }),
            "Lease spam-3 is labelled for member \"\" (an empty member label): a Lease labelled \
             corral.dev/vdi-pool or corral.dev/vdi-member is a claim, named corral-vdi-<member> \
             after its corral.dev/vdi-member label; label it with its member or drop the labels",
        ),
    ] {
        denied(
            &format!("bob creates {what}"),
            leases_as(&bob)
                .create(
                    &PostParams::default(),
                    &bobs(name, labels, json!({}), json!([])),
                )
                .await,
            needle,
        );
        assert!(absent(name).await, "{what}: no Lease was created");
    }

    leases_as(&admin)
        .patch(
            &lease_name("k-1"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await
        .unwrap();
    leases_as(&admin)
        .delete(&lease_name("k-1"), &DeleteParams::default())
        .await
        .unwrap();
    uninstall(&admin).await;
}

/// Item 8 of issue 37: a claim's record of who assigned it (corral.dev/vdi-assigned-by), from
/// which the broker's Events name an administrator, is written only by that writer and kept
/// only while the holder stays.
#[tokio::test]
async fn with_the_guard_a_claim_names_who_assigned_it_only_as_its_writer() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let alice = client("alice").await;
    let bob = client("bob").await;
    let ns = namespace("guard-assigner").await;
    pool_vms(&admin, &ns, "g", 3).await.unwrap();
    install_and_wait(&admin, &ns, "g-3").await;
    let leases_as = |c: &Client| Api::<Lease>::namespaced(c.clone(), &ns);
    let name = lease_name("g-1");
    let assigned = |holder: &str, by: &str| {
        let mut lease = crate::lease_for("g-1", holder);
        lease.metadata.annotations =
            Some([(ASSIGNED_BY_ANNOTATION.to_owned(), by.to_owned())].into());
        lease
    };
    let absent = async || leases_as(&admin).get_opt(&name).await.unwrap().is_none();

    denied(
        "bob claims g-1 saying the administrator assigned it",
        leases_as(&bob)
            .create(&PostParams::default(), &assigned("bob", "admin"))
            .await,
        "claim Lease corral-vdi-g-1 may not say it was assigned by admin: \
         corral.dev/vdi-assigned-by names who writes the claim (bob)",
    );
    denied(
        "the administrator assigns g-1 to alice in bob's name",
        leases_as(&admin)
            .create(&PostParams::default(), &assigned("alice", "bob"))
            .await,
        "may not say it was assigned by bob",
    );
    assert!(absent().await, "no Lease was created");

    leases_as(&admin)
        .create(&PostParams::default(), &assigned("alice", "admin"))
        .await
        .expect("the administrator assigns g-1 to alice in their own name");
    let current = async || leases_as(&admin).get(&name).await.unwrap();
    let mut renewed = current().await;
    renewed.spec.as_mut().unwrap().renew_time = Some(MicroTime(jiff::Timestamp::now()));
    leases_as(&alice)
        .replace(&name, &PostParams::default(), &renewed)
        .await
        .expect("alice renews, the record kept");
    let before = current().await.metadata.resource_version;
    let mut rewritten = current().await;
    rewritten
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ASSIGNED_BY_ANNOTATION.to_owned(), "carol".into());
    denied(
        "alice says carol assigned it",
        leases_as(&alice)
            .replace(&name, &PostParams::default(), &rewritten)
            .await,
        "may not say it was assigned by carol",
    );
    assert_eq!(
        current().await.metadata.resource_version,
        before,
        "the Lease did not move"
    );
    // A new holder cannot inherit the record: the administrator leaves g-1 without a holder
    // (the record stays theirs), and bob's takeover may not keep it.
    let mut idle = current().await;
    idle.spec.as_mut().unwrap().holder_identity = None;
    leases_as(&admin)
        .replace(&name, &PostParams::default(), &idle)
        .await
        .expect("the administrator empties the holder");
    let now = Some(MicroTime(jiff::Timestamp::now()));
    let mut taken = current().await;
    let spec = taken.spec.as_mut().unwrap();
    (spec.holder_identity, spec.acquire_time, spec.renew_time) =
        (Some("bob".into()), now.clone(), now);
    let idle_version = current().await.metadata.resource_version;
    denied(
        "bob takes g-1 over keeping the administrator's record",
        leases_as(&bob)
            .replace(&name, &PostParams::default(), &taken)
            .await,
        "may not say it was assigned by admin: corral.dev/vdi-assigned-by names who writes the \
         claim (bob)",
    );
    assert_eq!(
        current().await.metadata.resource_version,
        idle_version,
        "the Lease did not move"
    );
    taken.metadata.annotations = None;
    leases_as(&bob)
        .replace(&name, &PostParams::default(), &taken)
        .await
        .expect("bob takes g-1 over as his own claim");
    leases_as(&admin)
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    uninstall(&admin).await;
}
