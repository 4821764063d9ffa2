//! Claims that nothing a claimant writes can stretch or steal (issue 35), against the sandbox's
//! real API server, guard and broker, tried as bob and alice would with raw API writes:
//! - times a holder writes on their own Lease (an acquireTime in the year 8999, a week's
//!   leaseDurationSeconds, a Keep in the future) do not stretch a managed pool's claim, and the
//!   guard refuses a rewritten acquireTime outright (nothing moved);
//! - the next holder gets no grant and no stream while the last holder's VMI still shuts down
//!   (the emulator honours `terminationGracePeriodSeconds`), and gets the desktop after;
//! - a broker on a cluster without the guard grants nobody, bob's edit of alice's Lease
//!   included, and says why on its Lease (what `broker status` reads);
//! - nobody but the broker writes its leader Lease, and a ClusterRoleBinding that gives a user
//!   Lease writes everywhere is named;
//! - who may claim in a namespace is the claimant Role's binding there (`broker allow`);
//! - the broker acts only in the namespaces that hold desktops (its RoleBinding there), and
//!   there writes only its own objects (its policy), as its own ServiceAccount finds.

use std::time::Duration;

use corral_tests::{
    client_as, desktop_member, eventually, golden_vm, managed_pool_in, namespace, pool_members,
    vmis, vms, wait_power,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;
use vdi_core::broker::claimants::{self, CLAIMANT_ROLE, Claimant};
use vdi_core::error::ErrorKind;
use vdi_core::names::{
    BROKER_NAME, BROKER_NAMESPACE, BROKER_REASON_ANNOTATION, CLAIMED_AT_ANNOTATION,
    KEPT_AT_ANNOTATION, MEMBER_LABEL, POOL_LABEL, lease_name,
};
use vdi_core::policy::DesktopPoolSpec;
use vdi_core::stream::Subresource;

use crate::{
    CONVERGE, claim, grant, replicas_mine, replicas_steady, stream_code, wait_event, wait_granted,
    wait_no_grant,
};

/// The grace period the last holder's VMI is given in [`the_next_holder_waits_for_the_last_session`].
const GRACE_SECONDS: u64 = 20;

const VNC: Subresource = Subresource::Vnc {
    preserve_session: false,
};

/// The uid of `member`'s VMI in `ns`, if one exists.
async fn vmi_uid(admin: &Client, ns: &str, member: &str) -> Option<String> {
    vmis(admin, ns).get_opt(member).await.unwrap()?.uid()
}

/// The claim Lease of `member` as `user` reads it.
async fn lease_of(user: &str, ns: &str, member: &str) -> Lease {
    Api::<Lease>::namespaced(client_as(user).await, ns)
        .get(&lease_name(member))
        .await
        .unwrap()
}

/// A fresh namespace with a stopped golden VM and the managed pool `pool` of `spec`.
async fn managed(prefix: &str, pool: &str, spec: DesktopPoolSpec) -> String {
    let ns = namespace(prefix).await;
    golden_vm(&ns, "golden", "Halted", |_| {}).await;
    let spec = DesktopPoolSpec {
        golden: "golden".into(),
        size: 1,
        ..spec
    };
    managed_pool_in(&ns, pool, spec, Duration::from_secs(60)).await;
    ns
}

/// The `why` of the broker's `Reclaimed` Event on `member` naming `user`, and how long after
/// `since` it came.
async fn reclaimed(ns: &str, member: &str, user: &str, since: jiff::Timestamp) -> (String, i64) {
    let event = wait_event(ns, member, "Reclaimed", user, Duration::from_secs(150)).await;
    let note = event.note.unwrap_or_default();
    let why = vdi_core::audit::parse_note(&note)
        .0
        .and_then(|f| f.why)
        .unwrap_or_default();
    let at = event.event_time.expect("an eventTime").0;
    (why, at.duration_since(since).as_secs())
}

#[tokio::test]
async fn a_holder_cannot_stretch_max_session_with_the_times_on_her_lease() {
    let _steady = replicas_steady().await;
    let spec = DesktopPoolSpec {
        max_session: Some("20s".into()),
        ..Default::default()
    };
    let ns = managed("hoard", "hd", spec).await;
    let member = claim("alice", &ns, "hd").await.member;
    let claimed = jiff::Timestamp::now();
    wait_granted(&ns, &member, "alice", CONVERGE).await;
    let alice = Api::<Lease>::namespaced(client_as("alice").await, &ns);

    // Her own Lease, her start moved to the year 8999: the guard refuses, nothing moved.
    let before = lease_of("alice", &ns, &member).await;
    let mut stretched = before.clone();
    stretched.spec.as_mut().unwrap().acquire_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            "8999-01-01T00:00:00Z".parse().unwrap(),
        ));
    let refused = alice
        .replace(&lease_name(&member), &PostParams::default(), &stretched)
        .await
        .expect_err("the guard lets alice move her claim's start");
    assert!(
        refused
            .to_string()
            .contains("may not change the acquireTime"),
        "{refused}"
    );
    let now = lease_of("alice", &ns, &member).await;
    assert_eq!(
        now.resource_version(),
        before.resource_version(),
        "nothing moved"
    );

    // What the guard lets a holder write: a week's duration and a Keep next year. Neither
    // stretches the claim: maxSession ends it 20 s after it began.
    let mut written = now.clone();
    written.spec.as_mut().unwrap().lease_duration_seconds = Some(604_800);
    written
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(KEPT_AT_ANNOTATION.into(), "8999-01-01T00:00:00Z".into());
    alice
        .replace(&lease_name(&member), &PostParams::default(), &written)
        .await
        .expect("alice renews her own Lease with a longer duration");
    let (why, after) = reclaimed(&ns, &member, "alice", claimed).await;
    assert_eq!(why, "maxSession");
    // Its 20 s, with room for a loaded machine: what is asserted is that nothing the holder
    // wrote (a start in 8999, a week's Lease) stretched it.
    assert!(
        after <= 60,
        "reclaimed {after} s after the claim, not near its 20 s"
    );
}

