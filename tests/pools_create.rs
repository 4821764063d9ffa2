//! Pool create and delete against a real API server (the sandbox) with emulated KubeVirt clones:
//! each SPEC rule and refusal, with the message checked and the cluster checked unchanged; the
//! stall timeout, an outright clone failure, a label patch that RBAC refuses, two creators
//! racing, leftovers of an aborted run, and delete's refusals, force and idempotency.
//!
//! What comes from the emulator (not KubeVirt): clone phases and their timing, the
//! `stallClones` / `failClones` knobs, and the `sandbox.corral.dev/snapshot-disabled` annotation
//! that makes a volume report snapshots disabled as KubeVirt does for a StorageClass without a
//! VolumeSnapshotClass.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral_tests::{add_knob, client_as, eventually, golden_vm, grant_role, namespace};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use vdi_core::Error;
use vdi_core::cluster::ServerClock;
use vdi_core::error::{ErrorKind, PoolCreateFailure};
use vdi_core::labels::{
    ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, MEMBER_LABEL, POOL_LABEL, lease_name,
};
use vdi_core::model::{CreateProgress, CreateStep, MemberState, Scope};
use vdi_core::pool::{
    CancelHandle, CreateOptions, CreatePool, DeletePool, MAX_POOL_SIZE, RUN_LABEL, clone_name,
    create_pool, delete_pool,
};
use vdi_core::resources::VirtualMachine;
use vdi_core::watch::list_pools;

/// What a namespace holds that pool create could touch: VMs (name → labels), clone objects and
/// Leases, by name.
#[derive(Debug, PartialEq)]
struct World {
    vms: BTreeMap<String, BTreeMap<String, String>>,
    clones: BTreeSet<String>,
    leases: BTreeSet<String>,
}

async fn world(ns: &str) -> World {
    let admin = client_as("admin").await;
    let all = ListParams::default();
    let vms = Api::<VirtualMachine>::namespaced(admin.clone(), ns)
        .list(&all)
        .await
        .unwrap();
    let clones = corral_tests::clones(&admin, ns).list(&all).await.unwrap();
    let leases = Api::<Lease>::namespaced(admin.clone(), ns)
        .list(&all)
        .await
        .unwrap();
    World {
        vms: vms
            .items
            .iter()
            .map(|vm| (vm.name_any(), vm.labels().clone()))
            .collect(),
        clones: clones.items.iter().map(|c| c.name_any()).collect(),
        leases: leases.items.iter().map(|l| l.name_any()).collect(),
    }
}

fn request(ns: &str, pool: &str, golden: &str, size: u32) -> CreatePool {
    CreatePool {
        namespace: ns.into(),
        name: pool.into(),
        golden: golden.into(),
        size,
        options: CreateOptions::default(),
    }
}

/// Every progress event, in order.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(Instant, CreateProgress)>>>);

impl Recorder {
    fn sink(&self) -> impl Fn(CreateProgress) + Send + Sync + use<> {
        let events = self.0.clone();
        move |e| events.lock().unwrap().push((Instant::now(), e))
    }

    fn events(&self) -> Vec<(Instant, CreateProgress)> {
        self.0.lock().unwrap().clone()
    }

    fn member(&self, member: &str) -> Vec<(Instant, vdi_core::model::MemberProgress)> {
        self.events()
            .into_iter()
            .filter_map(|(t, e)| match e {
                CreateProgress::Member(p) if p.member == member => Some((t, p)),
                _ => None,
            })
            .collect()
    }
}

fn incomplete(err: Error) -> PoolCreateFailure {
    match err {
        Error::PoolIncomplete(failure) => *failure,
        other => panic!("expected a partial failure, got {other:?}: {other}"),
    }
}

