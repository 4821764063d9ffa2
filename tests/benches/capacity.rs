//! Benchmark (prints figures; asserts only correctness): GPU and host-device capacity
//! admission on a cluster of 500 nodes with 8 device types and 5,000 running VMIs that hold
//! devices through their virt-launcher pods.
//!
//! Every object is created through the API (the KubeVirt emulation is off, so the API server
//! serves only this workload): the KubeVirt CR's permits, 500 nodes reporting two device types
//! each (16 of each allocatable), 5,000 VMIs with `status.nodeName` and one `gpus[]` entry, and
//! their 5,000 launcher pods bound to the node, phase Running.
//!
//! Figures (medians): the read (the four lists in parallel and the snapshot built from them),
//! the arithmetic alone (a plan for one and for two device types, the cluster view), and a
//! whole preview (golden VM read + cluster read + arithmetic).
//!
//! Run: `make bench` (or `cargo bench -p corral-tests --bench capacity`).

use std::collections::HashMap;
use std::time::Instant;

use corral_tests::measure::median;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ObjectList;
use sandbox::devices::{DeviceNode, PermitKind, apply_node, permit};
use serde_json::json;
use vdi_core::capacity::objects::{KubeVirtObject, NodeObject, PodObject, VmiObject};
use vdi_core::capacity::{ClusterDevices, Demand, cluster_view, plan, read_devices};
use vdi_core::pool::capacity_preview;

const NODES: usize = 500;
const VMIS: usize = 5_000;
const TYPES: usize = 8;
const PER_NODE: u32 = 16;
const NAMESPACE: &str = "bench";

fn device(t: usize) -> String {
    format!("nvidia.com/BENCH_TYPE_{t}")
}

/// Runs `make` for each of `0..n`, 48 at a time; fails on the first error.
async fn create_all<F, Fut>(n: usize, make: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let results: Vec<anyhow::Result<()>> = futures::stream::iter((0..n).map(make))
        .buffer_unordered(48)
        .collect()
        .await;
    results.into_iter().collect()
}

