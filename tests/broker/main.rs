//! The in-cluster broker against the sandbox's real API server (issue 25's acceptance): access
//! follows the claim (each holder reaches their own desktop's streams and power, nobody else's,
//! and loses them on release), a leader killed hands over to the other replica, a broker
//! restarted after claims it missed converges on exactly the right grants, a Lease edited by
//! hand moves the grant, the Go CLI's label-only writer gets no grant, and stale claims are
//! reclaimed.
//!
//! This binary's sandbox runs the broker (`Options.broker`): its two replicas are processes
//! acting as the broker's ServiceAccount, and alice, bob and carol hold only the claimant role
//! (`corral-vdi:desktop-user`), so every stream or power right they have is the broker's grant.
//! Tests run in parallel, each in a namespace of its own; the ones that kill replicas take
//! [`replicas_mine`] (the others [`replicas_steady`]), so no test sees the broker down unless
//! it took it down.
//!
//! One test binary (one sandbox), a module per acceptance group; what they share (claiming as
//! the CLI does, reading grants, stream and power attempts, Events) is here.

mod access;
mod airtight;
mod bad_leases;
mod client;
mod dedicated;
mod entitlements;
mod failover;
mod hand_edit;
mod image;
mod label_only;
mod metrics;
mod policy;
mod pools;
mod reclaim;
mod replicas;
mod restart;

use std::collections::BTreeSet;
use std::time::Duration;

use corral_tests::{actor_as, client_as, eventually, streams_as, vms};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use vdi_core::claim::{ClaimOptions, Claimed, assign};
use vdi_core::error::Error;
use vdi_core::names::{
    ASSIGNED_TO_LABEL, BROKER_NAME, BROKER_NAMESPACE, GRANTED_TO_ANNOTATION, MANAGED_BY_LABEL,
    MEMBER_LABEL, POOL_LABEL, encode_identity, grant_name, lease_name,
};
use vdi_core::stream::{self, Subresource, VmiStream};

/// The broker's name in `app.kubernetes.io/managed-by` (common.md: the grants' labels).
const MANAGED_BY: &str = BROKER_NAME;

/// How long the broker may take to follow a change of a claim (issue 25: "within 5 s").
const FOLLOW: Duration = Duration::from_secs(5);

/// How long a test of *what* the broker does with a claim, not of how soon, waits for it: CI
/// runs this binary beside the GUI tests on two cores, where a reclaim's several writes (Lease,
/// grant, VM, Event) can take longer than [`FOLLOW`]'s target. The tests of the target itself
/// (access, hand_edit) keep [`FOLLOW`] and print what they measured.
const CONVERGE: Duration = Duration::from_secs(30);

/// The sandbox of this binary, with the broker; every test calls this before anything else
/// (the first call of a binary decides the sandbox's options).
pub(crate) fn with_broker() -> &'static corral_tests::Shared {
    corral_tests::sandbox_with(|o| {
        o.broker = true;
        o.prometheus = true;
    })
}

/// Tests that leave the replicas alone hold this shared; a test that kills or restarts them
/// holds it alone, so the others never run while the broker is down.
static REPLICAS: RwLock<()> = RwLock::const_new(());

/// For a test that needs the broker running as the sandbox started it.
async fn replicas_steady() -> RwLockReadGuard<'static, ()> {
    with_broker();
    REPLICAS.read().await
}

/// For a test that kills or restarts replicas: no other test runs meanwhile.
async fn replicas_mine() -> RwLockWriteGuard<'static, ()> {
    with_broker();
    REPLICAS.write().await
}

/// `user` claims a member of `pool` for themselves, as `corral-vdi assign` does (with a broker,
/// it returns once the broker has granted the claim).
async fn claim(user: &str, ns: &str, pool: &str) -> Claimed {
    claim_with(user, ns, pool, &ClaimOptions::default()).await
}

/// [`claim`] with `options`.
async fn claim_with(user: &str, ns: &str, pool: &str, options: &ClaimOptions) -> Claimed {
    assign(&actor_as(user).await, ns, pool, user, options)
        .await
        .unwrap_or_else(|e| panic!("{user} claims in pool {pool} of {ns}: {e}"))
}

/// The broker's Role and RoleBinding for `member` in `ns`, each if it exists.
async fn grant(ns: &str, member: &str) -> (Option<Role>, Option<RoleBinding>) {
    let admin = client_as("admin").await;
    let name = grant_name(member);
    let role = Api::<Role>::namespaced(admin.clone(), ns)
        .get_opt(&name)
        .await
        .unwrap();
    let binding = Api::<RoleBinding>::namespaced(admin, ns)
        .get_opt(&name)
        .await
        .unwrap();
    (role, binding)
}

/// The users a RoleBinding binds (`kind: User` subjects), in order.
fn bound_users(binding: &RoleBinding) -> Vec<String> {
    binding
        .subjects
        .iter()
        .flatten()
        .map(|s| format!("{}:{}", s.kind, s.name))
        .collect()
}