async fn assert_member_ready(admin: &Client, ns: &str, pool: &str, member: &str) {
    let vm = Api::<VirtualMachine>::namespaced(admin.clone(), ns)
        .get(member)
        .await
        .unwrap_or_else(|e| panic!("member {member}: {e}"));
    assert_eq!(
        vm.labels().get(POOL_LABEL).map(String::as_str),
        Some(pool),
        "{member}"
    );
    assert!(
        !vm.labels().contains_key(ASSIGNED_TO_LABEL),
        "{member} is unassigned"
    );
    assert!(
        !vm.annotations().contains_key(CLAIMED_AT_ANNOTATION),
        "{member} has no claimed-at"
    );
    assert_eq!(
        vm.spec.run_strategy.as_deref(),
        Some("Halted"),
        "{member} is halted"
    );
}

#[tokio::test]
async fn a_pool_is_cloned_labelled_stopped_and_unassigned() {
    let admin = client_as("admin").await;
    let ns = namespace("create").await;
    // A golden VM that carries Corral keys (an unassigned member of another pool, cloned as
    // asked for explicitly): the clones' filters must keep them off the members.
    golden_vm(&ns, "gold", "Halted", |vm| {
        vm["metadata"]["labels"]["corral.dev/vdi-note"] = json!("stray");
        vm["metadata"]["labels"][POOL_LABEL] = json!("elsewhere");
        vm["metadata"]["annotations"] =
            json!({ CLAIMED_AT_ANNOTATION: "2026-01-01T00:00:00Z", "note": "kept" });
    })
    .await;
    let recorder = Recorder::default();
    let mut asked = request(&ns, "devpool", "gold", 3);
    asked.options.allow_member = true;
    let created = create_pool(&admin, &asked, recorder.sink())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(created.members, ["devpool-1", "devpool-2", "devpool-3"]);
    assert_eq!(
        created.clone_api_version, "v1beta1",
        "discovery prefers v1beta1"
    );
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);

    let vms = Api::<VirtualMachine>::namespaced(admin.clone(), &ns);
    for member in &created.members {
        assert_member_ready(&admin, &ns, "devpool", member).await;
        let vm = vms.get(member).await.unwrap();
        assert_eq!(vm.labels().get("app").map(String::as_str), Some("desktop"));
        assert!(!vm.labels().contains_key("corral.dev/vdi-note"), "{member}");
        assert_eq!(
            vm.annotations().get("note").map(String::as_str),
            Some("kept")
        );
    }
    let after = world(&ns).await;
    assert!(
        after.clones.is_empty(),
        "finished clones are removed: {:?}",
        after.clones
    );
    assert!(after.leases.is_empty(), "create makes no Leases");
    assert_eq!(
        after
            .vms
            .get("gold")
            .and_then(|l| l.get(POOL_LABEL))
            .map(String::as_str),
        Some("elsewhere"),
        "the golden VM is not touched"
    );

    // The pool lists as three free, stopped members.
    let clock = ServerClock::measure(&admin).await.unwrap();
    let pools = eventually("members Stopped", Duration::from_secs(20), || async {
        let pools = list_pools(&admin, &Scope::Namespace(ns.clone()), &clock)
            .await
            .unwrap();
        pools
            .iter()
            .all(|p| p.members.iter().all(|m| m.power == "Stopped"))
            .then_some(pools)
    })
    .await;
    let pool = pools
        .iter()
        .find(|p| p.name == "devpool")
        .expect("pool listed");
    assert_eq!((pool.counts.free, pool.counts.total), (3, 3));
    assert!(pool.members.iter().all(|m| m.state == MemberState::Free));

    // Progress: started once, then every member through its phases to done.
    let events = recorder.events();
    let started: Vec<_> = events
        .iter()
        .filter_map(|(_, e)| match e {
            CreateProgress::Started(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].members.len(), 3);
    assert_eq!(started[0].clone_api_version, "v1beta1");
    for member in &created.members {
        let steps = recorder.member(member);
        let phases: Vec<_> = steps.iter().filter_map(|(_, p)| p.phase.clone()).collect();
        for phase in [
            "SnapshotInProgress",
            "RestoreInProgress",
            "CreatingTargetVM",
            "Succeeded",
        ] {
            assert!(
                phases.iter().any(|p| p == phase),
                "{member} reported {phase}: {phases:?}"
            );
        }
        let last = &steps.last().unwrap().1;
        assert_eq!(last.step, CreateStep::Done);
        assert!(last.done && last.error.is_none());
        assert_eq!(last.clone, clone_name(member));
    }
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let admin = client_as("admin").await;
    let ns = namespace("input").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    let before = world(&ns).await;
    let long = "p".repeat(61);
    let cases = [
        (
            request(&ns, "Dev_Pool", "gold", 3),
            ErrorKind::Invalid,
            "is not a valid pool name",
        ),
        (
            request(&ns, "devpool", "gold", 0),
            ErrorKind::Invalid,
            "out of range",
        ),
        (
            request(&ns, "devpool", "gold", MAX_POOL_SIZE + 1),
            ErrorKind::Invalid,
            "out of range",
        ),
        (
            request(&ns, &long, "gold", 10),
            ErrorKind::Invalid,
            "64 characters",
        ),
        (
            request("no-such-namespace", "devpool", "gold", 3),
            ErrorKind::NotFound,
            "namespace \"no-such-namespace\" does not exist",
        ),
    ];
    for (req, kind, needle) in cases {
        let err = create_pool(&admin, &req, |_| {}).await.unwrap_err();
        assert_eq!(err.kind(), kind, "{err}");
        assert!(err.to_string().contains(needle), "{err}");
        assert!(err.suggestion().is_some(), "{err} has a fix");
    }
    assert_eq!(world(&ns).await, before);
}

