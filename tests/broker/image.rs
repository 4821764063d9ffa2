//! The broker's image (issue 39 item 3), built here as CI can (no registry, no base image):
//! `scripts/broker-image.sh` makes its root file system from Debian packages and writes an OCI
//! image layout; the test unpacks the image's layer into a fresh root, as a container runtime
//! would, gives it what the kubelet gives a pod (the ServiceAccount's token, the cluster's CA and
//! the namespace at /var/run/secrets/kubernetes.io/serviceaccount, `KUBERNETES_SERVICE_HOST` and
//! `_PORT`, `POD_NAME`), and runs the image's entrypoint in it (chroot, as user 65532, with an
//! empty environment otherwise) against the sandbox, while the sandbox's own replicas are
//! stopped: it leads, and grants alice's claim.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use corral_tests::{client_as, desktop_member, eventually, namespace, stdout_of};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use sandbox::broker::Signal;
use serde_json::Value;
use vdi_core::names::{BROKER_NAME, BROKER_NAMESPACE};

use crate::{CONVERGE, claim, leader, replicas_mine, wait_granted};

/// The identity the image's broker runs as (its `POD_NAME`).
const POD: &str = "corral-vdi-broker-image-test";

/// `program`, run as root: itself when the tests run as root, else through `sudo -n` (chroot
/// needs root, as the installers' test does).
fn as_root(program: &str) -> Command {
    let uid = Command::new("id").arg("-u").output().expect("run id -u");
    if String::from_utf8_lossy(&uid.stdout).trim() == "0" {
        Command::new(program)
    } else {
        let mut cmd = Command::new("sudo");
        cmd.args(["-n", program]);
        cmd
    }
}

/// `text` decoded from base64 (coreutils' `base64 -d`, fed on its standard input).
fn base64_decoded(text: &str) -> Vec<u8> {
    let mut child = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run base64");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "base64 -d: {}", out.status);
    out.stdout
}

/// The blob `digest` (`sha256:…`) of the image layout at `oci`, parsed as JSON.
fn blob_json(oci: &Path, digest: &str) -> Value {
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    serde_json::from_slice(&std::fs::read(oci.join("blobs/sha256").join(hex)).unwrap()).unwrap()
}

/// What the kubelet mounts into a pod: a token of the broker's ServiceAccount (TokenRequest),
/// the cluster's CA (from the sandbox's kubeconfig) and the namespace.
async fn service_account_files(dir: &Path) {
    let admin = client_as("admin").await;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // The shortest the API server issues.
            expiration_seconds: Some(600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin, BROKER_NAMESPACE)
        .create_token_request(BROKER_NAME, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let kubeconfig = kube::config::Kubeconfig::read_from(&crate::with_broker().kubeconfig).unwrap();
    let ca = kubeconfig.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.certificate_authority_data.clone())
        .expect("the sandbox's kubeconfig carries its CA");
    let ca = base64_decoded(&ca);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("token"), token).unwrap();
    std::fs::write(dir.join("ca.crt"), ca).unwrap();
    std::fs::write(dir.join("namespace"), BROKER_NAMESPACE).unwrap();
}

