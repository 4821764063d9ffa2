//! The broker's Helm chart (broker/chart, issue 39 item 3): Helm (built from the Go module proxy
//! by scripts/install-deps.sh) renders the same objects `corral-vdi broker install --print`
//! prints, for the default settings and for namespaces and an image chosen; its optional
//! ServiceMonitor selects the broker's pods and its dashboard asks for metrics the broker
//! serves; and what it renders, applied to the sandbox, is what `broker status` calls installed
//! (the image chosen included), and `broker uninstall` removes it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use corral_tests::{cli_binary, namespace, stdout_of};
use k8s_openapi::serde::Deserialize;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use vdi_core::broker::{self, BrokerState};
use vdi_core::guard::{self, GuardState};
use vdi_core::manifests::{Verdict, resource_of};

use crate::{client, serial};

/// A private registry's image, as an administrator names it.
const IMAGE: &str = "registry.example.com/vdi/corral-vdi-broker:0.1.0";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// YAML documents as objects keyed by (kind, namespace, name), each as JSON.
fn objects(yaml: &str) -> BTreeMap<(String, String, String), Value> {
    let mut found = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value: Value = Value::deserialize(doc).expect("a YAML document");
        if value.is_null() {
            continue;
        }
        let key = (
            value["kind"].as_str().unwrap_or_default().to_owned(),
            value["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            value["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        assert!(found.insert(key.clone(), value).is_none(), "{key:?} twice");
    }
    found
}

/// `helm template` of the chart with `--set` values (scripts/install-deps.sh builds helm into
/// `$CORRAL_CACHE_DIR/tools/bin`, which `make test` puts on PATH).
fn helm_template(sets: &[&str]) -> String {
    let mut cmd = Command::new("helm");
    cmd.args(["template", "corral-vdi-broker"])
        .arg(repo().join("broker/chart"));
    for set in sets {
        cmd.args(["--set", set]);
    }
    stdout_of(&mut cmd)
}

/// `corral-vdi broker install --print` with `args`.
fn cli_print(args: &[&str]) -> String {
    let mut cmd = Command::new(cli_binary());
    cmd.args(["broker", "install", "--print"]).args(args);
    stdout_of(&mut cmd)
}

#[test]
fn the_chart_renders_what_broker_install_writes() {
    for (sets, args) in [
        (vec![], vec![]),
        (
            vec!["namespaces={corral-vms,team-b}", &*format!("image={IMAGE}")],
            vec!["-n", "corral-vms", "-n", "team-b", "--image", IMAGE],
        ),
    ] {
        let chart = objects(&helm_template(&sets));
        let cli = objects(&cli_print(&args));
        let only = |a: &BTreeMap<_, Value>, b: &BTreeMap<_, Value>| -> Vec<_> {
            a.keys().filter(|k| !b.contains_key(*k)).cloned().collect()
        };
        assert_eq!(only(&chart, &cli), Vec::new(), "only the chart has these");
        assert_eq!(only(&cli, &chart), Vec::new(), "only the CLI has these");
        for (key, object) in &cli {
            assert_eq!(&chart[key], object, "{key:?} differs ({sets:?})");
        }
        // Checked in the comparison: the chart's objects carry the manifests' digests, and
        // the image chosen runs and is named.
        let deployment = &chart[&(
            "Deployment".to_owned(),
            "corral-vdi-system".to_owned(),
            "corral-vdi-broker".to_owned(),
        )];
        let image = deployment["spec"]["template"]["spec"]["containers"][0]["image"].clone();
        assert_eq!(
            deployment["metadata"]["annotations"]["corral.dev/broker-digest"],
            broker::manifest_digest().as_str()
        );
        if sets.is_empty() {
            assert_eq!(image, broker::default_image().unwrap().as_str());
            assert!(deployment["metadata"]["annotations"]["corral.dev/broker-image"].is_null());
        } else {
            assert_eq!(image, IMAGE);
            assert_eq!(
                deployment["metadata"]["annotations"]["corral.dev/broker-image"],
                IMAGE
            );
        }
    }
    // A bad image is refused by the CLI, printing nothing.
    let out = Command::new(cli_binary())
        .args(["broker", "install", "--print", "--image", "Broker:latest"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("image \"Broker:latest\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_charts_service_monitor_selects_the_broker_and_its_dashboard_asks_for_its_metrics() {
    let rendered = objects(&helm_template(&[
        "serviceMonitor.enabled=true",
        "grafanaDashboard.enabled=true",
        "metricsPort=9100",
    ]));
    let find = |kind: &str, name: &str| -> &Value {
        rendered
            .iter()
            .find(|((k, _, n), _)| k == kind && n == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let deployment = find("Deployment", "corral-vdi-broker");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "metrics" && p["containerPort"] == 9100),
        "{container}"
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.windows(2).any(|w| w == ["--metrics-port", "9100"]),
        "{args:?}"
    );
    // The Service selects the Deployment's pods; the ServiceMonitor selects the Service and
    // scrapes its metrics port.
    let service = find("Service", "corral-vdi-broker-metrics");
    for (key, value) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&pod_labels[key], value, "the Service selects {key}={value}");
    }
    let monitor = find("ServiceMonitor", "corral-vdi-broker");
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][key], value);
    }
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(service["spec"]["ports"][0]["name"], "metrics");
    // Every metric the dashboard queries is one the broker registers (crates/broker's
    // metrics: corral_vdi_ and the name it registers, histograms and counters by their
    // series' suffixes).
    let dashboard = find("ConfigMap", "corral-vdi-broker-dashboard");
    let json: Value = serde_json::from_str(
        dashboard["data"]["corral-vdi-broker.json"]
            .as_str()
            .unwrap(),
    )
    .expect("the dashboard is JSON");
    let served = std::fs::read_to_string(repo().join("crates/broker/src/metrics.rs")).unwrap();
    let mut asked = 0;
    for panel in json["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for name in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter_map(|w| w.strip_prefix("corral_vdi_"))
            {
                let base = ["_bucket", "_total"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(name);
                assert!(
                    served.contains(&format!("\"{base}\"")),
                    "the dashboard asks for corral_vdi_{name}, which the broker does not serve"
                );
                asked += 1;
            }
        }
    }
    assert!(asked >= 9, "the dashboard asks for {asked} metrics");
}

