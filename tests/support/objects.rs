//! What tests put in a namespace and read back: golden VMs, pool members (a few, or a site's
//! thousands), running desktops and their power, annotations, the emulator's knobs, and the
//! untyped APIs of VMs, VMIs, Leases and clones.

use std::time::Duration;

use anyhow::{Result, anyhow};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::Value;
use serde_json::json;

use crate::{client_as, eventually};

/// Creates a golden VM `name` in `ns` as admin (spec [`sandbox::bootstrap::golden_spec`] with
/// run strategy `strategy`, label `app: desktop`), after `tweak` has had its way with the
/// object, and waits until the emulator reports what pool create checks: its power state
/// (`Stopped`, or `Running` for `Always`) and its `volumeSnapshotStatuses`.
pub async fn golden_vm(
    ns: &str,
    name: &str,
    strategy: &str,
    tweak: impl FnOnce(&mut serde_json::Value),
) -> vdi_core::resources::VirtualMachine {
    use vdi_core::resources::VirtualMachine;
    let admin = client_as("admin").await;
    let mut object = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": { "name": name, "namespace": ns, "labels": { "app": "desktop" } },
        "spec": sandbox::bootstrap::golden_spec(strategy, name),
    });
    tweak(&mut object);
    let vm: VirtualMachine = serde_json::from_value(object).expect("a VirtualMachine");
    let api: Api<VirtualMachine> = Api::namespaced(admin, ns);
    api.create(&PostParams::default(), &vm)
        .await
        .unwrap_or_else(|e| panic!("create golden VM {name}: {e}"));
    let power = if strategy == "Always" {
        "Running"
    } else {
        "Stopped"
    };
    eventually(
        &format!("golden VM {name} {power} with snapshot statuses"),
        Duration::from_secs(20),
        || async {
            let vm = api.get(name).await.ok()?;
            let reported = vm
                .status
                .as_ref()
                .is_some_and(|s| s.other.contains_key("volumeSnapshotStatuses"));
            (vm.printable_status() == power && reported).then_some(vm)
        },
    )
    .await
}

/// Adds `entry` to the comma-separated knob `key` of the emulator's ConfigMap (shared by the
/// tests of a binary: read-modify-write with the resourceVersion, retried on conflict). Use
/// per-target entries (names unique to the test), since tests run in parallel.
pub async fn add_knob(key: &str, entry: &str) {
    let admin = client_as("admin").await;
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(admin, "kubevirt");
    let name = sandbox::emulator::knobs::CONFIG_MAP;
    loop {
        let result = match api.get_opt(name).await.unwrap() {
            None => {
                let cm = k8s_openapi::api::core::v1::ConfigMap {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.into()),
                        ..Default::default()
                    },
                    data: Some(std::collections::BTreeMap::from([(
                        key.to_owned(),
                        entry.to_owned(),
                    )])),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm).await.map(|_| ())
            }
            Some(mut cm) => {
                let data = cm.data.get_or_insert_with(std::collections::BTreeMap::new);
                let value = data.entry(key.to_owned()).or_default();
                if !value.is_empty() {
                    value.push(',');
                }
                value.push_str(entry);
                api.replace(name, &PostParams::default(), &cm)
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("set knob {key}: {e}"),
        }
    }
}

/// Creates the members `<pool>-1 ..= <pool>-<size>` in `ns` as `client`: stopped (`Halted`)
/// VirtualMachines labelled with the pool, as a Phase 1 pool or a finished `pool create` has
/// them.
///
/// Errors: the API server's refusal of any create.
pub async fn pool_vms(client: &Client, ns: &str, pool: &str, size: usize) -> kube::Result<()> {
    use vdi_core::names::POOL_LABEL;
    use vdi_core::resources::{VirtualMachine, VirtualMachineSpec};
    let api: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    for i in 1..=size {
        let mut vm = VirtualMachine::new(
            &format!("{pool}-{i}"),
            VirtualMachineSpec {
                run_strategy: Some("Halted".into()),
                ..Default::default()
            },
        );
        vm.metadata.labels = Some([(POOL_LABEL.to_owned(), pool.to_owned())].into());
        api.create(&PostParams::default(), &vm).await?;
    }
    open_to(client, ns, pool).await;
    Ok(())
}