#[tokio::test]
async fn a_claim_created_with_a_start_in_the_future_counts_from_when_the_broker_saw_it() {
    let _steady = replicas_steady().await;
    let spec = DesktopPoolSpec {
        max_session: Some("20s".into()),
        ..Default::default()
    };
    let ns = managed("future", "fu", spec).await;
    let member = pool_members(&ns, "fu").await.into_keys().next().unwrap();
    // bob writes his claim Lease by hand, starting in the year 8999 (the guard checks only the
    // format and the year of a new claim's times).
    let created = jiff::Timestamp::now();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": { "name": lease_name(&member), "namespace": ns,
                      "labels": { "corral.dev/vdi-pool": "fu", "corral.dev/vdi-member": member } },
        "spec": { "holderIdentity": "bob", "acquireTime": "8999-01-01T00:00:00.000000Z",
                  "renewTime": created.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(),
                  "leaseDurationSeconds": 3600 },
    }))
    .unwrap();
    Api::<Lease>::namespaced(client_as("bob").await, &ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    wait_granted(&ns, &member, "bob", CONVERGE).await;
    let granted = jiff::Timestamp::now();
    let vm = vms(&client_as("admin").await, &ns)
        .get(&member)
        .await
        .unwrap();
    let recorded: jiff::Timestamp = vm.annotations()[CLAIMED_AT_ANNOTATION].parse().unwrap();
    // The broker saw the claim after bob wrote it and before it granted it (a second's room
    // for the clocks' resolution).
    let second = jiff::SignedDuration::from_secs(1);
    assert!(
        created - second <= recorded && recorded <= granted + second,
        "claimed-at {recorded}: the broker's clock when it saw the claim (between {created} and \
         {granted}), not bob's 8999"
    );
    let (why, after) = reclaimed(&ns, &member, "bob", created).await;
    assert_eq!(why, "maxSession");
    // Its 20 s, with room for a loaded machine: what is asserted is that nothing the holder
    // wrote (a start in 8999, a week's Lease) stretched it.
    assert!(
        after <= 60,
        "reclaimed {after} s after the claim, not near its 20 s"
    );
}