async fn setup(admin: &Client) -> anyhow::Result<()> {
    for t in 0..TYPES {
        let kind = if t % 2 == 0 {
            PermitKind::Pci
        } else {
            PermitKind::Mediated
        };
        permit(admin, kind, &device(t), "10DE:1EB8", false).await?;
    }
    let started = Instant::now();
    create_all(NODES, |i| async move {
        let node = DeviceNode::new(&format!("bench-node-{i:03}"))
            .devices(&device(i % TYPES), PER_NODE + 2, PER_NODE)
            .device(&device((i + 1) % TYPES), PER_NODE);
        apply_node(admin, &node).await
    })
    .await?;
    println!(
        "setup: {NODES} nodes with {TYPES} device types in {:.1?}",
        started.elapsed()
    );

    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let vmis = sandbox::bootstrap::dynamic(
        admin,
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
        NAMESPACE,
    );
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let started = Instant::now();
    create_all(VMIS, |j| {
        let (vmis, pods) = (vmis.clone(), pods.clone());
        async move {
            let node = format!("bench-node-{:03}", j % NODES);
            let resource = device((j % NODES) % TYPES);
            let name = format!("desk-{j:04}");
            let vmi: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": { "name": name, "namespace": NAMESPACE },
                "spec": { "domain": { "devices": { "gpus": [{ "name": "gpu0", "deviceName": resource }] } } },
                "status": { "phase": "Running", "nodeName": node },
            }))?;
            let vmi = vmis.create(&PostParams::default(), &vmi).await?;
            let uid = vmi.metadata.uid.unwrap_or_default();
            let pod_name = format!("virt-launcher-{name}-bench");
            let pod: Pod = serde_json::from_value(json!({
                "metadata": { "name": pod_name, "namespace": NAMESPACE, "labels": {
                    "kubevirt.io": "virt-launcher", "kubevirt.io/created-by": uid } },
                "spec": { "nodeName": node, "containers": [{
                    "name": "compute", "image": "sandbox.invalid/virt-launcher:bench",
                    "resources": { "limits": { resource.as_str(): "1", "devices.kubevirt.io/kvm": "1" } } }] },
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
            pods.patch_status(
                &pod_name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": { "phase": "Running" } })),
            )
            .await?;
            Ok(())
        }
    })
    .await?;
    println!(
        "setup: {VMIS} running VMIs and their launcher pods in {:.1?}",
        started.elapsed()
    );

    let vms = sandbox::bootstrap::dynamic(
        admin,
        "kubevirt.io",
        "v1",
        "VirtualMachine",
        "virtualmachines",
        NAMESPACE,
    );
    for (name, devices) in [
        ("gold-1", vec![device(0)]),
        ("gold-2", vec![device(0), device(1)]),
    ] {
        let gpus: Vec<serde_json::Value> = devices
            .iter()
            .enumerate()
            .map(|(i, d)| json!({ "name": format!("gpu{i}"), "deviceName": d }))
            .collect();
        let vm: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": { "name": name, "namespace": NAMESPACE },
            "spec": { "runStrategy": "Halted", "template": { "spec": { "domain": { "devices": { "gpus": gpus } } } } },
        }))?;
        vms.create(&PostParams::default(), &vm).await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let shared = corral_tests::start(|o| o.emulate = false)?;
    let admin = sandbox::kubeconfig::client(&shared.kubeconfig, "admin").await?;
    setup(&admin).await?;

    let mut reads = Vec::new();
    let mut devices = None;
    for _ in 0..7 {
        let started = Instant::now();
        let read = read_devices(&admin).await?;
        reads.push(started.elapsed());
        devices = Some(read);
    }
    let devices = devices.expect("read");
    anyhow::ensure!(
        devices.nodes.len() == NODES + 1,
        "{} nodes",
        devices.nodes.len()
    );
    let held: u32 = devices
        .holds
        .iter()
        .map(|h| {
            h.resources
                .iter()
                .filter(|(r, _)| r.starts_with("nvidia.com/"))
                .map(|(_, n)| n)
                .sum::<u32>()
        })
        .sum();
    anyhow::ensure!(held as usize == VMIS, "{held} devices held");
    println!(
        "read (KubeVirt CR, {} nodes, {VMIS} launcher pods, {VMIS} VMIs, in parallel; parsed into the snapshot): median {:.1?} of 7 ({reads:.1?})",
        NODES + 1,
        median(reads.clone())
    );

    // Where the read's time goes: each list alone (API server and transfer), and parsing the
    // four answers into the snapshot (client).
    let lists = [
        ("/apis/kubevirt.io/v1/kubevirts", ""),
        ("/api/v1/nodes", ""),
        ("/api/v1/pods", "kubevirt.io=virt-launcher"),
        ("/apis/kubevirt.io/v1/virtualmachineinstances", ""),
    ];
    let mut texts = Vec::new();
    for (path, selector) in lists {
        let mut samples = Vec::new();
        let mut text = String::new();
        for _ in 0..5 {
            let params = kube::api::ListParams::default().labels(selector);
            let request = kube::core::Request::new(path).list(&params)?;
            let started = Instant::now();
            text = admin.request_text(request).await?;
            samples.push(started.elapsed());
        }
        println!(
            "  list {path}: median {:.1?} of 5, {:.1} MiB",
            median(samples),
            text.len() as f64 / (1024.0 * 1024.0)
        );
        texts.push(text);
    }
    let mut samples = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        let kubevirts: ObjectList<KubeVirtObject> = serde_json::from_str(&texts[0])?;
        let nodes: ObjectList<NodeObject> = serde_json::from_str(&texts[1])?;
        let pods: ObjectList<PodObject> = serde_json::from_str(&texts[2])?;
        let vmis: ObjectList<VmiObject> = serde_json::from_str(&texts[3])?;
        let snapshot = ClusterDevices::from_objects(
            Ok(kubevirts.items),
            nodes.items,
            Ok(pods.items),
            Ok(vmis.items),
        );
        samples.push(started.elapsed());
        anyhow::ensure!(snapshot.holds.len() == VMIS);
    }
    println!(
        "  parsing the four answers into the snapshot: median {:.1?} of 7",
        median(samples)
    );

    let spec = |n: usize| {
        let gpus: Vec<serde_json::Value> = (0..n)
            .map(|t| json!({ "name": format!("gpu{t}"), "deviceName": device(t) }))
            .collect();
        json!({ "domain": { "devices": { "gpus": gpus } } })
    };
    for types in [1, 2] {
        let demand = Demand::from_spec(NAMESPACE, "gold", &spec(types));
        let mut samples = Vec::new();
        let mut last = None;
        for _ in 0..51 {
            let started = Instant::now();
            let p = plan(&devices, &demand, 500);
            samples.push(started.elapsed());
            last = Some(p);
        }
        let p = last.expect("plan");
        // Type 0 is each node's first type on every 8th node and its second on the nodes
        // before those; the ten VMIs of each node hold its first type.
        let first = (0..NODES).filter(|i| i % TYPES == 0).count() as u32;
        let second = (0..NODES).filter(|i| (i + 1) % TYPES == 0).count() as u32;
        let held = first * (VMIS / NODES) as u32;
        if types == 1 {
            anyhow::ensure!(
                p.placeable == (first + second) * PER_NODE - held,
                "{}",
                p.placeable
            );
        }
        println!(
            "arithmetic: plan for a pool of 500, {types} device type{} per VM: median {:.2?} of 51 (room for {}, admitted: {})",
            if types == 1 { "" } else { "s" },
            median(samples),
            p.placeable,
            p.admitted
        );
    }

    let pools = HashMap::new();
    let mut samples = Vec::new();
    for _ in 0..21 {
        let started = Instant::now();
        let view = cluster_view(&devices, &pools);
        samples.push(started.elapsed());
        anyhow::ensure!(view.nodes.len() == NODES + 1);
    }
    println!(
        "arithmetic: cluster view ({} nodes, {VMIS} holders): median {:.2?} of 21",
        NODES + 1,
        median(samples)
    );

    let mut samples = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let p = capacity_preview(&admin, NAMESPACE, "gold-2", 100).await?;
        samples.push(started.elapsed());
        anyhow::ensure!(p.needs.len() == 2);
    }
    println!(
        "whole preview (golden VM read + cluster read + arithmetic), 2 device types: median {:.1?} of 5",
        median(samples)
    );
    Ok(())
}