/// Waits (at most `within`) until `member` in `ns` is granted to `holder` as the broker marks it:
/// the RoleBinding binds exactly `User <holder>` and the VM's granted-to annotation and
/// assigned-to label name `holder`.
async fn wait_granted(ns: &str, member: &str, holder: &str, within: Duration) {
    let admin = client_as("admin").await;
    let want = encode_identity(holder);
    let api = vms(&admin, ns);
    let deadline = Instant::now() + within;
    loop {
        let (_, binding) = grant(ns, member).await;
        let vm = api.get(member).await.unwrap();
        let users = binding.as_ref().map(bound_users);
        let granted_to = vm.annotations().get(GRANTED_TO_ANNOTATION).cloned();
        let label = vm.labels().get(ASSIGNED_TO_LABEL).cloned();
        if users == Some(vec![format!("User:{holder}")])
            && granted_to.as_deref() == Some(&want)
            && label.as_deref() == Some(&want)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{member} in {ns} not granted to {holder} within {within:?}: binding {users:?}, \
             granted-to {granted_to:?}, label {label:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (at most `within`) until `member` in `ns` has no grant: no Role, no RoleBinding, no
/// granted-to annotation.
async fn wait_no_grant(ns: &str, member: &str, within: Duration) {
    let api = vms(&client_as("admin").await, ns);
    eventually(
        &format!("no grant for {member} in {ns}"),
        within,
        || async {
            let (role, binding) = grant(ns, member).await;
            let vm = api.get(member).await.ok()?;
            let annotated = vm.annotations().contains_key(GRANTED_TO_ANNOTATION);
            (role.is_none() && binding.is_none() && !annotated).then_some(())
        },
    )
    .await;
}

/// Asserts the shape of `member`'s grant for `holder` (common.md "Per claim"): labels, the Role's
/// rules (each limited to the member), the binding's one subject, and the owner reference to the
/// claim Lease as it is now (its uid: a Lease made again after a release is another owner).
async fn assert_grant_shape(ns: &str, pool: &str, member: &str, holder: &str) {
    let admin = client_as("admin").await;
    let (role, binding) = grant(ns, member).await;
    let (role, binding) = (
        role.unwrap_or_else(|| panic!("no Role for {member}")),
        binding.unwrap_or_else(|| panic!("no RoleBinding for {member}")),
    );
    let lease = Api::<Lease>::namespaced(admin, ns)
        .get(&lease_name(member))
        .await
        .unwrap();
    for (kind, meta) in [("Role", &role.metadata), ("RoleBinding", &binding.metadata)] {
        let labels = meta.labels.clone().unwrap_or_default();
        for (key, value) in [
            (MEMBER_LABEL, member),
            (POOL_LABEL, pool),
            (MANAGED_BY_LABEL, MANAGED_BY),
        ] {
            assert_eq!(
                labels.get(key).map(String::as_str),
                Some(value),
                "{kind} of {member}: label {key} in {labels:?}"
            );
        }
        let owners = meta.owner_references.clone().unwrap_or_default();
        assert!(
            owners.iter().any(|o| o.kind == "Lease"
                && o.name == lease_name(member)
                && Some(&o.uid) == lease.metadata.uid.as_ref()
                && o.block_owner_deletion != Some(true)),
            "{kind} of {member}: owner references {owners:?} do not name its Lease {:?} (uid {:?})",
            lease_name(member),
            lease.metadata.uid
        );
    }
    let mut rules = BTreeSet::new();
    for rule in role.rules.iter().flatten() {
        assert_eq!(
            rule.resource_names.as_deref(),
            Some(&[member.to_owned()][..]),
            "every rule of {member}'s Role names the member alone: {rule:?}"
        );
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    rules.insert(format!("{group} {resource} {verb}"));
                }
            }
        }
    }
    let want: BTreeSet<String> = [
        "virtualmachineinstances/vnc get",
        "virtualmachineinstances/vnc/screenshot get",
        "virtualmachineinstances/portforward get",
        "virtualmachineinstances/usbredir get",
        "virtualmachineinstances/console get",
        "virtualmachines/start update",
        "virtualmachines/stop update",
        "virtualmachines/restart update",
        "virtualmachineinstances/softreboot update",
    ]
    .iter()
    .map(|r| format!("subresources.kubevirt.io {r}"))
    .collect();
    assert_eq!(rules, want, "the rules of {member}'s Role");
    assert_eq!(
        (
            binding.role_ref.kind.as_str(),
            binding.role_ref.name.as_str()
        ),
        ("Role", grant_name(member).as_str())
    );
    let subjects = binding.subjects.clone().unwrap_or_default();
    assert!(
        subjects.len() == 1
            && subjects[0].kind == "User"
            && subjects[0].name == holder
            && subjects[0].api_group.as_deref() == Some("rbac.authorization.k8s.io"),
        "{member}'s binding names User {holder} alone: {subjects:?}"
    );
}