#[tokio::test]
async fn a_lease_longer_than_disconnect_grace_counts_as_disconnect_grace() {
    let _steady = replicas_steady().await;
    let spec = DesktopPoolSpec {
        disconnect_grace: Some("10s".into()),
        ..Default::default()
    };
    let ns = managed("grace", "gr", spec).await;
    let member = claim("alice", &ns, "gr").await.member;
    wait_granted(&ns, &member, "alice", CONVERGE).await;
    let renewed = jiff::Timestamp::now();
    vdi_core::claim::renew::renew(&corral_tests::actor_as("alice").await, &ns, &member)
        .await
        .unwrap();
    let mut week = lease_of("alice", &ns, &member).await;
    week.spec.as_mut().unwrap().lease_duration_seconds = Some(604_800);
    Api::<Lease>::namespaced(client_as("alice").await, &ns)
        .replace(&lease_name(&member), &PostParams::default(), &week)
        .await
        .expect("alice writes a week's duration on her own Lease");
    // 10 s of disconnectGrace and the broker's 30 s margin, not a week.
    let (why, after) = reclaimed(&ns, &member, "alice", renewed).await;
    assert_eq!(why, "disconnected");
    // 10 s and the 30 s margin, with room for a loaded machine; a week's Lease would be a week.
    assert!(after <= 120, "reclaimed {after} s after the last renewal");
}

#[tokio::test]
async fn the_next_holder_waits_for_the_last_session() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("lastsession").await;
    desktop_member(&ns, "ls", "ls-1", true).await;
    // The desktop's guest takes its whole grace period to shut down (the emulator's guest
    // ignores KubeVirt's ACPI request, as a busy one would).
    vms(&admin, &ns)
        .patch(
            "ls-1",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "template": { "spec": {
                "terminationGracePeriodSeconds": GRACE_SECONDS } } } })),
        )
        .await
        .unwrap();
    claim("alice", &ns, "ls").await;
    wait_granted(&ns, "ls-1", "alice", CONVERGE).await;
    wait_power(&ns, "ls-1", "Running").await;
    let alices = vmi_uid(&admin, &ns, "ls-1").await.expect("alice's VMI");

    corral_tests::release_as("alice", &ns, "ls-1").await;
    let released = Instant::now();
    // The broker's teardown: alice's label gone (her VMI still shuts down), the member free.
    eventually("alice's label gone from ls-1", CONVERGE, || async {
        let vm = vms(&admin, &ns).get("ls-1").await.ok()?;
        (!vm.labels().contains_key(vdi_core::names::ASSIGNED_TO_LABEL)).then_some(())
    })
    .await;
    assert_eq!(
        vmi_uid(&admin, &ns, "ls-1").await.as_deref(),
        Some(alices.as_str()),
        "alice's VMI ended at once: the grace period was not honoured"
    );
    let bobs_claim = tokio::spawn({
        let ns = ns.clone();
        async move { claim("bob", &ns, "ls").await }
    });
    // While alice's VMI shuts down: no grant for bob, no stream, and the reason says why.
    let mut waited = Duration::ZERO;
    let (mut reason, mut saw_reason) = (None, false);
    while vmi_uid(&admin, &ns, "ls-1").await.as_deref() == Some(alices.as_str()) {
        // Alice's VMI was there this long after the release at least.
        waited = released.elapsed();
        let (_, binding) = grant(&ns, "ls-1").await;
        assert!(
            binding.is_none(),
            "bob bound {:?} after the release while alice's VMI still runs",
            released.elapsed()
        );
        assert_eq!(stream_code("bob", &ns, "ls-1", VNC).await, 403);
        let vm = vms(&admin, &ns).get("ls-1").await.unwrap();
        reason = vm.annotations().get(BROKER_REASON_ANNOTATION).cloned();
        saw_reason |= reason
            .as_deref()
            .is_some_and(|r| r.contains("waiting for the last session on ls-1 to end"));
        assert!(
            waited < Duration::from_secs(GRACE_SECONDS + 60),
            "alice's VMI never ended"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        saw_reason,
        "the broker never said it waits for alice's session; its reason last: {reason:?}"
    );
    assert!(
        waited >= Duration::from_secs(GRACE_SECONDS - 8),
        "alice's VMI ended {waited:?} after the release: the grace period was not honoured"
    );
    // Then bob gets the desktop, on a VMI of his own.
    bobs_claim.await.unwrap();
    wait_granted(&ns, "ls-1", "bob", CONVERGE).await;
    wait_power(&ns, "ls-1", "Running").await;
    assert_ne!(
        vmi_uid(&admin, &ns, "ls-1").await.as_deref(),
        Some(alices.as_str())
    );
    eventually("bob's console on ls-1", CONVERGE, || async {
        (stream_code("bob", &ns, "ls-1", VNC).await == 101).then_some(())
    })
    .await;
    let vm = vms(&admin, &ns).get("ls-1").await.unwrap();
    assert!(
        !vm.annotations().contains_key(BROKER_REASON_ANNOTATION),
        "{:?}",
        vm.annotations()
    );
}