#[tokio::test]
async fn the_golden_vm_is_looked_up_only_in_the_target_namespace() {
    let admin = client_as("admin").await;
    let ns = namespace("golden").await;
    let before = world(&ns).await;
    let demo_before = world("corral-vms").await;
    // golden-desktop exists, but in corral-vms.
    let err = create_pool(
        &admin,
        &request(&ns, "devpool", "golden-desktop", 2),
        |_| {},
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        err.to_string(),
        format!("golden VM \"golden-desktop\" not found in namespace \"{ns}\"")
    );
    assert!(err.suggestion().unwrap().contains("pass -n"), "{err:?}");
    assert_eq!(world(&ns).await, before);
    assert_eq!(world("corral-vms").await.clones, demo_before.clones);
}

#[tokio::test]
async fn an_existing_pool_a_taken_name_or_a_leftover_lease_is_refused() {
    let admin = client_as("admin").await;
    let ns = namespace("taken").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    // A VM that already carries pool "one"'s label (under another name).
    golden_vm(&ns, "stray", "Halted", |vm| {
        vm["metadata"]["labels"][POOL_LABEL] = json!("one");
    })
    .await;
    // An unlabelled VM with the name of pool "two"'s second member.
    golden_vm(&ns, "two-2", "Halted", |_| {}).await;
    // A claim Lease left over for pool "three"'s first member.
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(lease_name("three-1")),
            labels: Some(BTreeMap::from([
                (POOL_LABEL.to_owned(), "three".to_owned()),
                (MEMBER_LABEL.to_owned(), "three-1".to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec::default()),
    };
    Api::<Lease>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let before = world(&ns).await;

    let err = create_pool(&admin, &request(&ns, "one", "gold", 2), |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        err.to_string(),
        format!("pool \"one\" already exists in namespace \"{ns}\" (1 member: stray)")
    );
    assert!(
        err.suggestion()
            .unwrap()
            .contains("corral-vdi pool delete one")
    );
    assert!(!err.retryable());

    let err = create_pool(&admin, &request(&ns, "two", "gold", 3), |_| {})
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "VirtualMachine \"two-2\" already exists in namespace \"{ns}\""
        )),
        "{err}"
    );

    let err = create_pool(&admin, &request(&ns, "three", "gold", 2), |_| {})
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("claim Lease \"corral-vdi-three-1\" already exists"),
        "{err}"
    );
    assert_eq!(world(&ns).await, before, "refusals change nothing");
}