/// Entitles everyone who may claim in `ns` to `pool`, as `pool create` does by default (SPEC
/// "Entitlements"): what a label-only pool made by hand needs in `corral-vms`, where pools are
/// entitled one by one (a test's own namespace entitles every pool:
/// `sandbox::bootstrap::entitle_every_pool`).
pub async fn open_to_everyone(ns: &str, pool: &str) {
    open_to(&client_as("admin").await, ns, pool).await;
}

/// [`open_to_everyone`] on the cluster of `admin` (an administrator's client).
pub async fn open_to(admin: &Client, ns: &str, pool: &str) {
    vdi_core::entitlement::entitle(
        admin,
        ns,
        pool,
        &[vdi_core::entitlement::Who::Everyone],
        "admin",
    )
    .await
    .unwrap_or_else(|e| panic!("entitle everyone to pool {pool} in {ns}: {e}"));
}

/// [`pool_vms`], then waits (60 s at most) until the emulator has reported each member
/// Stopped, as for a pool made earlier (a status update in flight would cost a claim a retry).
///
/// Errors: a refused create or list; a member not Stopped after 60 s.
pub async fn stopped_pool(client: &Client, ns: &str, pool: &str, size: usize) -> Result<()> {
    use vdi_core::names::POOL_LABEL;
    use vdi_core::resources::VirtualMachine;
    pool_vms(client, ns, pool, size).await?;
    let api: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let selector = kube::api::ListParams::default().labels(&format!("{POOL_LABEL}={pool}"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while api
        .list(&selector)
        .await?
        .items
        .iter()
        .any(|vm| vm.printable_status() != "Stopped")
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "pool {pool} in {ns} never reported Stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Creates the pools numbered `pools` (`pool0000`, `pool0001`, …) with `per_pool` stopped
/// members each (`pool0000-1 ..= pool0000-<per_pool>`) in `ns` as `client`, 48 creates at a
/// time: the scale the list and UI benchmarks and the 10,000-VM GUI test use. Returns how many
/// VMs it created.
///
/// Errors: the first refused create (the others still run).
pub async fn many_pools(
    client: &Client,
    ns: &str,
    pools: std::ops::Range<usize>,
    per_pool: usize,
) -> Result<usize> {
    use futures::StreamExt;
    use vdi_core::names::POOL_LABEL;
    use vdi_core::resources::{VirtualMachine, VirtualMachineSpec};
    let api: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let results: Vec<kube::Result<()>> =
        futures::stream::iter((pools.start * per_pool..pools.end * per_pool).map(|i| {
            let api = api.clone();
            async move {
                let pool = format!("pool{:04}", i / per_pool);
                let mut vm = VirtualMachine::new(
                    &format!("{pool}-{}", i % per_pool + 1),
                    VirtualMachineSpec {
                        run_strategy: Some("Halted".into()),
                        ..Default::default()
                    },
                );
                vm.metadata.labels = Some([(POOL_LABEL.to_owned(), pool)].into());
                api.create(&PostParams::default(), &vm).await.map(|_| ())
            }
        }))
        .buffer_unordered(48)
        .collect()
        .await;
    let created = results.iter().filter(|r| r.is_ok()).count();
    match results.into_iter().find_map(|r| r.err()) {
        Some(e) => Err(anyhow!(
            "{} of {} VM creates in {ns} failed, first: {e}",
            pools.len() * per_pool - created,
            pools.len() * per_pool
        )),
        None => Ok(created),
    }
}

/// The VirtualMachines of `ns`, untyped.
pub fn vms(client: &Client, ns: &str) -> Api<DynamicObject> {
    sandbox::bootstrap::dynamic(
        client,
        "kubevirt.io",
        "v1",
        "VirtualMachine",
        "virtualmachines",
        ns,
    )
}

/// The Leases of `ns`, untyped: a Lease with a time beyond what the typed one decodes (the
/// hostile data tests plant such) is still read and written.
pub fn leases(client: &Client, ns: &str) -> Api<DynamicObject> {
    sandbox::bootstrap::dynamic(client, "coordination.k8s.io", "v1", "Lease", "leases", ns)
}

/// The VirtualMachineClones (clone.kubevirt.io v1beta1) of `ns`, untyped.
pub fn clones(client: &Client, ns: &str) -> Api<DynamicObject> {
    sandbox::bootstrap::dynamic(
        client,
        "clone.kubevirt.io",
        "v1beta1",
        "VirtualMachineClone",
        "virtualmachineclones",
        ns,
    )
}

/// The VirtualMachineInstances of `ns`, untyped.
pub fn vmis(client: &Client, ns: &str) -> Api<DynamicObject> {
    sandbox::bootstrap::dynamic(
        client,
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
        ns,
    )
}

/// A running desktop `name` in `ns` (the golden spec, started), after `tweak`; waits for
/// Running.
pub async fn running_vm(ns: &str, name: &str, tweak: impl FnOnce(&mut Value)) {
    let admin = client_as("admin").await;
    let mut object = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": { "name": name, "namespace": ns, "annotations": {} },
        "spec": sandbox::bootstrap::golden_spec("Always", name),
    });
    tweak(&mut object);
    let vm: DynamicObject = serde_json::from_value(object).unwrap();
    vms(&admin, ns)
        .create(&PostParams::default(), &vm)
        .await
        .unwrap();
    wait_power(ns, name, "Running").await;
}

/// Waits (20 s at most) until VM `name` in `ns` has printableStatus `want`.
pub async fn wait_power(ns: &str, name: &str, want: &str) {
    let api = vms(&client_as("admin").await, ns);
    eventually(
        &format!("{name} {want}"),
        Duration::from_secs(20),
        || async {
            let vm = api.get(name).await.ok()?;
            (vm.data.pointer("/status/printableStatus") == Some(&json!(want))).then_some(())
        },
    )
    .await;
}

/// Sets (or, with `None`, removes) annotation `key` of VM `name` in `ns`, as admin.
pub async fn annotate(ns: &str, name: &str, key: &str, value: Option<&str>) {
    vms(&client_as("admin").await, ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { key: value } } })),
        )
        .await
        .unwrap();
}