/// Waits until the leading broker's refusal on its Lease is (`Some`) or is not there.
async fn wait_refusing(admin: &Client, refusing: bool) -> Option<String> {
    eventually(
        &format!("the broker refusing claims: {refusing}"),
        CONVERGE,
        || async {
            let status = vdi_core::broker::status(admin).await.ok()?;
            (status.refusing.is_some() == refusing).then_some(status.refusing)
        },
    )
    .await
}

#[tokio::test]
async fn without_the_guard_the_broker_grants_nobody_and_says_why() {
    // Alone: every other test of this binary relies on the guard, so it is installed again
    // whatever the checks find.
    let _mine = replicas_mine().await;
    let admin = client_as("admin").await;
    if let Err(failed) = tokio::spawn(unguarded(admin.clone())).await {
        vdi_core::guard::install(&admin).await.unwrap();
        std::panic::resume_unwind(failed.into_panic());
    }
}

/// [`without_the_guard_the_broker_grants_nobody_and_says_why`]'s checks; they end with the
/// guard installed.
async fn unguarded(admin: Client) {
    let ns = namespace("unguarded").await;
    desktop_member(&ns, "ug", "ug-1", true).await;
    claim("alice", &ns, "ug").await;
    wait_granted(&ns, "ug-1", "alice", CONVERGE).await;

    vdi_core::guard::uninstall(&admin).await.unwrap();
    let why = wait_refusing(&admin, true).await.unwrap();
    assert!(why.contains("does not enforce the claim rules"), "{why}");
    let status = vdi_core::broker::status(&client_as("bob").await)
        .await
        .unwrap();
    assert!(
        status.summary.contains("grants no desktop"),
        "{}",
        status.summary
    );
    // alice's grant is revoked; bob's edit of her Lease, which nothing refuses now, gets him
    // nothing either.
    // (The API server drops a deleted policy a moment after the broker may have seen it gone.)
    wait_no_binding(&ns, "ug-1").await;
    let bobs = Api::<Lease>::namespaced(client_as("bob").await, &ns);
    let what = "without the guard RBAC lets bob replace alice's Lease";
    eventually(what, CONVERGE, || async {
        let mut taken = lease_of("bob", &ns, "ug-1").await;
        taken.spec.as_mut().unwrap().holder_identity = Some("bob".into());
        match bobs
            .replace(&lease_name("ug-1"), &PostParams::default(), &taken)
            .await
        {
            Ok(_) => Some(()),
            Err(e) if vdi_core::error::is_guard_denial(&e) => None,
            Err(e) => panic!("{what}: {e}"),
        }
    })
    .await;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        assert!(
            grant(&ns, "ug-1").await.1.is_none(),
            "bob was granted alice's desktop"
        );
        assert_eq!(stream_code("bob", &ns, "ug-1", VNC).await, 403);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let vm = vms(&admin, &ns).get("ug-1").await.unwrap();
    let reason = vm.annotations().get(BROKER_REASON_ANNOTATION).cloned();
    assert!(
        reason
            .as_deref()
            .is_some_and(|r| r.contains("does not enforce the claim rules")),
        "{reason:?}"
    );

    // The administrator mends it: the stolen Lease goes, the guard comes back, claims work.
    Api::<Lease>::namespaced(admin.clone(), &ns)
        .delete(&lease_name("ug-1"), &DeleteParams::default())
        .await
        .unwrap();
    vdi_core::guard::install(&admin).await.unwrap();
    wait_refusing(&admin, false).await;
    wait_no_grant(&ns, "ug-1", CONVERGE).await;
    claim("alice", &ns, "ug").await;
    wait_granted(&ns, "ug-1", "alice", CONVERGE).await;
}