#[tokio::test]
async fn golden_vms_kubevirt_would_fail_late_are_refused_early() {
    let admin = client_as("admin").await;
    let ns = namespace("unfit").await;
    golden_vm(&ns, "tpm", "Halted", |vm| {
        vm["spec"]["template"]["spec"]["domain"]["devices"]["tpm"] = json!({ "persistent": true });
    })
    .await;
    golden_vm(&ns, "efi", "Halted", |vm| {
        vm["spec"]["template"]["spec"]["domain"]["firmware"] =
            json!({ "bootloader": { "efi": { "persistent": true } } });
    })
    .await;
    let nosnap = golden_vm(&ns, "nosnap", "Halted", |vm| {
        vm["metadata"]["annotations"] =
            json!({ sandbox::emulator::knobs::SNAPSHOT_DISABLED_ANNOTATION: "rootdisk" });
    })
    .await;
    // The emulator reports the volume as KubeVirt does.
    let statuses = nosnap.status.unwrap().other["volumeSnapshotStatuses"].clone();
    assert_eq!(statuses[0]["enabled"], json!(false), "{statuses}");
    let reason = statuses[0]["reason"].as_str().unwrap().to_owned();
    assert!(reason.starts_with("No VolumeSnapshotClass"), "{reason}");

    let before = world(&ns).await;
    let cases = [
        ("tpm", "has a persistent TPM", "without a persistent TPM"),
        (
            "efi",
            "has persistent EFI variables",
            "without persistent EFI",
        ),
        (
            "nosnap",
            "volume \"rootdisk\" does not support snapshots",
            "VolumeSnapshotClass",
        ),
    ];
    for (golden, cause, fix) in cases {
        let err = create_pool(
            &admin,
            &request(&ns, &format!("p{golden}"), golden, 2),
            |_| {},
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("golden VM \"{golden}\"")) && text.contains(cause),
            "{text}"
        );
        assert!(err.suggestion().unwrap().contains(fix), "{err:?}");
        if golden == "nosnap" {
            assert!(
                text.contains(&reason),
                "the cluster's reason is quoted: {text}"
            );
        }
    }
    assert_eq!(world(&ns).await, before, "nothing was created");

    // What the refusal spares: on KubeVirt (and the emulator) such a clone stays pending for
    // ever, with the event VMVolumeSnapshotsInvalid.
    let clone: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": { "name": "by-hand", "namespace": ns },
        "spec": { "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "nosnap" },
                  "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "by-hand-vm" } }
    }))
    .unwrap();
    corral_tests::clones(&admin, &ns)
        .create(&PostParams::default(), &clone)
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    let event = eventually(
        "VMVolumeSnapshotsInvalid",
        Duration::from_secs(15),
        || async {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=by-hand"))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("VMVolumeSnapshotsInvalid"))
        },
    )
    .await;
    assert_eq!(
        event.message.as_deref(),
        Some("Virtual Machine volume rootdisk does not support snapshots")
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pending = corral_tests::clones(&admin, &ns)
        .get("by-hand")
        .await
        .unwrap();
    assert_eq!(pending.data.pointer("/status/phase"), None, "still pending");
}