/// A stopped pool member `<pool>-<i>` made from the golden spec (so it has a graphics device,
/// a network interface and, unless `passthrough` is false, USB client passthrough).
pub async fn desktop_member(ns: &str, pool: &str, name: &str, passthrough: bool) {
    let admin = client_as("admin").await;
    let mut spec = sandbox::bootstrap::golden_spec("Halted", name);
    if !passthrough
        && let Some(devices) = spec
            .pointer_mut("/template/spec/domain/devices")
            .and_then(Value::as_object_mut)
    {
        devices.remove("clientPassthrough");
    }
    let object = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": { "name": name, "namespace": ns,
                      "labels": { vdi_core::names::POOL_LABEL: pool } },
        "spec": spec,
    });
    let vm: DynamicObject = serde_json::from_value(object).unwrap();
    vms(&admin, ns)
        .create(&PostParams::default(), &vm)
        .await
        .unwrap();
    open_to_everyone(ns, pool).await;
    wait_power(ns, name, "Stopped").await;
}

/// `member`'s claim state in `ns` as the CLI and the app show it (the pools list, judged with
/// the API server's clock), read with `client`.
pub async fn member_state(client: &Client, ns: &str, member: &str) -> vdi_core::state::MemberState {
    let clock = vdi_core::clock::ServerClock::measure(client).await.unwrap();
    let scope = vdi_core::scope::Scope::Namespace(ns.into());
    vdi_core::watch::list_pools(client, &scope, &clock)
        .await
        .unwrap()
        .iter()
        .flat_map(|p| &p.members)
        .find(|m| m.name == member)
        .map(|m| m.state)
        .unwrap_or_else(|| panic!("{member} is not a member in {ns}"))
}