/// Waits until `member` has no RoleBinding.
async fn wait_no_binding(ns: &str, member: &str) {
    eventually(&format!("no binding for {member}"), CONVERGE, || async {
        grant(ns, member).await.1.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_claim_naming_one_of_kubernetes_own_identities_is_refused_even_to_an_administrator() {
    let _steady = replicas_steady().await;
    let ns = namespace("system").await;
    desktop_member(&ns, "sy", "sy-1", true).await;
    for who in ["admin", "bob"] {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": { "name": lease_name("sy-1"), "namespace": ns },
            "spec": { "holderIdentity": "system:anonymous",
                      "acquireTime": "2026-12-06T00:00:00.000000Z",
                      "renewTime": "2026-12-06T00:00:00.000000Z", "leaseDurationSeconds": 60 },
        }))
        .unwrap();
        let refused = Api::<Lease>::namespaced(client_as(who).await, &ns)
            .create(&PostParams::default(), &lease)
            .await
            .expect_err("a claim for system:anonymous");
        // bob is refused first for naming someone else; the rule refuses administrators too.
        let why = if who == "admin" {
            "may not name system:anonymous"
        } else {
            "corral-vdi guard: bob may not create claim Lease"
        };
        assert!(refused.to_string().contains(why), "{who}: {refused}");
    }
    let leases = Api::<Lease>::namespaced(client_as("admin").await, &ns);
    assert!(leases.get_opt(&lease_name("sy-1")).await.unwrap().is_none());
    // The client refuses before it writes.
    let refused = vdi_core::claim::assign(
        &corral_tests::actor_as("admin").await,
        &ns,
        "sy",
        "system:kube-scheduler",
        &Default::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Invalid, "{refused}");
    assert!(leases.get_opt(&lease_name("sy-1")).await.unwrap().is_none());
}