#[tokio::test]
async fn a_running_golden_vm_is_refused_unless_allowed() {
    let admin = client_as("admin").await;
    let ns = namespace("running").await;
    golden_vm(&ns, "live", "Always", |_| {}).await;
    let before = world(&ns).await;
    let err = create_pool(&admin, &request(&ns, "hot", "live", 2), |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(
        err.to_string()
            .contains("golden VM \"live\" is Running, not Stopped")
            && err.to_string().contains("crash-consistent"),
        "{err}"
    );
    assert!(err.suggestion().unwrap().contains("--allow-running"));
    assert_eq!(world(&ns).await, before);

    let mut allowed = request(&ns, "hot", "live", 2);
    allowed.options.allow_running = true;
    let created = create_pool(&admin, &allowed, |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for member in &created.members {
        assert_member_ready(&admin, &ns, "hot", member).await;
    }
}

#[tokio::test]
async fn a_stalled_clone_times_out_naming_member_clone_phase_and_hint() {
    let admin = client_as("admin").await;
    let ns = namespace("stall").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    add_knob("stallClones", "stallp-2:RestoreInProgress").await;
    let mut req = request(&ns, "stallp", "gold", 3);
    req.options.timeout = Duration::from_secs(4);
    let recorder = Recorder::default();
    let started = Instant::now();
    let failure = incomplete(
        create_pool(&admin, &req, recorder.sink())
            .await
            .unwrap_err(),
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(12), "gave up in time: {took:?}");

    assert_eq!(failure.created, ["stallp-1", "stallp-3"]);
    assert_eq!(failure.failed.len(), 1);
    let failed = &failure.failed[0];
    assert_eq!(failed.member, "stallp-2");
    assert!(failed.timed_out);
    for needle in [
        "timed out after 4s",
        "VirtualMachineClone \"corral-vdi-clone-stallp-2\"",
        "still in phase RestoreInProgress (restoring the snapshot into the target)",
        &format!("kubectl get virtualmachineclone -n {ns}"),
    ] {
        assert!(
            failed.message.contains(needle),
            "{needle:?} in {}",
            failed.message
        );
    }
    assert!(failure.leftovers.is_empty(), "{:?}", failure.leftovers);
    let err = Error::PoolIncomplete(Box::new(failure.clone()));
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(
        err.to_string()
            .contains("2 of 3 members exist (stallp-1, stallp-3)"),
        "{err}"
    );
    assert!(
        err.suggestion()
            .unwrap()
            .contains("corral-vdi pool delete stallp"),
        "{err:?}"
    );

    let last = recorder.member("stallp-2").last().unwrap().1.clone();
    assert_eq!(last.step, CreateStep::Failed);
    assert!(last.done && last.error.is_some());
    assert_eq!(last.phase.as_deref(), Some("RestoreInProgress"));

    let after = world(&ns).await;
    assert!(
        after.clones.is_empty(),
        "the stalled clone was deleted: {:?}",
        after.clones
    );
    assert!(!after.vms.contains_key("stallp-2"));
    for member in ["stallp-1", "stallp-3"] {
        assert_member_ready(&admin, &ns, "stallp", member).await;
    }
}

#[tokio::test]
async fn a_failed_clone_reports_its_condition_message_at_once() {
    let admin = client_as("admin").await;
    let ns = namespace("fail").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    add_knob("failClones", "failp-1").await;
    let mut req = request(&ns, "failp", "gold", 2);
    req.options.timeout = Duration::from_secs(60);
    let recorder = Recorder::default();
    let started = Instant::now();
    let failure = incomplete(
        create_pool(&admin, &req, recorder.sink())
            .await
            .unwrap_err(),
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "no waiting for the timeout"
    );
    assert_eq!(failure.created, ["failp-2"]);
    assert_eq!(failure.failed[0].member, "failp-1");
    assert!(!failure.failed[0].timed_out);
    assert!(
        failure.failed[0]
            .message
            .contains("VirtualMachineClone \"corral-vdi-clone-failp-1\" failed: clone failed (emulated failure)"),
        "{}",
        failure.failed[0].message
    );
    // Reported as soon as KubeVirt said so, before the cleanup ran.
    let (when, first_failed) = recorder
        .member("failp-1")
        .into_iter()
        .find(|(_, p)| p.step == CreateStep::Failed)
        .unwrap();
    assert_eq!(first_failed.phase.as_deref(), Some("Failed"));
    assert!(when.duration_since(started) < Duration::from_secs(10));

    let after = world(&ns).await;
    assert!(after.clones.is_empty(), "{:?}", after.clones);
    assert!(!after.vms.contains_key("failp-1"));
    assert_member_ready(&admin, &ns, "failp", "failp-2").await;
}

fn clone_rule() -> Value {
    json!({ "apiGroups": ["clone.kubevirt.io"], "resources": ["virtualmachineclones"],
            "verbs": ["get", "list", "watch", "create", "delete"] })
}

#[tokio::test]
async fn a_member_that_cannot_be_labelled_is_deleted_or_reported_exactly() {
    // carol may read VMs and clone them here, but not patch VMs: every label patch is refused.
    let ns = namespace("nolabel").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    grant_role(
        &ns,
        "carol",
        json!([clone_rule(),
               { "apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"], "verbs": ["delete"] }]),
    )
    .await;
    let carol = client_as("carol").await;
    let failure = incomplete(
        create_pool(&carol, &request(&ns, "nl", "gold", 2), |_| {})
            .await
            .unwrap_err(),
    );
    assert!(failure.created.is_empty());
    assert_eq!(failure.failed.len(), 2);
    for f in &failure.failed {
        assert!(
            f.message.contains("could not be labelled") && f.message.contains("forbidden"),
            "{}",
            f.message
        );
        assert!(
            f.message.ends_with("the unlabelled VM was deleted"),
            "{}",
            f.message
        );
    }
    assert!(failure.leftovers.is_empty(), "{:?}", failure.leftovers);
    let err = Error::PoolIncomplete(Box::new(failure));
    assert!(
        err.to_string()
            .contains("was not created: no member was made"),
        "{err}"
    );
    let after = world(&ns).await;
    assert_eq!(
        after.vms.keys().collect::<Vec<_>>(),
        ["gold"],
        "no unlabelled member left"
    );
    assert!(after.clones.is_empty());

    // Without the right to delete VMs either, the unlabelled VM stays and is named exactly.
    let ns = namespace("nodelete").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    grant_role(&ns, "carol", json!([clone_rule()])).await;
    let failure = incomplete(
        create_pool(&carol, &request(&ns, "nd", "gold", 1), |_| {})
            .await
            .unwrap_err(),
    );
    assert!(failure.created.is_empty());
    assert!(
        failure.failed[0]
            .message
            .contains("could not be deleted either")
    );
    assert_eq!(failure.leftovers.len(), 1, "{:?}", failure.leftovers);
    assert!(
        failure.leftovers[0].contains(&format!(
            "VirtualMachine {ns}/nd-1 exists without the pool label"
        )) && failure.leftovers[0].contains(&format!("kubectl delete vm -n {ns} nd-1")),
        "{}",
        failure.leftovers[0]
    );
    let after = world(&ns).await;
    assert!(after.clones.is_empty());
    assert!(
        !after.vms["nd-1"].contains_key(POOL_LABEL),
        "reported, and indeed unlabelled"
    );
}

#[tokio::test]
async fn an_rbac_denial_changes_nothing() {
    // bob may read clones but not create them.
    let ns = namespace("denied").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    let before = world(&ns).await;
    let bob = client_as("bob").await;
    let err = create_pool(&bob, &request(&ns, "bp", "gold", 3), |_| {})
        .await
        .unwrap_err();
    // Refused up front (a SelfSubjectAccessReview), naming the permission that is missing.
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot create pool \"bp\": RBAC does not let you create \
             virtualmachineclones.clone.kubevirt.io in namespace \"{ns}\"; nothing was changed"
        )
    );
    assert!(
        err.suggestion().is_some_and(|s| s.contains("RBAC access")),
        "{err:?}"
    );
    assert_eq!(world(&ns).await, before);
}

