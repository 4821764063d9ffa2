//! Runs that meet: two creators racing (exactly one wins), and the leftover clone of an aborted
//! run found before new clones start.

use std::time::{Duration, Instant};

use corral_tests::{client_as, golden_vm, namespace};
use kube::api::{DynamicObject, PostParams};
use serde_json::json;
use vdi_core::clock::ServerClock;
use vdi_core::error::ErrorKind;
use vdi_core::names::{MEMBER_LABEL, POOL_LABEL};
use vdi_core::pool::{DeletePool, RUN_LABEL, clone_name, create_pool, delete_pool};

use crate::{assert_member_ready, request, world};

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
        // Well below the default clone timeout (120 s), with a loaded machine's room.
        assert!(
            lost_after < Duration::from_secs(30),
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