#[tokio::test]
async fn only_the_broker_writes_its_leader_lease_and_cluster_wide_lease_writers_are_named() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    // What an administrator might do by mistake: Lease writes for bob in every namespace.
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": { "name": "test-lease-writer" },
        "rules": [{ "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "verbs": ["get", "list", "create", "update", "patch", "delete"] }],
    }))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "test-lease-writer-bob" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "test-lease-writer" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob" }],
    }))
    .unwrap();
    let roles = Api::<ClusterRole>::all(admin.clone());
    let bindings = Api::<ClusterRoleBinding>::all(admin.clone());
    roles.create(&PostParams::default(), &role).await.unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    let named = claimants::cluster_wide_lease_writers(&admin)
        .await
        .unwrap()
        .unwrap();
    assert!(
        named
            .iter()
            .any(|n| n.contains("ClusterRoleBinding test-lease-writer-bob gives user bob")),
        "{named:?}"
    );
    assert_eq!(
        claimants::cluster_wide_lease_writers(&client_as("alice").await)
            .await
            .unwrap(),
        None,
        "only administrators may list them"
    );
    // Even so, bob may not write the broker's leader Lease (RBAC would let him now).
    let leases = Api::<Lease>::namespaced(client_as("bob").await, BROKER_NAMESPACE);
    // The leader renews its Lease every few seconds: a write carrying the resourceVersion read
    // just before may meet a renewal first (409, before any admission); it is tried again until
    // the API server judges it.
    let refused = eventually(
        "bob's write of the leader Lease judged",
        CONVERGE,
        || async {
            let mut taken = leases.get(BROKER_NAME).await.ok()?;
            taken.spec.as_mut()?.holder_identity = Some("bob".into());
            match leases
                .replace(BROKER_NAME, &PostParams::default(), &taken)
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 409 => None,
                judged => Some(judged),
            }
        },
    )
    .await
    .expect_err("bob takes the broker's leader Lease");
    assert!(
        refused
            .to_string()
            .contains("may not write the leader Lease"),
        "{refused}"
    );
    let refused = leases
        .delete(BROKER_NAME, &DeleteParams::default())
        .await
        .expect_err("bob deletes the broker's leader Lease");
    assert!(refused.to_string().contains("only the broker"), "{refused}");
    let now = Api::<Lease>::namespaced(admin.clone(), BROKER_NAMESPACE)
        .get(BROKER_NAME)
        .await
        .unwrap();
    assert_ne!(
        now.spec.unwrap().holder_identity.as_deref(),
        Some("bob"),
        "the leader Lease names bob"
    );
    bindings
        .delete("test-lease-writer-bob", &DeleteParams::default())
        .await
        .unwrap();
    roles
        .delete("test-lease-writer", &DeleteParams::default())
        .await
        .unwrap();
}

/// Whether `user` may create a Lease in `ns` (a dry run: nothing is written).
async fn may_claim(user: &str, ns: &str) -> bool {
    let lease: Lease = serde_json::from_value(json!({
        "metadata": { "name": "corral-vdi-x-1", "namespace": ns,
                      "labels": { POOL_LABEL: "x", MEMBER_LABEL: "x-1" } },
        "spec": { "holderIdentity": user, "acquireTime": "2026-12-06T00:00:00.000000Z",
                  "renewTime": "2026-12-06T00:00:00.000000Z", "leaseDurationSeconds": 60 },
    }))
    .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match Api::<Lease>::namespaced(client_as(user).await, ns)
        .create(&dry, &lease)
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 403 => false,
        Err(e) => panic!("{user}'s dry-run claim in {ns}: {e}"),
    }
}

/// A namespace `<prefix>-<pid>` that nobody was let into (no claimant, no broker binding),
/// unlike [`namespace`]'s.
async fn bare_namespace(admin: &Client, prefix: &str) -> String {
    let name = format!("{prefix}-{}", std::process::id() % 10_000);
    let created: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &created)
        .await
        .unwrap();
    name
}

#[tokio::test]
async fn who_may_claim_in_a_namespace_is_its_claimant_binding() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = bare_namespace(&admin, "claimants").await;
    // Pool x is open to everyone who may claim there (SPEC "Entitlements"): who may is the
    // claimant binding's to say.
    corral_tests::open_to_everyone(&ns, "x").await;
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), &ns);
    assert!(!may_claim("carol", &ns).await);

    // Refusals change nothing: nobody named, a system group, an ordinary user asking.
    let carol = [Claimant::User("carol".into())];
    let refused = claimants::allow(&admin, &ns, &[]).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Invalid, "{refused}");
    assert!(Claimant::group("system:authenticated").is_err());
    let refused = claimants::allow(&client_as("alice").await, &ns, &carol)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Forbidden, "{refused}");
    assert!(
        bindings.get_opt(CLAIMANT_ROLE).await.unwrap().is_none(),
        "nothing moved"
    );

    let said = claimants::allow(&admin, &ns, &carol).await.unwrap();
    assert_eq!(
        said,
        [
            format!("user carol may claim desktops in namespace \"{ns}\""),
            format!("the broker may act in namespace \"{ns}\""),
        ]
    );
    eventually("carol may claim", CONVERGE, || async {
        may_claim("carol", &ns).await.then_some(())
    })
    .await;
    assert_eq!(claimants::list(&admin, &ns).await.unwrap(), carol);
    let said = claimants::disallow(&admin, &ns, &carol).await.unwrap();
    assert_eq!(
        said,
        [format!(
            "user carol may no longer claim desktops in namespace \"{ns}\""
        )]
    );
    assert!(bindings.get_opt(CLAIMANT_ROLE).await.unwrap().is_none());
    eventually("carol may claim no more", CONVERGE, || async {
        (!may_claim("carol", &ns).await).then_some(())
    })
    .await;
    Api::<Namespace>::all(admin)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