/// The names of the grants (Roles, RoleBindings) the broker manages in `ns`.
async fn managed_grants(ns: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let admin = client_as("admin").await;
    let selector = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let roles = Api::<Role>::namespaced(admin.clone(), ns)
        .list(&selector)
        .await
        .unwrap();
    let bindings = Api::<RoleBinding>::namespaced(admin, ns)
        .list(&selector)
        .await
        .unwrap();
    (
        roles.iter().map(ResourceExt::name_any).collect(),
        bindings.iter().map(ResourceExt::name_any).collect(),
    )
}

/// What the API server answered an upgrade to `subresource` of `member` in `ns` as `user`: 101
/// when upgraded (the stream is dropped), else the refusal's status.
async fn stream_code(user: &str, ns: &str, member: &str, subresource: Subresource) -> u16 {
    // A client of its own per attempt: the aggregator may close a connection after a refusal.
    match stream::open(&streams_as(user).await, ns, member, subresource).await {
        Ok(_) => 101,
        Err(Error::Stream(refusal)) => refusal.status,
        Err(e) => panic!("{user} opens {} on {member}: {e}", subresource.name()),
    }
}

/// The stream subresources a holder is granted (portforward to the guest's sshd).
const STREAMS: [Subresource; 3] = [
    Subresource::Vnc {
        preserve_session: false,
    },
    Subresource::PortForward { port: 22 },
    Subresource::UsbRedir,
];

/// What virt-api answered `user`'s PUT of the power subresource `action` of VM `member`: 202
/// when accepted, else the refusal's code. With `dry_run`, KubeVirt checks and changes nothing.
async fn power_code(user: &str, ns: &str, member: &str, action: &str, dry_run: bool) -> u16 {
    let body = if dry_run {
        json!({ "dryRun": ["All"] })
    } else {
        json!({})
    };
    let request = http::Request::put(stream::vm_action_path(ns, member, action))
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    match client_as(user).await.request_text(request).await {
        Ok(_) => 202,
        Err(kube::Error::Api(status)) => status.code,
        Err(e) => panic!("{user} {action} {member}: {e}"),
    }
}

/// The resourceVersion of VM `member` in `ns`.
async fn vm_version(admin: &Client, ns: &str, member: &str) -> String {
    vms(admin, ns)
        .get(member)
        .await
        .unwrap()
        .resource_version()
        .unwrap()
}

/// Waits (at most `within`) for an Event with `reason` on VM `member` in `ns`, reported by the
/// broker, whose note names `user` and the member; returns it.
async fn wait_event(ns: &str, member: &str, reason: &str, user: &str, within: Duration) -> Event {
    let api: Api<Event> = Api::namespaced(client_as("admin").await, ns);
    eventually(
        &format!("an Event {reason} on {member} naming {user}"),
        within,
        || async {
            let events = api.list(&ListParams::default()).await.ok()?;
            events.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(member)
                    && e.reporting_controller.as_deref() == Some(BROKER_NAME)
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains(user) && n.contains(member))
            })
        },
    )
    .await
}

/// The leader-election Lease: its holder and `leaseDurationSeconds`.
async fn leader(admin: &Client) -> (Option<String>, i32) {
    let lease = Api::<Lease>::namespaced(admin.clone(), BROKER_NAMESPACE)
        .get(BROKER_NAME)
        .await
        .unwrap();
    let spec = lease.spec.unwrap_or_default();
    (
        spec.holder_identity,
        spec.lease_duration_seconds.unwrap_or(0),
    )
}

/// Whether `console` is still open after `quiet` with nothing to read: an RFB server, its
/// banner read, waits for the client, so an open console sends nothing.
async fn still_open(console: &mut VmiStream, quiet: Duration) -> bool {
    match tokio::time::timeout(quiet, console.next()).await {
        Err(_) => true,
        Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => true,
        Ok(_) => false,
    }
}

/// Reads `console` until it ends (EOF, an error, or a close frame) or `until` passes; whether it
/// ended.
async fn ends_by(console: &mut VmiStream, until: Instant) -> bool {
    loop {
        match tokio::time::timeout_at(until, console.next()).await {
            Err(_) => return false,
            Ok(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => return true,
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// `user`'s console on `member`, opened as the app opens it (keeping any other viewer), its RFB
/// banner read.
async fn console(user: &str, ns: &str, member: &str) -> VmiStream {
    let vnc = Subresource::Vnc {
        preserve_session: true,
    };
    let mut console = stream::open(&streams_as(user).await, ns, member, vnc)
        .await
        .unwrap_or_else(|e| panic!("{user}'s console on {member}: {e}"));
    match tokio::time::timeout(Duration::from_secs(10), console.next()).await {
        Ok(Some(Ok(Message::Binary(banner)))) => {
            assert!(banner.starts_with(b"RFB 003.008"), "{banner:?}")
        }
        other => panic!("{user}'s console on {member} sent no RFB banner: {other:?}"),
    }
    console
}

/// Runs the CLI as `user` with `args`; its exit success, stdout and stderr.
fn cli_as(user: &str, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(corral_tests::cli_binary())
        .args(["--context", user])
        .args(args)
        .env("KUBECONFIG", &corral_tests::sandbox().kubeconfig)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