#[tokio::test]
async fn two_creators_race_and_exactly_one_wins() {
    let ns = namespace("race").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    for round in 0..3 {
        let pool = format!("race{round}");
        // Two clients, as two processes would have.
        let (a, b) = (client_as("admin").await, client_as("admin").await);
        let req = request(&ns, &pool, "gold", 4);
        let started = Instant::now();
        let (ra, rb) = tokio::join!(
            async {
                let r = create_pool(&a, &req, |_| {}).await;
                (r, started.elapsed())
            },
            async {
                let r = create_pool(&b, &req, |_| {}).await;
                (r, started.elapsed())
            },
        );
        let (won, (lost, lost_after)) = match (ra, rb) {
            ((Ok(won), _), (Err(lost), t)) | ((Err(lost), t), (Ok(won), _)) => (won, (lost, t)),
            ((a, _), (b, _)) => panic!("round {round}: expected one winner: {a:?} / {b:?}"),
        };
        eprintln!("round {round}: the loser stopped after {lost_after:?}: {lost}");
        assert_eq!(won.members.len(), 4);
        assert_eq!(lost.kind(), ErrorKind::Conflict, "{lost}");
        assert!(lost.to_string().contains("already exists"), "{lost}");
        assert!(
            lost_after < Duration::from_secs(10),
            "the loser stopped quickly"
        );
        let admin = client_as("admin").await;
        for member in &won.members {
            assert_member_ready(&admin, &ns, &pool, member).await;
        }
        let after = world(&ns).await;
        assert!(after.clones.is_empty(), "{:?}", after.clones);
        let labelled = after
            .vms
            .values()
            .filter(|l| l.get(POOL_LABEL) == Some(&pool))
            .count();
        assert_eq!(labelled, 4, "the loser deleted nothing of the winner's");
    }
}