/// A client acting as the broker's ServiceAccount (the admin impersonates it, with the groups
/// the API server gives a service account's token).
async fn as_the_broker() -> Client {
    sandbox::kubeconfig::client_impersonating(
        &corral_tests::sandbox().kubeconfig,
        "admin",
        vdi_core::names::BROKER_USER,
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:corral-vdi-system",
            "system:authenticated",
        ],
    )
    .await
    .unwrap()
}

/// The status `client` gets for a GET of VMI `vmi`'s screenshot in `ns` (a stream right a grant
/// gives): the aggregator checks RBAC first (403), then virt-api looks for the VMI (404).
async fn screenshot_code(client: &Client, ns: &str, vmi: &str) -> u16 {
    let path = format!(
        "/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{vmi}/vnc/screenshot"
    );
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    match client.request_text(request).await {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(e) => panic!("screenshot of {vmi} in {ns}: {e}"),
    }
}

/// The code and message of a refused write, or a panic when it was let through.
fn refused<T: std::fmt::Debug>(what: &str, result: kube::Result<T>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("{what} as the broker: not refused: {other:?}"),
    }
}

#[tokio::test]
async fn the_broker_acts_only_in_the_namespaces_that_hold_desktops_and_writes_only_its_own() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let broker = as_the_broker().await;
    // A namespace that holds desktops (let in with `broker allow`, as the sandbox does) and one
    // nobody served, each with a VM that is no pool member and a pool member.
    let served = namespace("acts").await;
    let other = bare_namespace(&admin, "elsewhere").await;
    for ns in [&served, &other] {
        golden_vm(ns, "golden", "Halted", |_| {}).await;
        desktop_member(ns, "p", "p-1", false).await;
    }
    let found = vdi_core::broker::namespaces::served(&admin)
        .await
        .unwrap()
        .unwrap();
    assert!(
        found.contains(&served) && !found.contains(&other),
        "{found:?}"
    );
    let unserved = vdi_core::broker::namespaces::unserved(&admin, &found)
        .await
        .unwrap()
        .unwrap();
    assert!(
        unserved.iter().any(|w| w.contains(&format!(
            "namespace \"{other}\" holds desktops but the broker may not act there"
        )) && w.contains(&format!("broker install --namespace {other}"))),
        "{unserved:?}"
    );
    assert!(
        !unserved.iter().any(|w| w.contains(&served)),
        "{unserved:?}"
    );

    let versions = |ns: String| {
        let admin = admin.clone();
        async move {
            let mut seen = Vec::new();
            for vm in vms(&admin, &ns).list(&Default::default()).await.unwrap() {
                seen.push((vm.name_any(), vm.resource_version()));
            }
            for lease in Api::<Lease>::namespaced(admin.clone(), &ns)
                .list(&Default::default())
                .await
                .unwrap()
            {
                seen.push((lease.name_any(), lease.resource_version()));
            }
            for rb in Api::<RoleBinding>::namespaced(admin.clone(), &ns)
                .list(&Default::default())
                .await
                .unwrap()
            {
                seen.push((rb.name_any(), rb.resource_version()));
            }
            seen
        }
    };
    let before = (
        versions(served.clone()).await,
        versions(other.clone()).await,
        versions(BROKER_NAMESPACE.into()).await,
    );

    // Where no desktops are, RBAC refuses it everything a grant gives or a claim needs.
    assert_eq!(screenshot_code(&broker, &other, "golden").await, 403);
    assert_eq!(screenshot_code(&broker, &served, "golden").await, 404);
    let label = json!({ "metadata": { "labels": { "stolen": "yes" } } });
    let (code, _) = refused(
        "label a member where it does not act",
        vms(&broker, &other)
            .patch("p-1", &PatchParams::default(), &Patch::Merge(&label))
            .await,
    );
    assert_eq!(code, 403);
    for ns in [other.as_str(), "kube-system"] {
        let lease: Lease = serde_json::from_value(
            json!({ "metadata": { "name": "corral-vdi-p-1", "namespace": ns } }),
        )
        .unwrap();
        let (code, _) = refused(
            "create a Lease where it does not act",
            Api::<Lease>::namespaced(broker.clone(), ns)
                .create(&PostParams::default(), &lease)
                .await,
        );
        assert_eq!(code, 403, "{ns}");
    }

    // Where it acts, its policy lets it write only its own objects.
    let (code, message) = refused(
        "label a VM that is no pool member",
        vms(&broker, &served)
            .patch("golden", &PatchParams::default(), &Patch::Merge(&label))
            .await,
    );
    assert_eq!(code, 403);
    assert!(
        message.contains("corral-vdi broker policy") && message.contains("golden"),
        "{message}"
    );
    let (code, _) = refused(
        "delete a VM that is no pool member",
        vms(&broker, &served)
            .delete("golden", &DeleteParams::default())
            .await,
    );
    assert_eq!(code, 403);
    let role: k8s_openapi::api::rbac::v1::Role =
        serde_json::from_value(json!({ "metadata": { "name": "admin-too" }, "rules": [] }))
            .unwrap();
    let (code, message) = refused(
        "create a Role that is no grant",
        Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(broker.clone(), &served)
            .create(&PostParams::default(), &role)
            .await,
    );
    assert_eq!(code, 403);
    assert!(message.contains("admin-too"), "{message}");
    let lease: Lease =
        serde_json::from_value(json!({ "metadata": { "name": "not-a-claim" } })).unwrap();
    let (code, _) = refused(
        "create a Lease that is no claim",
        Api::<Lease>::namespaced(broker.clone(), &served)
            .create(&PostParams::default(), &lease)
            .await,
    );
    assert_eq!(code, 403);
    // In its own namespace, only its leader Lease.
    let (code, _) = refused(
        "create another Lease beside its leader Lease",
        Api::<Lease>::namespaced(broker.clone(), BROKER_NAMESPACE)
            .create(&PostParams::default(), &lease)
            .await,
    );
    assert_eq!(code, 403);

    let after = (
        versions(served.clone()).await,
        versions(other.clone()).await,
        versions(BROKER_NAMESPACE.into()).await,
    );
    // The leader Lease is renewed all along: compare the rest.
    let without_leader = |mut v: Vec<(String, Option<String>)>| {
        v.retain(|(name, _)| name != BROKER_NAME);
        v
    };
    assert_eq!(after.0, before.0, "nothing moved where it acts");
    assert_eq!(after.1, before.1, "nothing moved where it does not");
    assert_eq!(
        without_leader(after.2),
        without_leader(before.2),
        "nothing moved in its namespace"
    );
    // kube-system's own leader elections renew themselves: no Lease of the broker's there.
    assert!(
        Api::<Lease>::namespaced(admin.clone(), "kube-system")
            .get_opt("corral-vdi-p-1")
            .await
            .unwrap()
            .is_none()
    );

    // `broker install --namespace` lets it act there.
    let said = vdi_core::broker::namespaces::serve(&admin, &other)
        .await
        .unwrap();
    assert_eq!(said, format!("the broker may act in namespace \"{other}\""));
    // RBAC's authorizer reads RoleBindings through a cache: the new one holds a moment later.
    let what = format!("the broker may act in {other}");
    eventually(&what, CONVERGE, || async {
        (screenshot_code(&broker, &other, "golden").await == 404).then_some(())
    })
    .await;
    Api::<Namespace>::all(admin)
        .delete(&other, &DeleteParams::default())
        .await
        .unwrap();
}
