//! The clone run: a pool cloned, labelled, stopped and unassigned; a stalled clone timing out,
//! an outright clone failure, a label patch that RBAC refuses, bounded clone concurrency, and a
//! cancelled create removing its unfinished clones.

use std::time::{Duration, Instant};

use corral_tests::{add_knob, client_as, eventually, golden_vm, grant_role, namespace};
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};
use vdi_core::Error;
use vdi_core::clock::ServerClock;
use vdi_core::error::ErrorKind;
use vdi_core::names::{CLAIMED_AT_ANNOTATION, POOL_LABEL};
use vdi_core::pool::{CancelHandle, CreateProgress, CreateStep, clone_name, create_pool};
use vdi_core::resources::VirtualMachine;
use vdi_core::scope::Scope;
use vdi_core::state::MemberState;
use vdi_core::watch::list_pools;

use crate::{Recorder, assert_member_ready, incomplete, request, world};

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
async fn a_password_in_the_golden_vms_user_data_is_said_when_the_pool_is_made() {
    let admin = client_as("admin").await;
    let ns = namespace("secrets").await;
    golden_vm(&ns, "gold", "Halted", |vm| {
        vm["spec"]["template"]["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "name": "init", "cloudInitNoCloud": {
                "userData": "#cloud-config\npassword: hunter2\nchpasswd: { expire: false }\n" } }));
    })
    .await;
    let created = create_pool(
        &admin,
        &request(&ns, "sp", "gold", 1),
        Recorder::default().sink(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(created.members, ["sp-1"], "a warning, not a refusal");
    assert!(
        created.warnings.iter().any(|w| w.contains(
            "golden VM \"gold\" has cloud-init userData with what looks like a secret (volume init"
        ) && w.contains("userDataSecretRef")),
        "{:?}",
        created.warnings
    );
    assert!(
        !created.warnings.iter().any(|w| w.contains("hunter2")),
        "the secret is not repeated"
    );
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
    // The stalled clone never finishes: that the create ends at all is its 4 s timeout at work;
    // the bound is a loaded machine's (three clones and the cleanup).
    assert!(took < Duration::from_secs(40), "gave up in time: {took:?}");

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
    // Well below the 60 s timeout, with a loaded machine's room.
    assert!(
        started.elapsed() < Duration::from_secs(45),
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
    assert!(when.duration_since(started) < Duration::from_secs(45));

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
    // Well below the 120 s timeout, with a loaded machine's room.
    assert!(
        started.elapsed() < Duration::from_secs(90),
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