/// Server-side applies `object` as Helm 4 does (its own field manager, conflicts forced).
async fn apply(admin: &Client, object: &DynamicObject) {
    let resource = resource_of(object).unwrap();
    let api: Api<DynamicObject> = match object.namespace() {
        Some(ns) => Api::namespaced_with(admin.clone(), &ns, &resource),
        None => Api::all_with(admin.clone(), &resource),
    };
    api.patch(
        &object.name_any(),
        &PatchParams::apply("helm").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {} {}: {e}", resource.kind, object.name_any()));
}

#[tokio::test]
async fn the_chart_applied_is_what_broker_status_calls_installed() {
    let _serial = serial().await;
    let admin = client("admin").await;
    // Whatever the checks find, the guard and the broker go again: the tests after this one
    // start without them.
    let checked = tokio::spawn(chart_applied(admin.clone())).await;
    broker::uninstall(&admin).await.unwrap();
    guard::uninstall(&admin).await.unwrap();
    crate::wait_none_enforced().await;
    if let Err(e) = checked {
        std::panic::resume_unwind(e.into_panic());
    }
    assert_eq!(
        broker::status(&admin).await.unwrap().state,
        BrokerState::Absent
    );
    assert_eq!(
        broker::manifest_status(&admin).await.unwrap().verdict,
        Some(Verdict::Absent)
    );
}

/// [`the_chart_applied_is_what_broker_status_calls_installed`]'s checks.
async fn chart_applied(admin: Client) {
    let admin = &admin;
    let ns = namespace("chart").await;
    let rendered = helm_template(&[&format!("namespaces={{{ns}}}"), &format!("image={IMAGE}")]);
    let objects = objects(&rendered);
    // In the order Helm installs them (namespaces and definitions first, as it sorts).
    let order = [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ];
    let rank = |kind: &str| order.iter().position(|k| *k == kind).unwrap_or(order.len());
    let mut sorted: Vec<&Value> = objects.values().collect();
    sorted.sort_by_key(|o| rank(o["kind"].as_str().unwrap()));
    for object in sorted {
        let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        apply(admin, &object).await;
    }

    assert_eq!(
        guard::status(admin).await.unwrap().state,
        GuardState::Installed
    );
    let manifests = broker::manifest_status(admin).await.unwrap();
    assert_eq!(
        manifests.verdict,
        Some(Verdict::Installed),
        "{}",
        manifests.summary
    );
    let served = broker::namespaces::served(admin).await.unwrap().unwrap();
    assert!(served.contains(&ns), "{served:?}");
    // An image changed by hand (no annotation naming it) is a change.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(admin.clone(), "corral-vdi-system");
    deployments
        .patch(
            "corral-vdi-broker",
            &PatchParams::default(),
            &Patch::Strategic(serde_json::json!({ "spec": { "template": { "spec": {
                "containers": [{ "name": "broker", "image": "elsewhere.example/broker:9" }] } } } })),
        )
        .await
        .unwrap();
    let manifests = broker::manifest_status(admin).await.unwrap();
    assert_eq!(
        manifests.verdict,
        Some(Verdict::Changed),
        "{}",
        manifests.summary
    );
    assert!(manifests.summary.contains("image"), "{}", manifests.summary);
}