#[tokio::test]
async fn a_leftover_clone_of_an_aborted_run_is_found_before_new_clones_start() {
    let admin = client_as("admin").await;
    let ns = namespace("aborted").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    // What an aborted run leaves: a clone object of this pool, still pending (its source is
    // gone), that would produce left-2 some day.
    let leftover: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": { "name": clone_name("left-2"), "namespace": ns,
                      "labels": { POOL_LABEL: "left", MEMBER_LABEL: "left-2", RUN_LABEL: "0123456789abcdef" } },
        "spec": { "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "gone" },
                  "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "left-2" } }
    }))
    .unwrap();
    corral_tests::clones(&admin, &ns)
        .create(&PostParams::default(), &leftover)
        .await
        .unwrap();
    // And one made by hand, with another name, that targets left-3.
    let by_hand: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": { "name": "manual", "namespace": ns },
        "spec": { "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "gone" },
                  "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "hand-3" } }
    }))
    .unwrap();
    corral_tests::clones(&admin, &ns)
        .create(&PostParams::default(), &by_hand)
        .await
        .unwrap();
    let before = world(&ns).await;

    let err = create_pool(&admin, &request(&ns, "left", "gold", 3), |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "VirtualMachineClone \"corral-vdi-clone-left-2\" already exists in namespace \"{ns}\" and targets member \"left-2\" (with no phase yet)"
        )),
        "{text}"
    );
    assert!(text.contains("aborted one left it behind"), "{text}");
    assert!(
        err.suggestion()
            .unwrap()
            .contains("corral-vdi pool delete left"),
        "{err:?}"
    );
    let err = create_pool(&admin, &request(&ns, "hand", "gold", 3), |_| {})
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("\"manual\"") && err.to_string().contains("member \"hand-3\""),
        "{err}"
    );
    assert_eq!(world(&ns).await, before, "no clone started");

    // pool delete removes the leftover; then the pool can be made.
    let clock = ServerClock::measure(&admin).await.unwrap();
    let deleted = delete_pool(
        &admin,
        &DeletePool {
            namespace: ns.clone(),
            name: "left".into(),
            force: false,
        },
        &clock,
    )
    .await
    .unwrap();
    assert_eq!(deleted.clones, [clone_name("left-2")]);
    assert!(deleted.members.is_empty());
    create_pool(&admin, &request(&ns, "left", "gold", 3), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn delete_refuses_assigned_members_unless_forced_and_is_idempotent() {
    let admin = client_as("admin").await;
    let ns = namespace("delete").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    create_pool(&admin, &request(&ns, "gone", "gold", 3), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // gone-2 assigned (label); gone-3 being claimed by bob (active Lease, no label).
    let vms = Api::<VirtualMachine>::namespaced(admin.clone(), &ns);
    vms.patch(
        "gone-2",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { ASSIGNED_TO_LABEL: "alice" } } })),
    )
    .await
    .unwrap();
    let now = Timestamp::now();
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(lease_name("gone-3")),
            labels: Some(BTreeMap::from([
                (POOL_LABEL.to_owned(), "gone".to_owned()),
                (MEMBER_LABEL.to_owned(), "gone-3".to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("bob".into()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(3600),
            ..Default::default()
        }),
    };
    Api::<Lease>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let before = world(&ns).await;
    let clock = ServerClock::measure(&admin).await.unwrap();
    let mut req = DeletePool {
        namespace: ns.clone(),
        name: "gone".into(),
        force: false,
    };

    let err = delete_pool(&admin, &req, &clock).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        err.to_string(),
        format!(
            "pool \"gone\" in namespace \"{ns}\" has assigned members: gone-2 (assigned to alice, \
             label only), gone-3 (claim in progress or stuck, Lease held by bob)"
        )
    );
    assert!(err.suggestion().unwrap().contains("--force"));
    assert_eq!(world(&ns).await, before, "a refused delete deletes nothing");

    req.force = true;
    let deleted = delete_pool(&admin, &req, &clock).await.unwrap();
    assert_eq!(deleted.members, ["gone-1", "gone-2", "gone-3"]);
    assert_eq!(deleted.leases, [lease_name("gone-3")]);
    assert!(deleted.clones.is_empty());
    assert_eq!(deleted.forced, ["gone-2 (alice)", "gone-3 (bob)"]);
    let after = world(&ns).await;
    assert_eq!(after.vms.keys().collect::<Vec<_>>(), ["gold"]);
    assert!(after.leases.is_empty());

    // Twice: nothing to delete, and that is a success.
    let again = delete_pool(&admin, &req, &clock).await.unwrap();
    assert!(again.is_empty(), "{again:?}");
    req.force = false;
    assert!(delete_pool(&admin, &req, &clock).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_cancelled_create_removes_its_unfinished_clones_and_says_what_exists() {
    let admin = client_as("admin").await;
    let ns = namespace("cancel").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    add_knob("stallClones", "cancp-2").await;
    let cancel = CancelHandle::new();
    let mut req = request(&ns, "cancp", "gold", 2);
    req.options.timeout = Duration::from_secs(120);
    req.options.cancel = Some(cancel.clone());
    // Cancel as soon as the first member is done (as a Ctrl-C or a Cancel button would).
    let progress = move |e: CreateProgress| {
        if let CreateProgress::Member(p) = e
            && p.member == "cancp-1"
            && p.step == CreateStep::Done
        {
            cancel.cancel();
        }
    };
    let started = Instant::now();
    let failure = incomplete(create_pool(&admin, &req, progress).await.unwrap_err());
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "stopped at once"
    );
    assert_eq!(failure.created, ["cancp-1"]);
    assert_eq!(failure.failed.len(), 1);
    assert!(
        failure.failed[0].message.starts_with(
            "cancelled while waiting for VirtualMachineClone \"corral-vdi-clone-cancp-2\" (in phase SnapshotInProgress)"
        ),
        "{}",
        failure.failed[0].message
    );
    let after = world(&ns).await;
    assert!(after.clones.is_empty(), "{:?}", after.clones);
    assert!(!after.vms.contains_key("cancp-2"));
    assert_member_ready(&admin, &ns, "cancp", "cancp-1").await;
}

#[tokio::test]
async fn bounded_clone_concurrency_queues_members() {
    let admin = client_as("admin").await;
    let ns = namespace("bounded").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    let mut req = request(&ns, "one-by-one", "gold", 3);
    req.options.clone_concurrency = Some(1);
    let recorder = Recorder::default();
    let created = create_pool(&admin, &req, recorder.sink())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(created.members.len(), 3);
    // With one clone in flight, each member's clone is created after the previous one is done.
    let order: Vec<(String, CreateStep)> = recorder
        .events()
        .into_iter()
        .filter_map(|(_, e)| match e {
            CreateProgress::Member(p)
                if matches!(p.step, CreateStep::CloneCreated | CreateStep::Done) =>
            {
                Some((p.member, p.step))
            }
            _ => None,
        })
        .collect();
    let expected: Vec<(String, CreateStep)> = created
        .members
        .iter()
        .flat_map(|m| {
            [
                (m.clone(), CreateStep::CloneCreated),
                (m.clone(), CreateStep::Done),
            ]
        })
        .collect();
    assert_eq!(order, expected);
    for member in &created.members {
        assert!(
            recorder
                .member(member)
                .iter()
                .any(|(_, p)| p.step == CreateStep::Queued)
        );
    }
}