/// Starts the image's entrypoint and command in `root` as its config says (user, entrypoint,
/// cmd), with the pod's environment (`server`: the API server's `host:port`), the health and
/// metrics ports moved off the Deployment's; its standard error goes to `log`.
fn start_in_chroot(root: &Path, config: &Value, server: &str, log: &Path) -> Child {
    let (host, port) = server.rsplit_once(':').expect("host:port");
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let user = config["config"]["User"].as_str().unwrap();
    // `env -i` with the pod's environment only (sudo would drop it anyway), then chroot, each
    // exec'ing the next: as root the child is the broker itself.
    let mut cmd = as_root("env");
    cmd.arg("-i")
        // A runtime's default PATH, as in a container without an Env of its own.
        .arg("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .arg(format!("KUBERNETES_SERVICE_HOST={host}"))
        .arg(format!("KUBERNETES_SERVICE_PORT={port}"))
        .arg(format!("POD_NAME={POD}"))
        .arg("RUST_LOG=info")
        .arg("chroot")
        .arg(format!("--userspec={user}"))
        .arg(root)
        .args(strings(&config["config"]["Entrypoint"]))
        .args(strings(&config["config"]["Cmd"]))
        // The Deployment's own ports (8080, 8081) may be taken on a workstation.
        .args(["--bind-address", "127.0.0.1", "--metrics-port", "0"])
        .args(["--health-port", "0"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    cmd.spawn()
        .expect("start the image's entrypoint in its root")
}

#[tokio::test]
async fn the_image_built_from_debian_packages_runs_in_cluster_leads_and_grants() {
    let _mine = replicas_mine().await;
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let work = std::env::temp_dir().join(format!(
        "corral-broker-image-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    ));
    // Only this user reaches the ServiceAccount's token in it (the chrooted broker reads it
    // from inside its root, whose folders the layer opens to everyone).
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&work)
        .unwrap();
    let out = work.join("image");
    let binary = corral_tests::target_dir().join("corral-vdi-broker");
    let digest = stdout_of(
        Command::new(repo.join("scripts/broker-image.sh"))
            .args(["--binary".as_ref(), binary.as_os_str()])
            .args(["--out".as_ref(), out.as_os_str()]),
    )
    .trim()
    .to_owned();

    // The layout as a registry would take it: index → manifest (the digest printed) → config
    // and one layer, each blob named by its content's digest.
    let oci = out.join("oci");
    let index: Value = serde_json::from_slice(&std::fs::read(oci.join("index.json")).unwrap())
        .expect("index.json");
    assert_eq!(index["manifests"][0]["digest"], digest.as_str());
    let manifest = blob_json(&oci, &digest);
    let config = blob_json(&oci, manifest["config"]["digest"].as_str().unwrap());
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/corral-vdi-broker"])
    );
    for blob in [&manifest["config"], &manifest["layers"][0]] {
        let hex = blob["digest"]
            .as_str()
            .unwrap()
            .strip_prefix("sha256:")
            .unwrap();
        let path = oci.join("blobs/sha256").join(hex);
        let sum = stdout_of(Command::new("sha256sum").arg(&path));
        assert!(sum.starts_with(hex), "{path:?} does not match its digest");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            blob["size"].as_u64().unwrap()
        );
    }

    // A fresh root from the layer, as a runtime unpacks it, and the pod's mounts.
    let root = work.join("pod");
    std::fs::create_dir_all(&root).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let layer = oci
        .join("blobs/sha256")
        .join(layer.strip_prefix("sha256:").unwrap());
    stdout_of(
        Command::new("tar")
            .args(["--no-same-owner", "-xzf"])
            .arg(&layer)
            .arg("-C")
            .arg(&root),
    );
    service_account_files(&root.join("var/run/secrets/kubernetes.io/serviceaccount")).await;

    // The image's broker starts (a standby while a replica leads), then the sandbox's replicas
    // go, so that it leads once their Lease ends.
    let server = crate::with_broker().server.trim_start_matches("https://");
    let log_path = work.join("broker.log");
    let mut broker = start_in_chroot(&root, &config, server, &log_path);
    let admin = client_as("admin").await;
    let brokers = corral_tests::brokers();
    brokers.signal_all(Signal::Kill).unwrap();

    let checked = tokio::spawn(async move {
        let admin = client_as("admin").await;
        let (_, duration) = leader(&admin).await;
        let within = Duration::from_secs(u64::try_from(duration).unwrap_or(15)) + CONVERGE;
        eventually("the image's broker leads", within, || async {
            (leader(&admin).await.0.as_deref() == Some(POD)).then_some(())
        })
        .await;
        let ns = namespace("image").await;
        desktop_member(&ns, "img", "img-1", true).await;
        claim("alice", &ns, "img").await;
        wait_granted(&ns, "img-1", "alice", CONVERGE).await;
    })
    .await;

    // Whatever happened, the image's broker goes (SIGTERM, which sudo passes on, then SIGKILL)
    // and the sandbox's replicas come back.
    let exited = broker.try_wait().unwrap();
    let pid = broker.id().to_string();
    let _ = as_root("kill").args(["-TERM", &pid]).status();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while broker.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = as_root("kill").args(["-KILL", &pid]).status();
            let _ = broker.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    std::fs::remove_dir_all(&work).unwrap();
    for i in 0..brokers.replicas().len() {
        brokers.start(i).await.unwrap();
    }
    brokers.wait_ready(&admin).await.unwrap();
    assert!(
        exited.is_none(),
        "the image's broker exited ({exited:?}):\n{log}"
    );
    if let Err(e) = checked {
        panic!("{e}\nthe image's broker's log:\n{log}");
    }
}
